//! With tokio-postgres: prepared statements, parameters, binary results,
//! portals with row limits, transactions' states, the connection limit.

use std::time::{Duration, SystemTime};

use tokio_postgres::NoTls;

use super::server::TestServer;

const NYC: &str = "2026 New York City Marathon__Full";

async fn connect(s: &TestServer) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    client
}

#[tokio::test]
async fn prepared_statements_binary_results_and_portals() {
    let s = TestServer::demo(&["--throttle", "off"]);
    let c = connect(&s).await;

    // Parameters typed from context: race and runner are text.
    let stmt = c
        .prepare("SELECT race, runner, bib, name, age, registered FROM registrations WHERE race = $1 AND runner >= $2 AND runner < $3")
        .await
        .unwrap();
    assert_eq!(stmt.params(), &[tokio_postgres::types::Type::TEXT; 3]);
    let rows = c.query(&stmt, &[&NYC, &"BIB:", &"BIB;"]).await.unwrap();
    assert_eq!(rows.len(), 20, "20 runners, one BIB row each");
    let first = &rows[0];
    let bib: i32 = first.get("bib");
    let age: i32 = first.get("age");
    let _: SystemTime = first.get("registered");
    assert_eq!(bib, 1);
    assert!((18..78).contains(&age));
    let runner: String = first.get("runner");
    assert!(runner.starts_with("BIB:00001__"), "{runner}");

    // A point lookup by exact key, prepared once, run with parameters.
    let point = c
        .prepare("SELECT name FROM registrations WHERE race = $1 AND runner = $2")
        .await
        .unwrap();
    let got = c.query(&point, &[&NYC, &runner]).await.unwrap();
    assert_eq!(got.len(), 1);
    assert!(
        c.query(&point, &[&NYC, &"BIB:nope"])
            .await
            .unwrap()
            .is_empty()
    );

    // Integer parameters on an INT column.
    let by_age = c.prepare("SELECT count_rows FROM (SELECT 1) t").await;
    assert!(by_age.is_err(), "not a native query");
    let old = c
        .query(
            "SELECT runner FROM registrations WHERE race = $1 AND age >= $2",
            &[&NYC, &60i32],
        )
        .await
        .unwrap();
    assert!(old.iter().all(|r| r.get::<_, String>(0).len() > 4));

    // A portal with a row limit: three Executes of 15 rows each over the
    // 40 rows of the partition.
    let mut c = c;
    let tx = c.transaction().await.unwrap();
    let portal = tx
        .bind("SELECT runner FROM registrations WHERE race = $1", &[&NYC])
        .await
        .unwrap();
    let mut seen = Vec::new();
    for expected in [15, 15, 10, 0] {
        let batch = tx.query_portal(&portal, 15).await.unwrap();
        assert_eq!(batch.len(), expected);
        seen.extend(batch.into_iter().map(|r| r.get::<_, String>(0)));
    }
    let mut sorted = seen.clone();
    sorted.sort();
    assert_eq!(seen, sorted, "clustered-key order across Executes");
    assert_eq!(seen.len(), 40);
    tx.commit().await.unwrap();

    // Errors come with their SQLSTATE.
    let err = c
        .query("SELECT nope FROM registrations", &[])
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "42703");
    let err = c
        .query("SELECT name FROM registrations WHERE race = $1", &[&5i32])
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("error serializing") || err.code().is_some(),
        "{err}"
    );

    // An error inside a transaction aborts it until ROLLBACK (25P02).
    c.batch_execute("BEGIN").await.unwrap();
    assert!(
        c.simple_query("SELECT nope FROM registrations")
            .await
            .is_err()
    );
    let err = c
        .simple_query("SELECT 1 FROM registrations")
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "25P02");
    c.batch_execute("ROLLBACK").await.unwrap();
    assert!(
        c.simple_query(&format!(
            "SELECT name FROM registrations WHERE race = '{NYC}' LIMIT 1"
        ))
        .await
        .is_ok()
    );
}

