//! Writes through the planner: throttled writes that run out of retries
//! say what was applied, transactions read their own writes through every
//! access class, EXPLAIN of a write shows its scan, and an autocommit
//! statement over 4 MiB is split into EGTs at the byte limit.

use std::sync::Arc;
use std::time::Duration;

use tablegate_planner::{ExecOptions, Plan, PlanError, Planner, Transaction, WriteOutcome};
use tablegate_store::partition::{PartitionConfig, Targets};
use tablegate_store::{LocalStore, ManualClock, PartitionedStore, RetryPolicy, StoreError, Value};

use crate::fixture;

async fn write(
    p: &Planner,
    sql: &str,
    txn: Option<&mut Transaction>,
) -> Result<WriteOutcome, PlanError> {
    write_with(p, sql, &[], txn).await
}

async fn write_with(
    p: &Planner,
    sql: &str,
    params: &[Option<Value>],
    txn: Option<&mut Transaction>,
) -> Result<WriteOutcome, PlanError> {
    let stmt = Planner::parse(sql)?.remove(0);
    match p.plan(&stmt, sql)? {
        Plan::Write(w) => p.write(&w, params, txn, &no_retry()).await,
        other => panic!("not a write: {other:?}"),
    }
}

async fn select(p: &Planner, sql: &str, opts: &ExecOptions) -> usize {
    let stmt = Planner::parse(sql).unwrap().remove(0);
    let Plan::Select(s) = p.plan(&stmt, sql).unwrap() else {
        panic!("not a select")
    };
    let (batches, _) = p.execute(&s, &[], opts).unwrap().collect().await.unwrap();
    batches.iter().map(|b| b.num_rows()).sum()
}

fn no_retry() -> ExecOptions {
    ExecOptions {
        retry: RetryPolicy::None,
        ..ExecOptions::default()
    }
}

