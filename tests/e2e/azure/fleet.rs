//! Three gateways over one account: DDL made through one is used through
//! the others within the catalog's refresh bound (2 s; the tests wait up to
//! a generous deadline and never time anything), concurrent CREATEs have
//! one winner, concurrent increments through different gateways lose no
//! update, and a table another application creates becomes visible.

use std::time::{Duration, Instant};

use tablegate_azure::AzureStore;
use tablegate_store::{EntityWrite, Operation, TableStore, Value};

use super::super::server::{TestServer, psql};
use super::{DropTable, azurite, psql_at, rows, runtime, serve, starts, unique};

/// Waits until `sql` through `s` succeeds and prints what `want` accepts.
fn eventually(s: &TestServer, sql: &str, want: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (out, err, ok) = psql_at(s, &[sql]);
        if ok && want(&out) {
            return out;
        }
        assert!(Instant::now() < deadline, "{sql}: {out}{err}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn azure_fleet_shares_ddl_and_loses_no_update() {
    let gateways = [serve(), serve(), serve()];
    let [a, b, c] = [&gateways[0].s, &gateways[1].s, &gateways[2].s];
    let t = unique("fleet");
    let _drop = DropTable::new(a, &t);
    let (_, err, ok) = psql(
        a,
        &[&format!(
            "CREATE TABLE {t} (pk text, rk text, v int, PRIMARY KEY (pk, rk))"
        )],
    );
    assert!(ok, "{err}");
    let count = format!("SELECT count(*) FROM {t}");
    for s in [b, c] {
        eventually(s, &count, |out| out.trim() == "0");
    }
    let (_, err, ok) = psql(b, &[&format!("INSERT INTO {t} VALUES ('a', 'r1', 0)")]);
    assert!(ok, "{err}");
    assert_eq!(rows(c, &format!("SELECT v FROM {t}")), ["0"]);

    // Increments through all three at once: each either lands or fails
    // with 40001 (the ETag it read is stale); none is lost.
    let bump = format!("UPDATE {t} SET v = v + 1 WHERE pk = 'a' AND rk = 'r1'");
    let landed: usize = std::thread::scope(|scope| {
        let workers: Vec<_> = [a, b, c]
            .into_iter()
            .map(|s| {
                let bump = &bump;
                scope.spawn(move || {
                    let mut landed = 0;
                    for _ in 0..15 {
                        let (out, err, ok) = psql(s, &["\\set VERBOSITY verbose", bump]);
                        if ok {
                            assert!(out.contains("UPDATE 1"), "{out}");
                            landed += 1;
                        } else {
                            assert!(err.contains("40001"), "{err}");
                        }
                    }
                    landed
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    assert!(landed > 0);
    assert_eq!(rows(a, &format!("SELECT v FROM {t}")), [landed.to_string()]);

    // ALTER through one, used through another.
    let (_, err, ok) = psql(c, &[&format!("ALTER TABLE {t} ADD COLUMN note text")]);
    assert!(ok, "{err}");
    eventually(a, &format!("SELECT note FROM {t}"), |_| true);
    let (_, err, ok) = psql(
        a,
        &[&format!(
            "UPDATE {t} SET note = 'seen' WHERE pk = 'a' AND rk = 'r1'"
        )],
    );
    assert!(ok, "{err}");
    eventually(b, &format!("SELECT note FROM {t}"), |out| {
        out.trim() == "seen"
    });

    // Two gateways create one name at once: one wins, the other is told.
    let u = unique("race");
    let _drop_u = DropTable::new(a, &u);
    let create = format!("CREATE TABLE {u} (pk text, rk text, PRIMARY KEY (pk, rk))");
    let outcomes: Vec<(String, bool)> = std::thread::scope(|scope| {
        let tries: Vec<_> = [a, b]
            .into_iter()
            .map(|s| {
                let create = &create;
                scope.spawn(move || {
                    let (_, err, ok) = psql(s, &["\\set VERBOSITY verbose", create]);
                    (err, ok)
                })
            })
            .collect();
        tries.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let won = outcomes.iter().filter(|(_, ok)| *ok).count();
    assert_eq!(won, 1, "{outcomes:#?}");
    let (err, _) = outcomes.iter().find(|(_, ok)| !ok).unwrap();
    assert!(err.contains("42P07"), "{err}");

    // DROP through one: the others stop seeing it.
    let (_, err, ok) = psql(b, &[&format!("DROP TABLE {t}")]);
    assert!(ok, "{err}");
    for s in [a, c] {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let (_, err, ok) = psql(s, &["\\set VERBOSITY verbose", &count]);
            if !ok && err.contains("42P01") {
                break;
            }
            assert!(Instant::now() < deadline, "{t} still visible: {err}");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// A table another application creates in the account while the gateways
/// run is attached (its columns inferred) without a restart.
#[test]
fn azure_table_created_elsewhere_becomes_visible() {
    let a = serve();
    let s = &a.s;
    let t = unique("late");
    let _drop = DropTable::new(s, &t);
    {
        // No server starts meanwhile (see `starts`); running gateways attach
        // a table only when a second refresh still finds it without a
        // definition, by when its entity is there.
        let _start = starts();
        runtime().block_on(async {
            let store = AzureStore::connect(&azurite(), None).await.unwrap();
            store.create_table(&t).await.unwrap();
            let write = EntityWrite::new("p", "r").with("Name", Value::String("Ann".into()));
            store
                .execute(&t, vec![Operation::Insert(write)].into())
                .await
                .unwrap();
        });
    }
    let out = eventually(
        s,
        &format!("SELECT partition_key, row_key, \"Name\" FROM {t}"),
        |_| true,
    );
    assert_eq!(out.trim(), "p|r|Ann");
}