/// DECLARE / FETCH / CLOSE with their command tags; cursors end with their
/// transaction unless WITH HOLD.
#[tokio::test]
async fn cursors_page_through_a_partition() {
    let s = TestServer::demo(&["--throttle", "off"]);
    let c = connect(&s).await;
    let tag = |msgs: &[tokio_postgres::SimpleQueryMessage]| {
        msgs.iter()
            .find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::CommandComplete(n) => Some(*n),
                _ => None,
            })
            .unwrap()
    };
    c.batch_execute("BEGIN").await.unwrap();
    c.batch_execute(&format!(
        "DECLARE cur CURSOR FOR SELECT runner FROM registrations WHERE race = '{NYC}'"
    ))
    .await
    .unwrap();
    let mut total = 0;
    loop {
        let msgs = c.simple_query("FETCH 15 FROM cur").await.unwrap();
        let n = tag(&msgs);
        total += n;
        if n < 15 {
            break;
        }
    }
    assert_eq!(total, 40);
    assert_eq!(tag(&c.simple_query("FETCH ALL FROM cur").await.unwrap()), 0);
    c.batch_execute("COMMIT").await.unwrap();
    let err = c.simple_query("FETCH 1 FROM cur").await.unwrap_err();
    assert_eq!(err.code().unwrap().code(), "34000", "closed at COMMIT");
    // WITH HOLD survives COMMIT and works outside a transaction.
    c.batch_execute(&format!(
        "DECLARE held CURSOR WITH HOLD FOR SELECT runner FROM registrations WHERE race = '{NYC}'"
    ))
    .await
    .unwrap();
    assert_eq!(tag(&c.simple_query("FETCH 5 FROM held").await.unwrap()), 5);
    c.batch_execute("CLOSE held").await.unwrap();
    let err = c
        .simple_query("DECLARE nope CURSOR FOR SELECT runner FROM registrations")
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "25P01");

    // A cursor over an analytics query (the engine's plan) pages the same
    // rows the query returns, here with a parameter bound by the extended
    // protocol.
    let direct = c
        .query(
            "SELECT age, count(*) AS n FROM registrations WHERE race = $1 GROUP BY age ORDER BY age",
            &[&NYC],
        )
        .await
        .unwrap();
    assert!(direct.len() > 5, "{} ages", direct.len());
    c.batch_execute("BEGIN").await.unwrap();
    c.execute(
        "DECLARE ages CURSOR FOR SELECT age, count(*) AS n FROM registrations \
         WHERE race = $1 GROUP BY age ORDER BY age",
        &[&NYC],
    )
    .await
    .unwrap();
    let mut fetched = Vec::new();
    loop {
        let page = c.query("FETCH 4 FROM ages", &[]).await.unwrap();
        let n = page.len();
        fetched.extend(
            page.iter()
                .map(|r| (r.get::<_, i32>(0), r.get::<_, i64>(1))),
        );
        if n < 4 {
            break;
        }
    }
    let want: Vec<(i32, i64)> = direct.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(fetched, want);
    c.batch_execute("COMMIT").await.unwrap();
    // Over the simple protocol, WITH HOLD, and a bad query is refused at
    // DECLARE with the engine's error.
    c.batch_execute("DECLARE total CURSOR WITH HOLD FOR SELECT count(*) FROM registrations")
        .await
        .unwrap();
    let msgs = c.simple_query("FETCH ALL FROM total").await.unwrap();
    assert_eq!(tag(&msgs), 1);
    c.batch_execute("CLOSE total").await.unwrap();
    let err = c
        .simple_query("DECLARE bad CURSOR WITH HOLD FOR SELECT count(nope) FROM registrations")
        .await
        .unwrap_err();
    assert_eq!(err.code().unwrap().code(), "42703", "{err:?}");
}

#[tokio::test]
async fn connections_over_the_limit_get_53300() {
    let s = TestServer::demo(&["--max-connections", "1"]);
    let first = connect(&s).await;
    let err = match tokio_postgres::connect(&s.conn_str(), NoTls).await {
        Ok(_) => panic!("a second connection was accepted"),
        Err(e) => e,
    };
    assert_eq!(err.code().map(|c| c.code()), Some("53300"), "{err}");
    // The first connection still works, and a slot frees when it closes.
    first.simple_query("SELECT version()").await.unwrap();
    drop(first);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = connect(&s).await;
    again.simple_query("SELECT version()").await.unwrap();
}

