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

/// `tablegate index verify` on a stopped server's data: its last line and
/// whether it found the entries matching the rows.
fn verify_indexes(dir: &std::path::Path, table: &str) -> (String, bool) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tablegate"))
        .args(["index", "verify", table, "--data"])
        .arg(dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (format!("{stdout}{stderr}"), out.status.success())
}

#[tokio::test]
async fn index_entries_never_part_from_their_rows_across_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut writes = 0u64;
    for round in 0..4 {
        let s = TestServer::serve_in(dir.path(), &["--throttle", "off"]);
        if round == 0 {
            let (c, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
            tokio::spawn(conn);
            c.batch_execute(
                "CREATE TABLE people (org text, id int, team int, email text, PRIMARY KEY (org, id));
                 CREATE INDEX people_team ON people (team);
                 CREATE UNIQUE INDEX people_email ON people (email);
                 CREATE INDEX people_email_any ON people (email) GLOBAL",
            )
            .await
            .unwrap();
        }
        // Two writers: every statement form that changes indexed values.
        let mut tasks = Vec::new();
        for w in 0..2u64 {
            let (c, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
            tokio::spawn(conn);
            let mut seed = rng.next() ^ w;
            tasks.push(tokio::spawn(async move {
                let mut next = move || {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed
                };
                let mut done = 0u64;
                loop {
                    let org = format!("o{}", next() % 3);
                    let id = next() % 40;
                    let team = next() % 5;
                    let email = format!("e{}", next() % 60);
                    let sql = match next() % 6 {
                        0 => format!(
                            "INSERT INTO people VALUES ('{org}', {id}, {team}, '{email}') ON CONFLICT DO NOTHING"
                        ),
                        1 => format!(
                            "INSERT INTO people VALUES ('{org}', {id}, {team}, '{email}'), ('{org}', {}, {team}, 'x{email}') \
                             ON CONFLICT (org, id) DO UPDATE SET team = EXCLUDED.team, email = EXCLUDED.email",
                            (id + 1) % 40
                        ),
                        2 => format!("UPDATE people SET team = {team} WHERE org = '{org}' AND team = {}", next() % 5),
                        3 => format!("UPDATE people SET email = '{email}' WHERE org = '{org}' AND id = {id}"),
                        4 => format!("DELETE FROM people WHERE org = '{org}' AND team = {team} AND id > {id}"),
                        _ => format!(
                            "BEGIN; UPDATE people SET team = team + 1 WHERE org = '{org}' AND id = {id}; \
                             INSERT INTO people VALUES ('{org}', {}, 1, 'y{email}') ON CONFLICT DO NOTHING; COMMIT",
                            (id + 7) % 40
                        ),
                    };
                    let r = if next() % 7 == 0 {
                        // COPY: three rows, maybe over existing keys (23505).
                        let data: String = (0..3)
                            .map(|k| format!("{org}\t{}\t{team}\tc{k}{email}\n", (id + k) % 40))
                            .collect();
                        match c.copy_in("COPY people FROM STDIN").await {
                            Ok(sink) => {
                                futures::pin_mut!(sink);
                                match sink.send(Cursor::new(data.into_bytes())).await {
                                    Ok(()) => sink.finish().await.map(|_| ()),
                                    Err(e) => Err(e),
                                }
                            }
                            Err(e) => Err(e),
                        }
                    } else {
                        c.batch_execute(&sql).await
                    };
                    match r {
                        Ok(()) => done += 1,
                        // A unique violation or a conflict is an answer;
                        // a closed connection is the kill.
                        Err(e) if e.is_closed() || e.code().is_none() => return done,
                        Err(_) => {
                            let _ = c.batch_execute("ROLLBACK").await;
                        }
                    }
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(300 + rng.next() % 500)).await;
        s.kill9();
        for t in tasks {
            writes += t.await.unwrap();
        }
        // The last round's queued global index changes are left for the
        // restarted server to find.
        if round < 3 {
            let (report, ok) = verify_indexes(dir.path(), "people");
            assert!(ok, "round {round}: {report}");
            assert!(report.contains(": 0 missing, 0 stale"), "{report}");
        }
    }
    assert!(writes > 50, "the writers got {writes} statements through");
    // Lookups through the indexes answer what scans answer.
    let s = TestServer::serve_in(dir.path(), &["--throttle", "off"]);
    let (c, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    let count = |rows: Vec<tokio_postgres::SimpleQueryMessage>| {
        rows.into_iter()
            .filter_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::Row(r) => Some(format!(
                    "{}:{}",
                    r.get(0).unwrap_or(""),
                    r.get(1).unwrap_or("")
                )),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    // A query's rows with the indexes used (whatever they cost) and not.
    c.batch_execute("SET tablegate.use_indexes = force")
        .await
        .unwrap();
    let both = async |q: &str| {
        let with = count(c.simple_query(q).await.unwrap());
        c.batch_execute("SET tablegate.use_indexes = off")
            .await
            .unwrap();
        let without = count(c.simple_query(q).await.unwrap());
        c.batch_execute("SET tablegate.use_indexes = force")
            .await
            .unwrap();
        assert_eq!(with, without, "{q}");
        with.len()
    };
    let mut total = 0;
    for org in ["o0", "o1", "o2"] {
        for team in 0..6 {
            total += both(&format!(
                "SELECT id, email FROM people WHERE org = '{org}' AND team = {team} ORDER BY id"
            ))
            .await;
        }
    }
    assert!(total > 0, "no rows survived to compare");
    // The global index, across partitions, after the restart: its
    // queued changes were applied before these lookups.
    let mut found = 0;
    for e in (0..60).flat_map(|e| ["", "x", "y"].map(|p| format!("{p}e{e}"))) {
        found += both(&format!(
            "SELECT org, id FROM people WHERE email = '{e}' ORDER BY org, id"
        ))
        .await;
    }
    assert!(found > 0, "no rows found by email");
    let plan = c
        .simple_query("EXPLAIN ANALYZE SELECT org, id FROM people WHERE email = 'e1'")
        .await
        .unwrap();
    let plan: String = plan
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_owned),
            _ => None,
        })
        .collect();
    assert!(
        plan.contains("rows found through index people_email_any"),
        "{plan}"
    );
    let pending = c
        .simple_query("SELECT pending_partitions FROM tablegate.indexes WHERE index_name = 'people_email_any'")
        .await
        .unwrap();
    assert!(
        pending.iter().any(
            |m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(r) if r.get(0) == Some("0"))
        ),
        "the global index still has queued changes after lookups waited for them"
    );
    // Verify refuses a running server's data, and a table without indexes.
    let (report, ok) = verify_indexes(dir.path(), "people");
    assert!(!ok && report.contains("stop it first"), "{report}");
    drop(c);
    s.kill9();
    let (report, ok) = verify_indexes(dir.path(), "people");
    assert!(ok && report.contains(": 0 missing, 0 stale"), "{report}");
    let (report, ok) = verify_indexes(dir.path(), "nope");
    assert!(!ok && report.contains("does not exist"), "{report}");
}
