//! Writes over SQL with entity-group semantics: every statement
//! form through tokio-postgres and psql, transactions as one EGT, and
//! concurrent sessions that never lose an update.

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

use super::server::{TestServer, psql};

async fn connect(s: &TestServer) -> Client {
    let (client, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

fn code(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.code().code().to_owned())
        .unwrap_or_else(|| format!("not a server error: {e}"))
}

fn server() -> TestServer {
    TestServer::demo(&["--throttle", "off", "--runners", "1"])
}

const DDL: &str = "CREATE TABLE regs (race text, runner text, name text, age int, \
                   score double precision, note text DEFAULT 'none', PRIMARY KEY (race, runner))";

/// Rows of `race` as (runner, name, age, score, note).
type Reg = (
    String,
    Option<String>,
    Option<i32>,
    Option<f64>,
    Option<String>,
);

async fn rows(c: &Client, race: &str) -> Vec<Reg> {
    c.query(
        "SELECT runner, name, age, score, note FROM regs WHERE race = $1",
        &[&race],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
    .collect()
}

#[tokio::test]
async fn every_statement_form() {
    let s = server();
    let c = connect(&s).await;
    c.batch_execute(DDL).await.unwrap();

    // Multi-row INSERT, defaults and NULLs per column, RETURNING.
    let n = c
        .execute(
            "INSERT INTO regs (race, runner, name, age) VALUES ($1, 'BIB:1', 'Ann', 30), ($1, 'BIB:2', 'Bob', NULL)",
            &[&"boston"],
        )
        .await
        .unwrap();
    assert_eq!(n, 2);
    let ret = c
        .query(
            "INSERT INTO regs VALUES ('boston', 'BIB:3', 'Cy', 40, 1.5) RETURNING runner, note, etag",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(ret.len(), 1);
    assert_eq!(ret[0].get::<_, String>("note"), "none", "DEFAULT applied");
    let etag3: String = ret[0].get("etag");
    assert!(etag3.starts_with("W/\"datetime'"), "{etag3}");
    let got = rows(&c, "boston").await;
    assert_eq!(got.len(), 3);
    assert_eq!(
        got[1],
        (
            "BIB:2".into(),
            Some("Bob".into()),
            None,
            None,
            Some("none".into())
        )
    );

    // An existing key is 23505 with the key in the detail.
    let e = c
        .execute(
            "INSERT INTO regs (race, runner) VALUES ('boston', 'BIB:1')",
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(code(&e), "23505");
    let detail = e.as_db_error().unwrap().detail().unwrap().to_owned();
    assert_eq!(detail, "Key (race, runner)=(boston, BIB:1) already exists.");

    // ON CONFLICT DO UPDATE of the supplied columns: InsertOrMerge keeps
    // the columns it does not name.
    c.execute(
        "INSERT INTO regs (race, runner, name) VALUES ('boston', 'BIB:3', 'Cyd') \
         ON CONFLICT (race, runner) DO UPDATE SET name = EXCLUDED.name",
        &[],
    )
    .await
    .unwrap();
    // (note has a DEFAULT, so this one reads and merges; same outcome)
    let got = rows(&c, "boston").await;
    assert_eq!(
        got[2],
        (
            "BIB:3".into(),
            Some("Cyd".into()),
            Some(40),
            Some(1.5),
            Some("none".into())
        )
    );
    // Setting every column is InsertOrReplace: unnamed ones are cleared.
    c.execute(
        "INSERT INTO regs (race, runner, name) VALUES ('boston', 'BIB:3', 'Cyril') \
         ON CONFLICT (race, runner) DO UPDATE SET name = EXCLUDED.name, age = EXCLUDED.age, \
         score = EXCLUDED.score, note = EXCLUDED.note",
        &[],
    )
    .await
    .unwrap();
    let got = rows(&c, "boston").await;
    assert_eq!(
        got[2],
        (
            "BIB:3".into(),
            Some("Cyril".into()),
            None,
            None,
            Some("none".into())
        )
    );
    // An expression over the current row reads, then merges.
    c.execute(
        "INSERT INTO regs (race, runner, age) VALUES ('boston', 'BIB:1', 1) \
         ON CONFLICT (race, runner) DO UPDATE SET age = regs.age + EXCLUDED.age",
        &[],
    )
    .await
    .unwrap();
    assert_eq!(rows(&c, "boston").await[0].2, Some(31));
    // DO NOTHING inserts only the absent keys.
    let n = c
        .execute(
            "INSERT INTO regs (race, runner, name) VALUES ('boston', 'BIB:1', 'x'), ('boston', 'BIB:4', 'Di') ON CONFLICT DO NOTHING",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(rows(&c, "boston").await[0].1.as_deref(), Some("Ann"));

    // UPDATE and DELETE with parameters; counts are rows matched.
    let n = c
        .execute(
            "UPDATE regs SET score = $1 WHERE race = 'boston' AND runner >= $2",
            &[&9.5f64, &"BIB:2"],
        )
        .await
        .unwrap();
    assert_eq!(n, 3);
    // WHERE etag = '...' is If-Match: a stale ETag affects 0 rows.
    let etag: String = c
        .query_one(
            "SELECT etag FROM regs WHERE race = 'boston' AND runner = 'BIB:2'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let stale = c
        .execute(
            "UPDATE regs SET name = 'stale' WHERE race = 'boston' AND runner = 'BIB:3' AND etag = $1",
            &[&etag3],
        )
        .await
        .unwrap();
    assert_eq!(stale, 0, "BIB:3 changed since etag3 was read");
    let fresh = c
        .execute(
            "UPDATE regs SET name = 'Bobby' WHERE race = 'boston' AND runner = 'BIB:2' AND etag = $1",
            &[&etag],
        )
        .await
        .unwrap();
    assert_eq!(fresh, 1);
    let again = c
        .execute(
            "DELETE FROM regs WHERE race = 'boston' AND runner = 'BIB:2' AND etag = $1",
            &[&etag],
        )
        .await
        .unwrap();
    assert_eq!(again, 0, "the update changed the ETag");
    // UPDATE without a key predicate still works (full scan).
    let n = c
        .execute("UPDATE regs SET note = 'seen' WHERE age IS NULL", &[])
        .await
        .unwrap();
    assert_eq!(n, 3);
    let deleted = c
        .query(
            "DELETE FROM regs WHERE race = 'boston' AND runner = 'BIB:4' RETURNING name",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(deleted[0].get::<_, String>(0), "Di");
    assert_eq!(rows(&c, "boston").await.len(), 3);

    // Errors with the right SQLSTATEs.
    for (sql, want) in [
        ("UPDATE regs SET race = 'x'", "0A000"),
        ("UPDATE regs SET etag = 'x'", "428C9"),
        (
            "INSERT INTO regs (race, runner, age) VALUES ('a', 'b', 'old')",
            "22P02",
        ),
        (
            "INSERT INTO regs (race, runner, age) VALUES ('a', 'b', 3000000000)",
            "22003",
        ),
        (
            "INSERT INTO regs (race, runner) VALUES ('a/b', 'c')",
            "22023",
        ),
        (
            "INSERT INTO regs (race, name) VALUES ('a', 'no row key')",
            "23502",
        ),
        (
            "UPDATE regs SET age = age / 0 WHERE race = 'boston'",
            "22012",
        ),
        ("INSERT INTO nope VALUES (1)", "42P01"),
        (
            "INSERT INTO regs (race, runner, nope) VALUES ('a', 'b', 1)",
            "42703",
        ),
        (
            "INSERT INTO regs (race, runner) VALUES ('a', 'b'), ('a', 'b') ON CONFLICT (race, runner) DO UPDATE SET name = 'x'",
            "21000",
        ),
    ] {
        let e = c.execute(sql, &[]).await.unwrap_err();
        assert_eq!(code(&e), want, "{sql}: {e:?}");
    }
}

#[tokio::test]
async fn transactions_are_one_entity_group_transaction() {
    let s = server();
    let c = connect(&s).await;
    c.batch_execute(DDL).await.unwrap();

    // The seeds' race registration: the BIB: and AGE: rows of one runner,
    // written together or not at all. Reads inside see own writes.
    c.batch_execute("BEGIN").await.unwrap();
    c.execute(
        "INSERT INTO regs (race, runner, name, age) VALUES ('nyc', 'BIB:00042__Ann', 'Ann', 34)",
        &[],
    )
    .await
    .unwrap();
    c.execute(
        "INSERT INTO regs (race, runner, name, age) VALUES ('nyc', 'AGE:034__BIB:00042__Ann', 'Ann', 34)",
        &[],
    )
    .await
    .unwrap();
    c.execute(
        "UPDATE regs SET score = 1 WHERE race = 'nyc' AND runner LIKE 'BIB:%'",
        &[],
    )
    .await
    .unwrap();
    let other = connect(&s).await;
    assert!(
        rows(&other, "nyc").await.is_empty(),
        "nothing visible before COMMIT"
    );
    let inside = rows(&c, "nyc").await;
    assert_eq!(inside.len(), 2);
    assert_eq!(inside[1].3, Some(1.0), "own update visible");
    c.batch_execute("COMMIT").await.unwrap();
    let after = rows(&other, "nyc").await;
    assert_eq!(after.len(), 2);
    assert_eq!(
        after[1],
        (
            "BIB:00042__Ann".into(),
            Some("Ann".into()),
            Some(34),
            Some(1.0),
            Some("none".into())
        )
    );

    // 101 distinct entities fail at the 101st; nothing is applied.
    c.batch_execute("BEGIN").await.unwrap();
    let ins = c
        .prepare("INSERT INTO regs (race, runner) VALUES ('big', $1)")
        .await
        .unwrap();
    for i in 0..100 {
        c.execute(&ins, &[&format!("r{i:03}")]).await.unwrap();
    }
    let e = c.execute(&ins, &[&"r100"]).await.unwrap_err();
    assert_eq!(code(&e), "54000", "{e:?}");
    let e = c
        .execute("SELECT 1 FROM regs WHERE race = 'big'", &[])
        .await
        .unwrap_err();
    assert_eq!(code(&e), "25P02");
    c.batch_execute("COMMIT").await.unwrap(); // a failed transaction rolls back
    assert!(rows(&c, "big").await.is_empty());

    // A cross-partition write fails and aborts the transaction.
    c.batch_execute("BEGIN").await.unwrap();
    c.execute("INSERT INTO regs (race, runner) VALUES ('p1', 'a')", &[])
        .await
        .unwrap();
    let e = c
        .execute("INSERT INTO regs (race, runner) VALUES ('p2', 'a')", &[])
        .await
        .unwrap_err();
    assert_eq!(code(&e), "0A000");
    assert!(
        e.as_db_error()
            .unwrap()
            .hint()
            .unwrap()
            .contains("PartitionKey")
    );
    let e = c
        .execute("INSERT INTO regs (race, runner) VALUES ('p1', 'b')", &[])
        .await
        .unwrap_err();
    assert_eq!(code(&e), "25P02");
    c.batch_execute("ROLLBACK").await.unwrap();
    assert!(rows(&c, "p1").await.is_empty());

    // A conflict at COMMIT is 40001 and nothing is applied.
    c.batch_execute("BEGIN").await.unwrap();
    c.execute(
        "UPDATE regs SET age = 35 WHERE race = 'nyc' AND runner = 'BIB:00042__Ann'",
        &[],
    )
    .await
    .unwrap();
    c.execute(
        "INSERT INTO regs (race, runner, name) VALUES ('nyc', 'BIB:00043__Bo', 'Bo')",
        &[],
    )
    .await
    .unwrap();
    other
        .execute(
            "UPDATE regs SET note = 'changed' WHERE race = 'nyc' AND runner = 'BIB:00042__Ann'",
            &[],
        )
        .await
        .unwrap();
    let e = c.batch_execute("COMMIT").await.unwrap_err();
    assert_eq!(code(&e), "40001", "{e:?}");
    // The failed COMMIT ended the transaction, as in PostgreSQL: the
    // session is idle (not 25P02), with no ROLLBACK needed.
    let after = rows(&c, "nyc").await;
    assert_eq!(after.len(), 2, "Bo was not inserted: {after:?}");
    assert_eq!(after[1].2, Some(34));
    assert_eq!(after[1].4.as_deref(), Some("changed"));

    // The same over the extended protocol (tokio-postgres' `execute`).
    c.batch_execute("BEGIN").await.unwrap();
    c.execute(
        "UPDATE regs SET age = 36 WHERE race = 'nyc' AND runner = 'BIB:00042__Ann'",
        &[],
    )
    .await
    .unwrap();
    other
        .execute(
            "UPDATE regs SET note = 'again' WHERE race = 'nyc' AND runner = 'BIB:00042__Ann'",
            &[],
        )
        .await
        .unwrap();
    let e = c.execute("COMMIT", &[]).await.unwrap_err();
    assert_eq!(code(&e), "40001", "{e:?}");
    let after = rows(&c, "nyc").await;
    assert_eq!(after[1].2, Some(34), "nothing of the failed COMMIT applied");
    assert_eq!(after[1].4.as_deref(), Some("again"));
    // A new transaction starts cleanly and commits.
    c.batch_execute("BEGIN").await.unwrap();
    c.execute(
        "UPDATE regs SET age = 37 WHERE race = 'nyc' AND runner = 'BIB:00042__Ann'",
        &[],
    )
    .await
    .unwrap();
    c.execute("COMMIT", &[]).await.unwrap();
    assert_eq!(rows(&other, "nyc").await[1].2, Some(37));
}

/// SAVEPOINT, ROLLBACK TO and RELEASE inside the transaction's EGT, over
/// both protocols (psycopg and SQLAlchemy use them on connect); ROLLBACK
/// TO ends a failed state as in PostgreSQL.
#[tokio::test]
async fn savepoints_inside_a_transaction() {
    let s = server();
    let c = connect(&s).await;
    c.batch_execute(DDL).await.unwrap();
    let e = c.batch_execute("SAVEPOINT a").await.unwrap_err();
    assert_eq!(code(&e), "25P01", "{e:?}");
    c.batch_execute("BEGIN").await.unwrap();
    c.execute("INSERT INTO regs (race, runner) VALUES ('sp', 'r1')", &[])
        .await
        .unwrap();
    c.batch_execute("SAVEPOINT a").await.unwrap();
    // Extended protocol inside the savepoint.
    c.execute(
        "INSERT INTO regs (race, runner) VALUES ($1, $2)",
        &[&"sp", &"r2"],
    )
    .await
    .unwrap();
    assert_eq!(rows(&c, "sp").await.len(), 2);
    c.batch_execute("ROLLBACK TO SAVEPOINT a").await.unwrap();
    assert_eq!(rows(&c, "sp").await.len(), 1);
    // A failed statement, then ROLLBACK TO: the transaction goes on.
    let e = c
        .execute("INSERT INTO regs (race, runner) VALUES ('sp', 'r1')", &[])
        .await
        .unwrap_err();
    assert_eq!(code(&e), "23505", "{e:?}");
    let e = c.execute("SELECT 1", &[]).await.unwrap_err();
    assert_eq!(code(&e), "25P02", "{e:?}");
    c.batch_execute("ROLLBACK TO a").await.unwrap();
    c.execute("INSERT INTO regs (race, runner) VALUES ('sp', 'r3')", &[])
        .await
        .unwrap();
    c.batch_execute("RELEASE a").await.unwrap();
    let e = c.batch_execute("ROLLBACK TO a").await.unwrap_err();
    assert_eq!(code(&e), "3B001", "{e:?}");
    c.batch_execute("ROLLBACK").await.unwrap();
    // Committed: what was kept at the savepoints, in one EGT.
    c.batch_execute(
        "BEGIN; INSERT INTO regs (race, runner) VALUES ('sp', 'r1'); SAVEPOINT b; \
         INSERT INTO regs (race, runner) VALUES ('sp', 'r2'); ROLLBACK TO b; \
         INSERT INTO regs (race, runner) VALUES ('sp', 'r3'); COMMIT",
    )
    .await
    .unwrap();
    let got: Vec<String> = rows(&c, "sp").await.into_iter().map(|r| r.0).collect();
    assert_eq!(got, ["r1", "r3"]);
    // ROLLBACK TO and COMMIT in one Query message: the failure before the
    // savepoint's rollback does not make COMMIT a ROLLBACK.
    c.batch_execute("BEGIN; INSERT INTO regs (race, runner) VALUES ('sq', 'a'); SAVEPOINT s")
        .await
        .unwrap();
    let e = c
        .batch_execute("INSERT INTO regs (race, runner) VALUES ('sq', 'a')")
        .await
        .unwrap_err();
    assert_eq!(code(&e), "23505", "{e:?}");
    c.batch_execute("ROLLBACK TO s; COMMIT").await.unwrap();
    assert_eq!(rows(&c, "sq").await.len(), 1);
    // A cursor declared after the savepoint goes with it; one declared
    // before stays.
    c.batch_execute(
        "BEGIN; DECLARE before CURSOR FOR SELECT runner FROM regs WHERE race = 'sp'; \
         SAVEPOINT s; DECLARE after CURSOR FOR SELECT runner FROM regs WHERE race = 'sp'; \
         ROLLBACK TO s",
    )
    .await
    .unwrap();
    let kept = c.simple_query("FETCH 1 FROM before").await.unwrap();
    assert!(
        kept.iter()
            .any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
    );
    let e = c.batch_execute("FETCH 1 FROM after").await.unwrap_err();
    assert_eq!(code(&e), "34000", "{e:?}");
    c.batch_execute("ROLLBACK").await.unwrap();
}

#[tokio::test]
async fn concurrent_sessions_never_lose_an_update() {
    let s = server();
    let c = connect(&s).await;
    c.batch_execute(
        "CREATE TABLE counters (k text, r text, n bigint, PRIMARY KEY (k, r)); \
         INSERT INTO counters VALUES ('a', 'b', 0)",
    )
    .await
    .unwrap();
    // Autocommit increments: each one re-reads on conflict, like
    // PostgreSQL re-checks a row it waited for.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let c = connect(&s).await;
        tasks.push(tokio::spawn(async move {
            for _ in 0..25 {
                let n = c
                    .execute(
                        "UPDATE counters SET n = n + 1 WHERE k = 'a' AND r = 'b'",
                        &[],
                    )
                    .await
                    .unwrap();
                assert_eq!(n, 1);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let n: i64 = c
        .query_one("SELECT n FROM counters WHERE k = 'a' AND r = 'b'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 100, "every autocommit increment applied exactly once");

    // In transactions: a commit either applies its increment or fails with
    // 40001; the final count equals the successful commits.
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let c = connect(&s).await;
        tasks.push(tokio::spawn(async move {
            let mut ok = 0i64;
            for _ in 0..10 {
                c.batch_execute("BEGIN").await.unwrap();
                c.execute(
                    "UPDATE counters SET n = n + 1 WHERE k = 'a' AND r = 'b'",
                    &[],
                )
                .await
                .unwrap();
                match c.batch_execute("COMMIT").await {
                    Ok(()) => ok += 1,
                    Err(e) => {
                        // The failed COMMIT ended the transaction: the
                        // next BEGIN needs no ROLLBACK first.
                        assert_eq!(
                            e.code(),
                            Some(&SqlState::T_R_SERIALIZATION_FAILURE),
                            "{e:?}"
                        );
                    }
                }
            }
            ok
        }));
    }
    let mut committed = 0;
    for t in tasks {
        committed += t.await.unwrap();
    }
    let n: i64 = c
        .query_one("SELECT n FROM counters WHERE k = 'a' AND r = 'b'", &[])
        .await
        .unwrap()
        .get(0);
    assert!(committed >= 1);
    assert_eq!(n, 100 + committed, "{committed} commits succeeded");
}

#[test]
fn psql_sees_notices_and_explain_for_writes() {
    let s = server();
    let (_, err, ok) = psql(
        &s,
        &[
            DDL,
            "INSERT INTO regs (race, runner) SELECT race, runner FROM registrations",
        ],
    );
    assert!(ok, "{err}");
    assert!(
        err.contains("entity-group transactions") && err.contains("not atomic together"),
        "a multi-partition insert says it was several EGTs: {err}"
    );
    let (out, err, ok) = psql(&s, &["EXPLAIN DELETE FROM regs WHERE name = 'x'"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("Delete on regs") && out.contains("full-scan"),
        "{out}"
    );
    let (out, err, ok) = psql(
        &s,
        &[
            "BEGIN",
            "INSERT INTO regs (race, runner) VALUES ('x', 'y')",
            "COMMIT",
            "SELECT runner FROM regs WHERE race = 'x'",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains("INSERT 0 1") && out.contains(" y"), "{out}");
}