/// SIGTERM ends idle sessions at once with FATAL 57P01, as PostgreSQL's
/// fast shutdown does, instead of waiting out the 10 s grace period for
/// clients that may never leave.
#[tokio::test]
async fn shutdown_ends_idle_sessions_with_57p01() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let (client, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    let conn = tokio::spawn(conn);
    client.simple_query("SELECT 1").await.unwrap();
    let started = std::time::Instant::now();
    assert!(s.terminate(), "a clean exit");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(8),
        "an idle session held shutdown for {took:?} (the grace period is 10 s)"
    );
    let err = conn
        .await
        .unwrap()
        .expect_err("the server ended the session");
    assert_eq!(err.code().map(|c| c.code()), Some("57P01"), "{err}");
    assert!(client.simple_query("SELECT 1").await.is_err());
}

/// A statement running at SIGTERM finishes and its answer arrives: the
/// shutdown closing reads is not the client hanging up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_running_statement_finish() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let (client, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    // Seconds of work (750 million rows), well inside the 10 s grace even
    // on 2 loaded cores.
    let query = tokio::spawn(async move {
        client
            .simple_query(
                "SELECT sum((a.a * b.b % 7)::int) FROM generate_series(1, 1500) a \
                 CROSS JOIN generate_series(1, 500000) b",
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!query.is_finished(), "the statement ended before SIGTERM");
    let stopped = tokio::task::spawn_blocking(move || s.terminate());
    let answer = query.await.unwrap();
    assert!(answer.is_ok(), "{answer:?}");
    assert!(stopped.await.unwrap(), "a clean exit");
}

/// A throttled full scan of 36,000 entities takes seconds at the account
/// target; cancel requests and statement_timeout stop it mid-stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_and_statement_timeout_stop_a_streaming_scan() {
    let s = TestServer::demo(&["--runners", "1000"]);
    let c = connect(&s).await;
    let slow = "SELECT race, runner, name FROM registrations WHERE age >= 18";

    // Cancel from another task while rows stream (extended protocol).
    let token = c.cancel_token();
    let started = std::time::Instant::now();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(400)).await;
        token.cancel_query(NoTls).await.unwrap();
    });
    let result = c.query(slow, &[]).await;
    canceller.await.unwrap();
    let err = match result {
        Ok(rows) => panic!(
            "not cancelled: {} rows in {:?}",
            rows.len(),
            started.elapsed()
        ),
        Err(e) => e,
    };
    assert_eq!(err.code().map(|c| c.code()), Some("57014"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "cancel took {:?}",
        started.elapsed()
    );

    // The session is usable afterwards, and a later statement is not
    // affected by the earlier cancel.
    let rows = c
        .query(
            "SELECT runner FROM registrations WHERE race = $1 LIMIT 5",
            &[&NYC],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 5);

    // statement_timeout, on the simple protocol.
    c.batch_execute("SET statement_timeout = 300")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let err = match c.simple_query(slow).await {
        Ok(rows) => panic!(
            "no timeout: {} messages in {:?}",
            rows.len(),
            started.elapsed()
        ),
        Err(e) => e,
    };
    assert_eq!(err.code().map(|c| c.code()), Some("57014"), "{err}");
    let message = err
        .as_db_error()
        .map(|d| d.message().to_owned())
        .unwrap_or_default();
    assert!(message.contains("statement timeout"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(3));
    c.batch_execute("SET statement_timeout = 0").await.unwrap();
    let all = c
        .query("SELECT runner FROM registrations WHERE race = $1", &[&NYC])
        .await;
    match all {
        Ok(rows) => assert_eq!(rows.len(), 2000),
        Err(e) => panic!("{e:?}"),
    }
}

/// `pg_sleep` waits as PostgreSQL's does (negative is no wait), answers one
/// empty `pg_sleep` row, and ends at statement_timeout or a cancel request
/// with 57014, while other sessions go on.
#[tokio::test]
async fn pg_sleep_waits_and_stops_at_timeouts_and_cancels() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "2"]);
    let c = connect(&s).await;
    let started = std::time::Instant::now();
    let rows = c.simple_query("SELECT pg_sleep(0.3)").await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    let row = rows
        .iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .expect("one row");
    assert_eq!(row.columns()[0].name(), "pg_sleep");
    assert_eq!(row.get(0), Some(""));
    c.simple_query("SELECT pg_sleep(-5)").await.unwrap();

    c.batch_execute("SET statement_timeout = 200")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let e = c.simple_query("SELECT pg_sleep(30)").await.unwrap_err();
    assert_eq!(
        e.code(),
        Some(&tokio_postgres::error::SqlState::QUERY_CANCELED)
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    c.batch_execute("RESET statement_timeout").await.unwrap();

    let token = c.cancel_token();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        token.cancel_query(NoTls).await.unwrap();
    });
    let other = connect(&s).await;
    let started = std::time::Instant::now();
    let sleeping = c.simple_query("SELECT pg_sleep(30)");
    let (slept, busy) = tokio::join!(sleeping, async {
        other
            .simple_query("SELECT 1")
            .await
            .map(|_| started.elapsed())
    });
    let e = slept.unwrap_err();
    assert_eq!(
        e.code(),
        Some(&tokio_postgres::error::SqlState::QUERY_CANCELED)
    );
    assert!(busy.unwrap() < Duration::from_secs(5));
    canceller.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // The session goes on.
    c.simple_query("SELECT pg_sleep(0)").await.unwrap();
}