#[tokio::test]
async fn throttled_writes_report_what_was_applied() {
    // 100 entities/s per partition with a burst of 10; a frozen clock, so
    // nothing refills during the test.
    let clock = Arc::new(ManualClock::at(1_000_000));
    // The entities themselves, read past the partition layer's throttle.
    let local = LocalStore::in_memory();
    let store = PartitionedStore::with_clock(
        local.clone(),
        PartitionConfig {
            targets: Some(Targets {
                per_partition: 100,
                per_server: 1_000_000,
                per_account: 1_000_000,
                burst: 0.1,
            }),
            move_offline: Duration::ZERO,
            ..Default::default()
        },
        clock.clone(),
    )
    .unwrap();
    let p = Planner::open(store).await.unwrap();
    fixture::run(
        &p,
        "CREATE TABLE tbl (pk TEXT, rk TEXT, n INT, PRIMARY KEY (pk, rk))",
    )
    .await;
    let rows = |pk: &str, range: std::ops::Range<u32>| {
        range
            .map(|i| format!("('{pk}', 'r{i:03}', {i})"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // 150 rows of one partition: two EGTs (100 + 50). The first is admitted
    // and drives the bucket into debt; the second is refused.
    let e = write(
        &p,
        &format!("INSERT INTO tbl VALUES {}", rows("a", 0..150)),
        None,
    )
    .await
    .unwrap_err();
    let PlanError::PartlyApplied {
        rows: applied,
        groups,
        source,
    } = &e
    else {
        panic!("{e:?}")
    };
    assert_eq!((*applied, *groups), (100, 1));
    assert!(
        matches!(**source, PlanError::Store(ref s) if matches!(s.root(), StoreError::ServerBusy { .. }))
    );
    // An atomic statement refused by the throttle applies nothing.
    let e = write(&p, "INSERT INTO tbl VALUES ('a', 'x', 1)", None)
        .await
        .unwrap_err();
    assert!(
        matches!(e, PlanError::Store(ref s) if matches!(s.root(), StoreError::ServerBusy { .. })),
        "{e:?}"
    );
    // Exactly the first group is there.
    let stored = local
        .query_blocking(
            "tbl",
            &tablegate_store::Query {
                spans: vec![tablegate_store::KeyBox::partition("a")],
                filter: None,
                projection: None,
            },
            &tablegate_store::PageRequest::first(1000),
        )
        .unwrap();
    assert_eq!(stored.entities.len(), 100);
    assert!(stored.continuation.is_none());
    // A scan pays for its reading page by page: once the debt is repaid,
    // its first page reads no more than the 10-entity burst and the next
    // one is refused until the bucket refills (no retries here).
    clock.advance(Duration::from_secs(10));
    let stmt = Planner::parse("SELECT * FROM tbl WHERE pk = 'a'")
        .unwrap()
        .remove(0);
    let Plan::Select(s) = p.plan(&stmt, "SELECT * FROM tbl WHERE pk = 'a'").unwrap() else {
        panic!("not a select")
    };
    let e = p
        .execute(&s, &[], &no_retry())
        .unwrap()
        .collect()
        .await
        .unwrap_err();
    assert!(
        matches!(e, PlanError::Store(ref s) if matches!(s.root(), StoreError::ServerBusy { .. })),
        "{e:?}"
    );
    // Another partition has its own bucket.
    write(
        &p,
        &format!("INSERT INTO tbl VALUES {}", rows("b", 0..5)),
        None,
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn transactions_read_their_own_writes_in_every_access_class() {
    let (p, store) = fixture::empty_planner().await;
    fixture::run(
        &p,
        "CREATE TABLE tbl (pk TEXT, rk TEXT, n INT, PRIMARY KEY (pk, rk))",
    )
    .await;
    write(
        &p,
        "INSERT INTO tbl VALUES ('a', 'r1', 1), ('a', 'r3', 3), ('b', 'r1', 1)",
        None,
    )
    .await
    .unwrap();
    let mut txn = Transaction::new();
    write(
        &p,
        "INSERT INTO tbl VALUES ('a', 'r2', 2), ('a', 'r4', 4)",
        Some(&mut txn),
    )
    .await
    .unwrap();
    write(
        &p,
        "DELETE FROM tbl WHERE pk = 'a' AND rk = 'r1'",
        Some(&mut txn),
    )
    .await
    .unwrap();
    write(
        &p,
        "UPDATE tbl SET n = 30 WHERE pk = 'a' AND n = 3",
        Some(&mut txn),
    )
    .await
    .unwrap();
    // Upsert blind, then read: the overlay resolves it against the store.
    write(
        &p,
        "INSERT INTO tbl (pk, rk, n) VALUES ('a', 'r5', 5) ON CONFLICT (pk, rk) DO UPDATE SET n = EXCLUDED.n",
        Some(&mut txn),
    )
    .await
    .unwrap();
    assert_eq!(txn.len(), 5);
    let opts = ExecOptions {
        overlay: txn
            .overlay(&store.clone().into(), &RetryPolicy::None)
            .await
            .unwrap(),
        ..ExecOptions::default()
    };
    for (sql, want) in [
        ("SELECT * FROM tbl WHERE pk = 'a' AND rk = 'r2'", 1), // point, staged insert
        ("SELECT * FROM tbl WHERE pk = 'a' AND rk = 'r1'", 0), // point, staged delete
        ("SELECT * FROM tbl WHERE pk = 'a'", 4),               // row range: r2 r3 r4 r5
        ("SELECT * FROM tbl WHERE pk = 'a' AND n >= 4", 3),    // residual on staged views
        ("SELECT * FROM tbl WHERE pk = 'a' LIMIT 2", 2),
        ("SELECT * FROM tbl WHERE pk >= 'a'", 5), // partition range
        ("SELECT * FROM tbl", 5),                 // full scan
    ] {
        assert_eq!(select(&p, sql, &opts).await, want, "{sql}");
    }
    // Outside the transaction nothing changed yet.
    assert_eq!(
        select(&p, "SELECT * FROM tbl", &ExecOptions::default()).await,
        3
    );
    let n = p.commit(txn, &ExecOptions::default()).await.unwrap();
    assert_eq!(n, 5, "insert r2, insert r4, delete r1, merge r3, upsert r5");
    assert_eq!(
        select(&p, "SELECT * FROM tbl", &ExecOptions::default()).await,
        5
    );
    assert_eq!(
        select(
            &p,
            "SELECT * FROM tbl WHERE n = 30",
            &ExecOptions::default()
        )
        .await,
        1
    );
}

#[tokio::test]
async fn explain_of_a_write_shows_its_scan() {
    let p = fixture::planner().await;
    let sql = "EXPLAIN DELETE FROM registrations WHERE race = '2026 NYC__Full' AND age > 60";
    let stmt = Planner::parse(sql).unwrap().remove(0);
    let Plan::Explain(e) = p.plan(&stmt, sql).unwrap() else {
        panic!()
    };
    let lines = p
        .explain(&e.select, &[], false, false, e.write, &fixture::opts())
        .await
        .unwrap();
    assert_eq!(lines[0], "Delete on registrations");
    assert!(
        lines[2].contains("Store Scan on registrations"),
        "{lines:#?}"
    );
    assert!(lines.iter().any(|l| l.contains("row-range")), "{lines:#?}");
    let sql = "EXPLAIN ANALYZE UPDATE registrations SET age = 1";
    let stmt = Planner::parse(sql).unwrap().remove(0);
    assert!(matches!(
        p.plan(&stmt, sql),
        Err(PlanError::Unsupported { .. })
    ));
}

#[tokio::test]
async fn autocommit_writes_split_at_four_mib_and_apply_every_row() {
    let (p, _store) = fixture::empty_planner().await;
    fixture::run(
        &p,
        "CREATE TABLE big (pk TEXT, rk TEXT, s1 TEXT, s2 TEXT, s3 TEXT, s4 TEXT, PRIMARY KEY (pk, rk))",
    )
    .await;
    // 40 rows of one partition, each with four 30,000-character strings
    // (240,078 bytes in the size formula, which counts UTF-16): 17 fit in
    // 4 MiB, so the statement is three EGTs (17 + 17 + 6), not one of 40.
    // One parameter for every string: the statement text itself must stay
    // under the 1 MiB statement limit.
    let long = "x".repeat(30_000);
    let values = (0..40)
        .map(|i| format!("('a', 'r{i:03}', $1, $1, $1, $1)"))
        .collect::<Vec<_>>()
        .join(", ");
    let sql = format!("INSERT INTO big VALUES {values}");
    let out = write_with(&p, &sql, &[Some(Value::String(long.clone()))], None)
        .await
        .unwrap();
    assert_eq!((out.rows, out.groups), (40, 3));
    assert!(
        out.notice
            .as_deref()
            .is_some_and(|n| n.contains("3 entity-group transactions")),
        "{:?}",
        out.notice
    );
    assert_eq!(
        select(&p, "SELECT * FROM big WHERE pk = 'a'", &no_retry()).await,
        40
    );
    assert_eq!(
        select(
            &p,
            &format!("SELECT rk FROM big WHERE pk = 'a' AND s4 = '{long}'"),
            &no_retry()
        )
        .await,
        40
    );
}
