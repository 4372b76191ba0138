//! Acknowledged writes survive kill -9: a client loads by COPY and by
//! multi-row INSERT while the server is killed at random points; after a
//! restart every acknowledged statement is there in full, and no
//! entity-group transaction is partly there.

use std::io::Cursor;
use std::time::Duration;

use futures::SinkExt;
use tokio_postgres::NoTls;

use super::rng::Rng;
use super::server::TestServer;

/// A statement the client sent: its rows by PartitionKey (each
/// PartitionKey holds at most 100 rows, so each is one EGT).
struct Sent {
    keys: Vec<(String, String)>,
    acked: bool,
}

#[tokio::test]
async fn acknowledged_copy_and_insert_survive_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
    let mut next = move || rng.next();
    let mut sent: Vec<Sent> = Vec::new();
    for round in 0..4 {
        let s = TestServer::serve_in(dir.path(), &["--throttle", "off"]);
        let (c, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
        tokio::spawn(conn);
        if round == 0 {
            c.batch_execute("CREATE TABLE load (pk text, rk text, n int, PRIMARY KEY (pk, rk))")
                .await
                .unwrap();
        }
        // Kill the server after a random delay while the client writes.
        let delay = Duration::from_millis(150 + next() % 400);
        let killer = tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            s.kill9();
        });
        for stmt in 0.. {
            let id = format!("{round}-{stmt}");
            // Three PartitionKeys of up to 60 rows each.
            let mut keys = Vec::new();
            for p in 0..3 {
                for r in 0..(20 + next() % 40) {
                    keys.push((format!("s{id}-p{p}"), format!("r{r:03}")));
                }
            }
            sent.push(Sent {
                keys: keys.clone(),
                acked: false,
            });
            let ok = if stmt % 2 == 0 {
                let mut data = String::new();
                for (pk, rk) in &keys {
                    data.push_str(&format!("{pk}\t{rk}\t{stmt}\n"));
                }
                match c.copy_in("COPY load FROM STDIN").await {
                    Ok(sink) => {
                        futures::pin_mut!(sink);
                        sink.send(Cursor::new(data.into_bytes())).await.is_ok()
                            && sink.finish().await.is_ok()
                    }
                    Err(_) => false,
                }
            } else {
                let values: Vec<String> = keys
                    .iter()
                    .map(|(pk, rk)| format!("('{pk}', '{rk}', {stmt})"))
                    .collect();
                c.execute(
                    &format!("INSERT INTO load VALUES {}", values.join(", ")),
                    &[],
                )
                .await
                .is_ok()
            };
            if !ok {
                break;
            }
            sent.last_mut().unwrap().acked = true;
        }
        killer.await.unwrap();
    }
    // Restart and check.
    let s = TestServer::serve_in(dir.path(), &["--throttle", "off"]);
    let (c, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    let acked = sent.iter().filter(|s| s.acked).count();
    assert!(
        acked >= 4,
        "the client got statements through before the kills: {acked}"
    );
    for st in &sent {
        let mut pks: Vec<&str> = st.keys.iter().map(|(p, _)| p.as_str()).collect();
        pks.dedup();
        for pk in pks {
            let want = st.keys.iter().filter(|(p, _)| p == pk).count();
            let got = c
                .query("SELECT rk FROM load WHERE pk = $1", &[&pk])
                .await
                .unwrap()
                .len();
            if st.acked {
                assert_eq!(got, want, "acknowledged rows of {pk} lost");
            } else {
                assert!(
                    got == 0 || got == want,
                    "{pk}: {got} of {want} rows: a partial EGT"
                );
            }
        }
    }
}