/// A statement prepared before its table changed is planned again when it
/// runs, as PostgreSQL re-plans cached plans: it never writes with the old
/// types or reads the old columns. A new result shape or new parameter
/// types are refused with PostgreSQL's SQLSTATEs; the same shape runs.
#[tokio::test]
async fn prepared_statements_are_planned_again_after_ddl() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::serve_in(dir.path(), &[]);
    let c = connect(&s).await;
    c.batch_execute("CREATE TABLE pddl (pk text, rk text, v int, PRIMARY KEY (pk, rk))")
        .await
        .unwrap();
    let ins = c
        .prepare("INSERT INTO pddl VALUES ($1, $2, $3)")
        .await
        .unwrap();
    let one = c
        .prepare("SELECT v FROM pddl WHERE pk = $1 AND rk = $2")
        .await
        .unwrap();
    let all = c.prepare("SELECT * FROM pddl").await.unwrap();
    c.execute(&ins, &[&"a", &"1", &5i32]).await.unwrap();

    // A new column: the INSERT and the point query keep their shapes and
    // run; SELECT * would change its result and is refused.
    c.batch_execute("ALTER TABLE pddl ADD COLUMN w text")
        .await
        .unwrap();
    c.execute(&ins, &[&"a", &"2", &6i32]).await.unwrap();
    let v: i32 = c.query_one(&one, &[&"a", &"2"]).await.unwrap().get(0);
    assert_eq!(v, 6);
    let err = c.query(&all, &[]).await.unwrap_err();
    assert_eq!(err.code().unwrap().code(), "0A000", "{err}");

    // Dropped and made again with v boolean: the old int parameter and the
    // old int result are refused, never written or read as int.
    c.batch_execute(
        "DROP TABLE pddl; CREATE TABLE pddl (pk text, rk text, v boolean, PRIMARY KEY (pk, rk))",
    )
    .await
    .unwrap();
    let err = c.execute(&ins, &[&"a", &"3", &7i32]).await.unwrap_err();
    assert_eq!(err.code().unwrap().code(), "42804", "{err}");
    let err = c.query(&one, &[&"a", &"3"]).await.unwrap_err();
    assert_eq!(err.code().unwrap().code(), "0A000", "{err}");
    let n: i64 = c
        .query_one("SELECT count(*) FROM pddl", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    // Prepared again, it runs with the new types.
    let ins = c
        .prepare("INSERT INTO pddl VALUES ($1, $2, $3)")
        .await
        .unwrap();
    c.execute(&ins, &[&"a", &"3", &true]).await.unwrap();
}
