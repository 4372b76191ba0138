//! Local and global indexes, differentially: the same random writes
//! (every INSERT form, UPDATE and DELETE by key and by indexed value, ON
//! CONFLICT, transactions) go to a table with local indexes, one with
//! global indexes and one without; every query answers the same rows, with
//! the index used or not, and after each round the index entries are
//! exactly those recomputed from the rows.

use std::collections::BTreeMap;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use fastrand::Rng;
use std::time::Duration;
use tablegate_catalog::INDEX_ROW_PREFIX;
use tablegate_catalog::index::entries;

use tablegate_planner::{
    ExecOptions, IndexMode, Plan, PlanError, Planner, Transaction, global, index,
};
use tablegate_store::{
    Backend, Entity, EntityWrite, IfMatch, KeyBox, KeyInterval, Operation, PageRequest, Query,
    TableStore,
};

use crate::fixture;

const PKS: [&str; 3] = ["p1", "p2", "p3"];
const BS: [&str; 5] = ["x", "y", "zz", "é", "z_%"];

fn opts(use_indexes: IndexMode) -> ExecOptions {
    ExecOptions {
        use_indexes,
        ..ExecOptions::default()
    }
}

/// Runs any statement; the rows of a SELECT, the count of a write, or
/// the error's text.
async fn run(p: &Planner, sql: &str, txn: Option<&mut Transaction>, o: &ExecOptions) -> String {
    let stmt = match Planner::parse(sql) {
        Ok(mut s) => s.remove(0),
        Err(e) => return format!("error: {e}"),
    };
    let r: Result<String, PlanError> = async {
        match p.plan(&stmt, sql)? {
            Plan::Write(w) => Ok(format!(
                "{} {}",
                w.verb(),
                p.write(&w, &[], txn, o).await?.rows
            )),
            Plan::Select(s) => {
                let (batches, _) = p.execute(&s, &[], o)?.collect().await?;
                Ok(rows(&batches).join("\n"))
            }
            plan @ (Plan::CreateTable { .. }
            | Plan::CreateIndex { .. }
            | Plan::DropIndex { .. }) => Ok(p.run_ddl(&plan).await?.tag.to_owned()),
            other => panic!("unexpected plan {other:?}"),
        }
    }
    .await;
    r.unwrap_or_else(|e| format!("error: {e}"))
}

fn rows(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        for i in 0..b.num_rows() {
            let cells: Vec<String> = b
                .columns()
                .iter()
                .map(|c| {
                    if c.is_null(i) {
                        return "NULL".to_owned();
                    }
                    match c.data_type() {
                        DataType::Utf8 => c.as_string::<i32>().value(i).to_owned(),
                        DataType::Int32 => c.as_primitive::<Int32Type>().value(i).to_string(),
                        DataType::Int64 => c
                            .as_primitive::<arrow_array::types::Int64Type>()
                            .value(i)
                            .to_string(),
                        DataType::Float64 => c.as_primitive::<Float64Type>().value(i).to_string(),
                        other => format!("<{other}>"),
                    }
                })
                .collect();
            out.push(cells.join("|"));
        }
    }
    out
}

/// One random statement over table `{t}`.
fn statement(rng: &mut Rng) -> String {
    let pk = PKS[rng.usize(..PKS.len())];
    let r = rng.i32(0..12);
    let a = rng.i32(0..4);
    let v = |rng: &mut Rng| {
        if rng.u8(..6) == 0 {
            "NULL".to_owned()
        } else {
            rng.i32(0..4).to_string()
        }
    };
    let b = |rng: &mut Rng| format!("'{}'", BS[rng.usize(..BS.len())]);
    match rng.u8(..9) {
        0 => format!(
            "INSERT INTO {{t}} VALUES ('{pk}', {r}, {}, {}, {}) ON CONFLICT DO NOTHING",
            v(rng),
            b(rng),
            rng.i32(0..3)
        ),
        1 => {
            let (x, y) = (v(rng), b(rng));
            format!(
                "INSERT INTO {{t}} VALUES ('{pk}', {r}, {x}, {y}, 1), ('{pk}', {}, {}, {}, 2) ON CONFLICT (p, r) DO UPDATE SET a = EXCLUDED.a, b = EXCLUDED.b",
                (r + 1) % 12,
                v(rng),
                b(rng)
            )
        }
        2 => format!(
            "INSERT INTO {{t}} VALUES ('{pk}', {r}, 1, 'x', 0) ON CONFLICT (p, r) DO UPDATE SET a = {{t}}.a + 1"
        ),
        3 => format!(
            "UPDATE {{t}} SET a = {} WHERE p = '{pk}' AND r = {r}",
            v(rng)
        ),
        4 => format!(
            "UPDATE {{t}} SET b = {}, a = {} WHERE p = '{pk}' AND a = {}",
            b(rng),
            v(rng),
            a
        ),
        5 => format!(
            "DELETE FROM {{t}} WHERE p = '{pk}' AND a = {a} AND b = {}",
            b(rng)
        ),
        6 => format!("DELETE FROM {{t}} WHERE p = '{pk}' AND r = {r}"),
        7 => format!(
            "UPDATE {{t}} SET c = c + 1 WHERE p = '{pk}' AND b = {}",
            b(rng)
        ),
        _ => format!(
            "INSERT INTO {{t}} VALUES ('{pk}', {r}, {}, {}, 0)",
            v(rng),
            b(rng)
        ),
    }
}

/// The queries compared after each round.
fn queries(rng: &mut Rng) -> Vec<String> {
    let mut q = vec!["SELECT p, r, a, b, c FROM {t} ORDER BY p, r".to_owned()];
    // With no PartitionKey: what a global index serves.
    let (a, b) = (rng.i32(0..4), BS[rng.usize(..BS.len())]);
    q.extend([
        format!("SELECT p, r, a FROM {{t}} WHERE a = {a} ORDER BY p, r"),
        format!("SELECT p, r FROM {{t}} WHERE a > {a} ORDER BY p, r"),
        format!(
            "SELECT p, r FROM {{t}} WHERE a BETWEEN {a} AND {} ORDER BY p, r",
            a + 1
        ),
        format!("SELECT p, r, c FROM {{t}} WHERE b = '{b}' ORDER BY p, r"),
        format!("SELECT p, r FROM {{t}} WHERE b = '{b}' AND a = {a} ORDER BY p, r"),
        format!("SELECT p, r FROM {{t}} WHERE b = '{b}' AND a < {a} ORDER BY p, r"),
        "SELECT p, r FROM {t} WHERE b LIKE 'z%' ORDER BY p, r".to_owned(),
        format!("SELECT p, r FROM {{t}} WHERE a = {a} AND r >= 6 ORDER BY p, r"),
        format!("SELECT p, r FROM {{t}} WHERE a = {a} AND p > 'p1' ORDER BY p, r"),
        format!("SELECT p, r, c FROM {{t}} WHERE a = {a} AND c > 0 ORDER BY p, r"),
    ]);
    for pk in PKS {
        let a = rng.i32(0..4);
        let b = BS[rng.usize(..BS.len())];
        q.push(format!(
            "SELECT r, a, b FROM {{t}} WHERE p = '{pk}' AND a = {a} ORDER BY r"
        ));
        q.push(format!(
            "SELECT r FROM {{t}} WHERE p = '{pk}' AND b = '{b}' AND a = {a} ORDER BY r"
        ));
        q.push(format!(
            "SELECT r, c FROM {{t}} WHERE p = '{pk}' AND b = '{b}' ORDER BY r"
        ));
        q.push(format!(
            "SELECT r FROM {{t}} WHERE p IN ('{pk}', 'p2') AND a = {a} AND c > 0 ORDER BY p, r"
        ));
        // Answered from ix_a's entries alone (INCLUDE (c)).
        q.push(format!(
            "SELECT p, r, a, c FROM {{t}} WHERE p = '{pk}' AND a = {a} AND c > 0"
        ));
        q.push(format!(
            "SELECT c, r FROM {{t}} WHERE p = '{pk}' AND a >= {a} LIMIT 3 OFFSET 1"
        ));
        // Ranges on an index's first column, and after an equality.
        q.push(format!(
            "SELECT r, a FROM {{t}} WHERE p = '{pk}' AND a > {a} ORDER BY r"
        ));
        q.push(format!(
            "SELECT r, a FROM {{t}} WHERE p = '{pk}' AND a <= {a} ORDER BY r"
        ));
        q.push(format!(
            "SELECT r FROM {{t}} WHERE p = '{pk}' AND a BETWEEN {a} AND {} ORDER BY r",
            a + 1
        ));
        q.push(format!(
            "SELECT r FROM {{t}} WHERE p = '{pk}' AND b = '{b}' AND a >= {a} AND a < 3 ORDER BY r"
        ));
        q.push(format!(
            "SELECT r, b FROM {{t}} WHERE p = '{pk}' AND b > '{b}' ORDER BY r"
        ));
        q.push(format!(
            "SELECT r, a FROM {{t}} WHERE p = '{pk}' AND a >= 1.5 AND a < 2.5 ORDER BY r"
        ));
        // LIKE on an index's text column: its literal text narrows the
        // entries read (escapes and wildcards end it).
        for pattern in ["z%", "zz", "z_", "é%", "%z", "z\\_%", "z\\%"] {
            q.push(format!(
                "SELECT r, b FROM {{t}} WHERE p = '{pk}' AND b LIKE '{pattern}' ORDER BY r"
            ));
        }
        q.push(format!(
            "SELECT r FROM {{t}} WHERE p = '{pk}' AND b LIKE '{}%' AND a = {a} ORDER BY r",
            &b[..b.chars().next().map_or(0, char::len_utf8)]
        ));
    }
    q
}

/// Every entity of table `indexed` whose RowKey is in `rk`.
async fn read_all(store: &Backend, rk: KeyInterval) -> Vec<Entity> {
    read_all_of(store, "indexed", rk).await
}

/// Every entity of `table` whose RowKey is in `rk`.
async fn read_all_of(store: &Backend, table: &str, rk: KeyInterval) -> Vec<Entity> {
    let q = Query::spans(vec![KeyBox {
        pk: KeyInterval::all(),
        rk,
    }]);
    let mut out = Vec::new();
    let mut req = PageRequest::default();
    loop {
        let page = store.query(table, &q, &req).await.unwrap();
        out.extend(page.entities);
        match page.continuation {
            Some(t) => req = req.resume(t),
            None => return out,
        }
    }
}

/// The index entries in the store against those recomputed from the rows.
async fn entries_match(p: &Planner) {
    let table = p.catalog().table("indexed").unwrap();
    let base = read_all(p.store(), tablegate_catalog::index::user_rows()).await;
    // Each entry's keys, and what it carries: the base RowKey and the
    // INCLUDE values.
    let stored: BTreeMap<(String, String), String> = read_all(
        p.store(),
        KeyInterval::prefix(&INDEX_ROW_PREFIX.to_string()),
    )
    .await
    .into_iter()
    .map(|e| ((e.partition_key, e.row_key), format!("{:?}", e.properties)))
    .collect();
    let mut want = BTreeMap::new();
    for e in &base {
        for x in entries(&table, &e.properties, &e.row_key).unwrap() {
            let mut carried: BTreeMap<String, tablegate_store::Value> =
                x.covered.into_iter().collect();
            carried.insert(
                tablegate_catalog::index::BASE_PROPERTY.to_owned(),
                tablegate_store::Value::String(e.row_key.clone()),
            );
            want.insert((e.partition_key.clone(), x.row_key), format!("{carried:?}"));
        }
    }
    assert_eq!(stored, want, "index entries drifted from the rows");
}

/// Once this gateway's maintainer is idle, table `globaled`'s global
/// index tables hold exactly the entries its rows call for, and no queue
/// entry is left.
async fn globals_match(p: &Planner) {
    assert!(
        p.maintainer()
            .caught_up("globaled", Duration::from_secs(60))
            .await
    );
    let table = p.catalog().table("globaled").unwrap();
    let retry = tablegate_store::RetryPolicy::default();
    for ix in table.indexes.iter().filter(|i| i.global) {
        let c = global::verify(p.store(), &table, ix, false, &retry)
            .await
            .unwrap();
        assert_eq!((c.missing, c.stale), (0, 0), "{}: {c:?}", ix.name);
        assert_eq!(c.entries, 2 * c.rows, "{}: {c:?}", ix.name);
    }
    let left = read_all_of(
        p.store(),
        "globaled",
        tablegate_catalog::index::queue_entries(),
    )
    .await;
    assert!(left.is_empty(), "queue entries left: {left:?}");
}

#[tokio::test]
async fn indexed_and_plain_tables_answer_alike_under_random_writes() {
    let (p, _) = fixture::empty_planner().await;
    let on = opts(IndexMode::Force);
    for t in ["indexed", "plain", "globaled"] {
        let sql = format!(
            "CREATE TABLE {t} (p TEXT, r INT, a INT, b TEXT, c FLOAT8, PRIMARY KEY (p, r))"
        );
        assert_eq!(run(&p, &sql, None, &on).await, "CREATE TABLE");
    }
    // One index before any row, one built over rows.
    assert_eq!(
        run(
            &p,
            "CREATE INDEX ix_a ON indexed (a) INCLUDE (c)",
            None,
            &on
        )
        .await,
        "CREATE INDEX"
    );
    assert_eq!(
        run(&p, "CREATE INDEX gx_a ON globaled (a) GLOBAL", None, &on).await,
        "CREATE INDEX"
    );
    let mut rng = Rng::with_seed(20261129);
    let (mut used, mut used_global, mut only, mut weighed_scans) = (0, 0, 0, 0);
    for round in 0..12 {
        for _ in 0..25 {
            if rng.u8(..8) == 0 {
                // A transaction of two or three statements on one partition.
                let pk = PKS[rng.usize(..PKS.len())];
                let stmts: Vec<String> = (0..rng.usize(2..4))
                    .map(|_| {
                        let s = statement(&mut rng);
                        PKS.iter()
                            .fold(s, |s, k| s.replace(&format!("'{k}'"), &format!("'{pk}'")))
                    })
                    .collect();
                let mut results = Vec::new();
                for t in ["indexed", "plain", "globaled"] {
                    let mut txn = Transaction::new();
                    let mut out = Vec::new();
                    for s in &stmts {
                        let o = run(&p, &s.replace("{t}", t), Some(&mut txn), &on).await;
                        out.push(o.replace("plain", "indexed").replace("globaled", "indexed"));
                    }
                    let failed = out.iter().any(|o| o.starts_with("error"));
                    if !failed {
                        out.push(match p.commit(txn, &on).await {
                            Ok(n) => format!("COMMIT {n}"),
                            Err(e) => format!("error: {e}")
                                .replace("plain", "indexed")
                                .replace("globaled", "indexed"),
                        });
                    }
                    results.push(out);
                }
                assert_eq!(results[0], results[1], "transaction {stmts:?}");
                assert_eq!(results[2], results[1], "transaction {stmts:?} (global)");
            } else {
                let s = statement(&mut rng);
                let a = run(&p, &s.replace("{t}", "indexed"), None, &on).await;
                let b = run(&p, &s.replace("{t}", "plain"), None, &on)
                    .await
                    .replace("plain", "indexed");
                let g = run(&p, &s.replace("{t}", "globaled"), None, &on)
                    .await
                    .replace("globaled", "indexed");
                assert_eq!(a, b, "{s}");
                assert_eq!(g, b, "{s} (global)");
            }
        }
        if round == 3 {
            assert_eq!(
                run(
                    &p,
                    "CREATE INDEX ix_ba ON indexed (b, a) INCLUDE (c)",
                    None,
                    &on
                )
                .await,
                "CREATE INDEX"
            );
            assert_eq!(
                run(
                    &p,
                    "CREATE INDEX gx_ba ON globaled (b, a) GLOBAL",
                    None,
                    &on
                )
                .await,
                "CREATE INDEX"
            );
        }
        entries_match(&p).await;
        for q in queries(&mut rng) {
            let plain = run(&p, &q.replace("{t}", "plain"), None, &on).await;
            let with = run(&p, &q.replace("{t}", "indexed"), None, &on).await;
            let weighed = run(&p, &q.replace("{t}", "indexed"), None, &opts(IndexMode::On)).await;
            let without = run(
                &p,
                &q.replace("{t}", "indexed"),
                None,
                &opts(IndexMode::Off),
            )
            .await;
            let global = run(&p, &q.replace("{t}", "globaled"), None, &on).await;
            assert_eq!(with, plain, "{q} (index used)");
            assert_eq!(weighed, plain, "{q} (index used when cheaper)");
            assert_eq!(without, plain, "{q} (index not used)");
            assert_eq!(global, plain, "{q} (global index)");
            for (t, count) in [("indexed", &mut used), ("globaled", &mut used_global)] {
                let sql = q.replace("{t}", t);
                let stmt = Planner::parse(&sql).unwrap().remove(0);
                if let Plan::Select(s) = p.plan(&stmt, &sql).unwrap() {
                    let (_, actuals) = p.execute(&s, &[], &on).unwrap().collect().await.unwrap();
                    *count += usize::from(actuals.index.is_some());
                    if t == "indexed" {
                        only += usize::from(actuals.index_only);
                        let (_, weighed) = p
                            .execute(&s, &[], &opts(IndexMode::On))
                            .unwrap()
                            .collect()
                            .await
                            .unwrap();
                        weighed_scans +=
                            usize::from(actuals.index.is_some() && weighed.index.is_none());
                    }
                }
            }
        }
        // Right after the writes: a reader waits for the maintainer, so
        // nothing is missed even before the index tables are checked.
        globals_match(&p).await;
    }
    assert!(used > 20, "the index was used for {used} queries only");
    assert!(only > 10, "the entries alone answered {only} queries only");
    // Some lookups cost more than the scans they would replace.
    assert!(weighed_scans > 0, "the cost model never chose a scan");
    assert!(
        used_global > 20,
        "the global index was used for {used_global} queries only"
    );
    // Drift is found and repaired: an entry lost and a stray one added
    // behind the gateway's back.
    let table = p.catalog().table("indexed").unwrap();
    let nothing = |_: &tablegate_planner::index::Check| {};
    let retry = tablegate_store::RetryPolicy::default();
    let clean = index::verify(p.store(), &table, false, &retry, &nothing)
        .await
        .unwrap();
    assert_eq!((clean.missing, clean.stale), (0, 0));
    assert!(
        clean.rows > 0 && clean.entries == 2 * clean.rows,
        "{clean:?}"
    );
    let victim = read_all(
        p.store(),
        KeyInterval::prefix(&INDEX_ROW_PREFIX.to_string()),
    )
    .await
    .remove(0);
    let stray = format!("{INDEX_ROW_PREFIX}0002.vffff!zzz");
    p.store()
        .execute(
            "indexed",
            vec![
                Operation::Delete {
                    partition_key: victim.partition_key.clone(),
                    row_key: victim.row_key.clone(),
                    if_match: IfMatch::Any,
                },
                Operation::Insert(EntityWrite::new(victim.partition_key.clone(), stray)),
            ]
            .into(),
        )
        .await
        .unwrap();
    let found = index::verify(p.store(), &table, false, &retry, &nothing)
        .await
        .unwrap();
    assert_eq!(
        (found.missing, found.stale, found.repaired),
        (1, 1, 0),
        "{found:?}"
    );
    let fixed = index::verify(p.store(), &table, true, &retry, &nothing)
        .await
        .unwrap();
    assert_eq!(fixed.repaired, 2);
    let again = index::verify(p.store(), &table, false, &retry, &nothing)
        .await
        .unwrap();
    assert_eq!((again.missing, again.stale), (0, 0));
    entries_match(&p).await;
    // Dropping an index removes its entries; the other keeps working.
    assert_eq!(run(&p, "DROP INDEX ix_a", None, &on).await, "DROP INDEX");
    entries_match(&p).await;
    let q = "SELECT r FROM {t} WHERE p = 'p1' AND b = 'x' ORDER BY r";
    assert_eq!(
        run(&p, &q.replace("{t}", "indexed"), None, &on).await,
        run(&p, &q.replace("{t}", "plain"), None, &on).await
    );
    // Global: the index table goes; with none left, so do the queue
    // entries (a write just before leaves one), and queries still agree.
    let table = p.catalog().table("globaled").unwrap();
    let hidden: Vec<String> = table
        .indexes
        .iter()
        .map(|i| i.global_table("globaled"))
        .collect();
    assert_eq!(
        run(
            &p,
            "UPDATE globaled SET a = 3 WHERE p = 'p2' AND r = 4",
            None,
            &on
        )
        .await,
        run(
            &p,
            "UPDATE plain SET a = 3 WHERE p = 'p2' AND r = 4",
            None,
            &on
        )
        .await
    );
    for ix in ["gx_a", "gx_ba"] {
        assert_eq!(
            run(&p, &format!("DROP INDEX {ix}"), None, &on).await,
            "DROP INDEX"
        );
    }
    for h in &hidden {
        let gone = p
            .store()
            .query(h, &Query::full_scan(), &PageRequest::default())
            .await;
        assert!(gone.is_err(), "index table {h} left behind");
    }
    assert!(
        p.maintainer()
            .caught_up("globaled", Duration::from_secs(60))
            .await
    );
    let left = read_all_of(
        p.store(),
        "globaled",
        KeyInterval::prefix(&INDEX_ROW_PREFIX.to_string()),
    )
    .await;
    assert!(left.is_empty(), "entries left: {left:?}");
    for q in queries(&mut rng) {
        assert_eq!(
            run(&p, &q.replace("{t}", "globaled"), None, &on).await,
            run(&p, &q.replace("{t}", "plain"), None, &on).await,
            "{q}"
        );
    }
}

#[tokio::test]
async fn unique_indexes_refuse_a_second_row_per_value_in_a_partition() {
    let (p, _) = fixture::empty_planner().await;
    let on = opts(IndexMode::Force);
    run(
        &p,
        "CREATE TABLE users (org TEXT, id INT, email TEXT, PRIMARY KEY (org, id))",
        None,
        &on,
    )
    .await;
    run(
        &p,
        "INSERT INTO users VALUES ('o1', 1, 'a'), ('o1', 2, 'a')",
        None,
        &on,
    )
    .await;
    // Built over duplicates: refused, and nothing of it is left.
    let e = run(
        &p,
        "CREATE UNIQUE INDEX users_email ON users (email)",
        None,
        &on,
    )
    .await;
    assert!(
        e.contains("could not create unique index \"users_email\""),
        "{e}"
    );
    assert!(p.catalog().table("users").unwrap().indexes.is_empty());
    run(
        &p,
        "DELETE FROM users WHERE org = 'o1' AND id = 2",
        None,
        &on,
    )
    .await;
    assert_eq!(
        run(
            &p,
            "CREATE UNIQUE INDEX users_email ON users (email)",
            None,
            &on
        )
        .await,
        "CREATE INDEX"
    );
    let dup = run(&p, "INSERT INTO users VALUES ('o1', 3, 'a')", None, &on).await;
    assert!(dup.contains("\"users_email\""), "{dup}");
    // Another partition may hold the value; NULLs are distinct.
    assert_eq!(
        run(&p, "INSERT INTO users VALUES ('o2', 3, 'a')", None, &on).await,
        "INSERT 1"
    );
    assert_eq!(
        run(
            &p,
            "INSERT INTO users VALUES ('o1', 4, NULL), ('o1', 5, NULL)",
            None,
            &on
        )
        .await,
        "INSERT 2"
    );
    // Two rows swapping values in one statement's transaction is fine.
    run(&p, "INSERT INTO users VALUES ('o1', 6, 'b')", None, &on).await;
    let mut txn = Transaction::new();
    run(
        &p,
        "UPDATE users SET email = 'c' WHERE org = 'o1' AND id = 1",
        Some(&mut txn),
        &on,
    )
    .await;
    run(
        &p,
        "UPDATE users SET email = 'a' WHERE org = 'o1' AND id = 6",
        Some(&mut txn),
        &on,
    )
    .await;
    p.commit(txn, &on).await.unwrap();
    assert_eq!(
        run(
            &p,
            "SELECT id FROM users WHERE org = 'o1' AND email = 'a'",
            None,
            &on
        )
        .await,
        "6"
    );
    // Updating a row to its own value is no violation.
    assert_eq!(
        run(
            &p,
            "UPDATE users SET email = 'a' WHERE org = 'o1' AND id = 6",
            None,
            &on
        )
        .await,
        "UPDATE 1"
    );
    let e = run(
        &p,
        "UPDATE users SET email = 'a' WHERE org = 'o1' AND id = 1",
        None,
        &on,
    )
    .await;
    assert!(e.contains("\"users_email\""), "{e}");
    // ON CONFLICT DO NOTHING skips rows a UNIQUE index refuses, as
    // PostgreSQL does for any unique constraint.
    assert_eq!(
        run(
            &p,
            "INSERT INTO users VALUES ('o1', 7, 'a'), ('o1', 8, 'h') ON CONFLICT DO NOTHING",
            None,
            &on
        )
        .await,
        "INSERT 1"
    );
    run(
        &p,
        "DELETE FROM users WHERE org = 'o1' AND id = 8",
        None,
        &on,
    )
    .await;
    // More refused rows than a statement has conflict rounds: all skipped.
    let many: Vec<String> = (0..20)
        .map(|i| format!("('o1', {}, 'a')", 100 + i))
        .collect();
    assert_eq!(
        run(
            &p,
            &format!(
                "INSERT INTO users VALUES {} ON CONFLICT DO NOTHING",
                many.join(", ")
            ),
            None,
            &on
        )
        .await,
        "INSERT 0"
    );
    // A UNIQUE entry left naming a row that no longer has the value (a
    // build racing an update leaves one) does not block the value.
    let stale = {
        let t = p.catalog().table("users").unwrap();
        let ix = t.index("users_email").unwrap();
        let mut props = std::collections::BTreeMap::new();
        props.insert(
            "email".to_owned(),
            tablegate_store::Value::String("q".into()),
        );
        ix.entry_key(&t, &props, "").unwrap()
    };
    p.store()
        .execute(
            "users",
            vec![Operation::Insert(EntityWrite::new("o1", stale).with(
                "tg_base",
                tablegate_store::Value::String("0000000001".into()),
            ))]
            .into(),
        )
        .await
        .unwrap();
    assert_eq!(
        run(&p, "INSERT INTO users VALUES ('o1', 9, 'q')", None, &on).await,
        "INSERT 1"
    );
    assert_eq!(
        run(
            &p,
            "SELECT id FROM users WHERE org = 'o1' AND email = 'q'",
            None,
            &on
        )
        .await,
        "9"
    );
    run(
        &p,
        "DELETE FROM users WHERE org = 'o1' AND id = 9",
        None,
        &on,
    )
    .await;
    // Rows written behind the gateway's back that share a UNIQUE value are
    // reported, and repair leaves them to the user.
    p.store()
        .execute(
            "users",
            vec![Operation::Insert(
                EntityWrite::new("o1", "0000000042")
                    .with("email", tablegate_store::Value::String("a".into())),
            )]
            .into(),
        )
        .await
        .unwrap();
    let t = p.catalog().table("users").unwrap();
    let retry = tablegate_store::RetryPolicy::default();
    let c = index::verify(p.store(), &t, true, &retry, &|_| {})
        .await
        .unwrap();
    assert_eq!((c.duplicates, c.missing), (1, 0), "{c:?}");
    assert!(c.examples[0].contains("duplicate"), "{c:?}");
    p.store()
        .execute(
            "users",
            vec![Operation::Delete {
                partition_key: "o1".into(),
                row_key: "0000000042".into(),
                if_match: IfMatch::Any,
            }]
            .into(),
        )
        .await
        .unwrap();
    // Index entries never show: not in SELECT *, not in count(*).
    assert_eq!(
        run(
            &p,
            "SELECT id FROM users WHERE org = 'o1' ORDER BY id",
            None,
            &on
        )
        .await,
        "1\n4\n5\n6"
    );
    // Refused forms say so.
    for (sql, what) in [
        ("CREATE INDEX ON users (org)", "PartitionKey"),
        ("CREATE INDEX ON users (lower(email))", "expression"),
        ("CREATE INDEX ON users (nope)", "does not exist"),
        ("CREATE INDEX users_email ON users (id)", "already exists"),
        ("DROP INDEX nope", "does not exist"),
    ] {
        let e = run(&p, sql, None, &on).await;
        assert!(e.contains(what), "{sql}: {e}");
    }
    assert_eq!(
        run(&p, "DROP INDEX IF EXISTS nope", None, &on).await,
        "DROP INDEX"
    );
}

#[tokio::test]
async fn writes_planned_before_an_index_change_follow_it() {
    let (p, store) = fixture::empty_planner().await;
    let on = opts(IndexMode::Force);
    run(
        &p,
        "CREATE TABLE indexed (p TEXT, r INT, a INT, b TEXT, c FLOAT8, PRIMARY KEY (p, r))",
        None,
        &on,
    )
    .await;
    // Two range partitions: DROP INDEX must follow its reads across them.
    store.split_blocking("indexed", "p2").unwrap();
    for pk in PKS {
        run(
            &p,
            &format!("INSERT INTO indexed VALUES ('{pk}', 1, 1, 'x', 0), ('{pk}', 2, 2, 'y', 0)"),
            None,
            &on,
        )
        .await;
    }
    // A transaction begun, and a statement planned, before CREATE INDEX.
    let mut txn = Transaction::new();
    run(
        &p,
        "INSERT INTO indexed VALUES ('p1', 3, 1, 'z', 0)",
        Some(&mut txn),
        &on,
    )
    .await;
    let sql = "UPDATE indexed SET a = 1 WHERE p = 'p2' AND r = 2";
    let stmt = Planner::parse(sql).unwrap().remove(0);
    let Plan::Write(planned) = p.plan(&stmt, sql).unwrap() else {
        panic!("a write")
    };
    assert_eq!(
        run(&p, "CREATE INDEX idx_a ON indexed (a)", None, &on).await,
        "CREATE INDEX"
    );
    p.commit(txn, &on).await.unwrap();
    p.write(&planned, &[], None, &on).await.unwrap();
    entries_match(&p).await;
    assert_eq!(
        run(
            &p,
            "SELECT r FROM indexed WHERE p = 'p1' AND a = 1 ORDER BY r",
            None,
            &on
        )
        .await,
        "1\n3"
    );
    assert_eq!(
        run(
            &p,
            "SELECT r FROM indexed WHERE p = 'p2' AND a = 1 ORDER BY r",
            None,
            &on
        )
        .await,
        "1\n2"
    );
    // Dropped: every entry goes, in both range partitions; a new index
    // never takes a dropped one's id.
    let old_id = p.catalog().table("indexed").unwrap().indexes[0].id;
    assert_eq!(run(&p, "DROP INDEX idx_a", None, &on).await, "DROP INDEX");
    assert!(
        read_all(
            p.store(),
            KeyInterval::prefix(&INDEX_ROW_PREFIX.to_string())
        )
        .await
        .is_empty()
    );
    run(&p, "CREATE INDEX idx_b ON indexed (b)", None, &on).await;
    let t = p.catalog().table("indexed").unwrap();
    assert!(
        t.indexes[0].id > old_id && !t.indexes[0].building,
        "{:?}",
        t.indexes
    );
    entries_match(&p).await;
    // A transaction holds as many rows as fit when each changes its
    // indexed value: 100 / (1 + 2) with one index.
    let mut txn = Transaction::new();
    for r in 0..33 {
        let out = run(
            &p,
            &format!("INSERT INTO indexed VALUES ('p3', {}, 0, 'w', 0)", 100 + r),
            Some(&mut txn),
            &on,
        )
        .await;
        assert_eq!(out, "INSERT 1");
    }
    let full = run(
        &p,
        "INSERT INTO indexed VALUES ('p3', 200, 0, 'w', 0)",
        Some(&mut txn),
        &on,
    )
    .await;
    assert!(
        full.contains("at most 33 distinct entities") && full.contains("index"),
        "{full}"
    );
    assert_eq!(p.commit(txn, &on).await.unwrap(), 33);
    entries_match(&p).await;
}

#[tokio::test]
async fn a_building_index_is_kept_but_not_used_for_lookups() {
    let (p, _) = fixture::empty_planner().await;
    let on = opts(IndexMode::Force);
    run(
        &p,
        "CREATE TABLE indexed (p TEXT, r INT, a INT, b TEXT, c FLOAT8, PRIMARY KEY (p, r))",
        None,
        &on,
    )
    .await;
    run(&p, "CREATE INDEX idx_a ON indexed (a)", None, &on).await;
    let sql = "SELECT r FROM indexed WHERE p = 'p1' AND a = 1";
    let stmt = Planner::parse(sql).unwrap().remove(0);
    let Plan::Select(s) = p.plan(&stmt, sql).unwrap() else {
        panic!("a select")
    };
    let bound = s.bind(&[]).unwrap();
    let mut table = (*p.catalog().table("indexed").unwrap()).clone();
    assert!(index::choose(&table, &bound.access).is_some());
    table.indexes[0].building = true;
    assert_eq!(index::choose(&table, &bound.access), None);
}

#[tokio::test]
async fn a_throttled_write_names_the_indexes_it_carried() {
    use tablegate_store::partition::{PartitionConfig, Targets};
    let store = tablegate_store::PartitionedStore::new(
        tablegate_store::LocalStore::in_memory(),
        PartitionConfig {
            targets: Some(Targets {
                per_partition: 20,
                per_server: 10_000,
                per_account: 20_000,
                burst: 2.5,
            }),
            move_offline: Duration::ZERO,
            ..Default::default()
        },
    )
    .unwrap();
    let p = Planner::open(store).await.unwrap();
    let o = ExecOptions {
        retry: tablegate_store::RetryPolicy::None,
        ..ExecOptions::default()
    };
    for t in ["plain", "indexed"] {
        let sql = format!("CREATE TABLE {t} (p TEXT, r INT, a INT, PRIMARY KEY (p, r))");
        assert_eq!(run(&p, &sql, None, &o).await, "CREATE TABLE");
    }
    assert_eq!(
        run(&p, "CREATE INDEX indexed_a ON indexed (a)", None, &o).await,
        "CREATE INDEX"
    );
    // A request is admitted while its partition's balance is positive and
    // charged what it wrote: 40 rows leave the plain partition 10 of its
    // 50 entities of burst; with an entry each they leave the indexed one
    // 30 in debt (1.5 s at 20/s), and its next write is refused, naming
    // the index.
    let rows: Vec<String> = (0..40).map(|r| format!("('x', {r}, {r})")).collect();
    let insert = |t: &str| format!("INSERT INTO {t} VALUES {}", rows.join(", "));
    let one = |t: &str| format!("INSERT INTO {t} VALUES ('x', 99, 1)");
    assert_eq!(run(&p, &insert("plain"), None, &o).await, "INSERT 40");
    assert_eq!(run(&p, &one("plain"), None, &o).await, "INSERT 1");
    assert_eq!(run(&p, &insert("indexed"), None, &o).await, "INSERT 40");
    let err = run(&p, &one("indexed"), None, &o).await;
    assert!(
        err.contains("busy")
            && err.contains("the write's 2 operations included 1 of index indexed_a"),
        "{err}"
    );
}

/// Index-only reads: a row's ETag and Timestamp are its own, not its
/// entry's, so a query that tests them reads the row; an update of a
/// column the entries do not carry leaves the answer right; a column named
/// like the entries' own property cannot be carried.
#[tokio::test]
async fn index_only_reads_leave_the_rows_own_columns_to_the_row() {
    let (p, _) = fixture::empty_planner().await;
    let on = opts(IndexMode::Force);
    for sql in [
        "CREATE TABLE items (p TEXT, r INT, a INT, b TEXT, c FLOAT8, PRIMARY KEY (p, r))",
        "CREATE INDEX items_a ON items (a) INCLUDE (c)",
        "INSERT INTO items VALUES ('x', 1, 1, 'one', 1.5), ('x', 2, 1, 'two', 2.5)",
        "UPDATE items SET b = 'uno' WHERE p = 'x' AND r = 1",
    ] {
        assert!(!run(&p, sql, None, &on).await.starts_with("error"), "{sql}");
    }
    let etag = run(
        &p,
        "SELECT etag FROM items WHERE p = 'x' AND r = 1",
        None,
        &on,
    )
    .await
    .replace('\'', "''");
    let actuals = |sql: String| {
        let p = &p;
        let on = &on;
        async move {
            let stmt = Planner::parse(&sql).unwrap().remove(0);
            let Plan::Select(s) = p.plan(&stmt, &sql).unwrap() else {
                panic!("{sql}")
            };
            let (batches, a) = p.execute(&s, &[], on).unwrap().collect().await.unwrap();
            (rows(&batches).join("\n"), a.index_only)
        }
    };
    assert_eq!(
        actuals("SELECT r, c FROM items WHERE p = 'x' AND a = 1".into()).await,
        ("1|1.5\n2|2.5".to_owned(), true)
    );
    assert_eq!(
        actuals(format!(
            "SELECT r, c FROM items WHERE p = 'x' AND a = 1 AND etag = '{etag}'"
        ))
        .await,
        ("1|1.5".to_owned(), false)
    );
    assert_eq!(
        actuals("SELECT r, b FROM items WHERE p = 'x' AND a = 1".into()).await,
        ("1|uno\n2|two".to_owned(), false)
    );
    // UPDATE reads whole rows: EXPLAIN prices it with the row lookups.
    let sql = "EXPLAIN UPDATE items SET c = 0 WHERE p = 'x' AND a = 1";
    let stmt = Planner::parse(sql).unwrap().remove(0);
    let Plan::Explain(e) = p.plan(&stmt, sql).unwrap() else {
        panic!("{sql}")
    };
    let text = p.explain_plan(&e, &[], &on).await.unwrap().join("\n");
    assert!(
        text.contains("Index Lookup: items_a") && !text.contains("Index Only"),
        "{text}"
    );
    run(
        &p,
        "CREATE TABLE oddly (p TEXT, r INT, a INT, tg_base TEXT, PRIMARY KEY (p, r))",
        None,
        &on,
    )
    .await;
    let refused = run(
        &p,
        "CREATE INDEX oddly_a ON oddly (a) INCLUDE (tg_base)",
        None,
        &on,
    )
    .await;
    assert!(refused.contains("\"tg_base\""), "{refused}");
}

#[tokio::test]
async fn included_copies_count_against_a_transaction_and_a_batch() {
    let (p, _) = fixture::empty_planner().await;
    let on = opts(IndexMode::On);
    for sql in [
        "CREATE TABLE notes (p TEXT, r INT, a INT, n1 TEXT, n2 TEXT, PRIMARY KEY (p, r))",
        "CREATE INDEX notes_a ON notes (a) INCLUDE (n1, n2)",
    ] {
        assert!(!run(&p, sql, None, &on).await.starts_with("error"), "{sql}");
    }
    // Each row carries about 120 KB, and its entry a copy: 33 rows fit the
    // operations of one transaction, but only half as many its bytes.
    let big = "x".repeat(30_000);
    let row = |r: usize| format!("('p', {r}, {r}, '{big}', '{big}')");
    let mut txn = Transaction::new();
    let mut staged = 0;
    let refused = loop {
        let sql = format!("INSERT INTO notes VALUES {}", row(staged));
        let out = run(&p, &sql, Some(&mut txn), &on).await;
        if out.starts_with("error") {
            break out;
        }
        staged += 1;
    };
    assert!(
        refused.contains("counting the entries of its indexes"),
        "{refused}"
    );
    assert!((10..25).contains(&staged), "{staged} rows staged");
    // What was staged commits: the refusal came before COMMIT's batch
    // could be too big for the store.
    assert_eq!(p.commit(txn, &on).await.unwrap(), staged);
    // One statement of 40 such rows splits into batches that fit.
    // (The values are parameters: a statement's text stops at 1 MiB.)
    let rows: Vec<String> = (100..140)
        .map(|r| format!("('p', {r}, {r}, $1, $1)"))
        .collect();
    let sql = format!("INSERT INTO notes VALUES {}", rows.join(", "));
    let stmt = Planner::parse(&sql).unwrap().remove(0);
    let Plan::Write(w) = p.plan(&stmt, &sql).unwrap() else {
        panic!("{sql}")
    };
    let param = [Some(tablegate_store::Value::String(big.clone()))];
    assert_eq!(p.write(&w, &param, None, &on).await.unwrap().rows, 40);
    let table = p.catalog().table("notes").unwrap();
    let retry = tablegate_store::RetryPolicy::default();
    let c = index::verify(p.store(), &table, false, &retry, &|_| {})
        .await
        .unwrap();
    assert_eq!(
        (c.rows, c.entries),
        (staged as u64 + 40, staged as u64 + 40)
    );
    assert_eq!((c.missing, c.stale), (0, 0), "{c:?}");
}

#[tokio::test]
async fn a_carried_minus_zero_is_not_zero() {
    let (p, _) = fixture::empty_planner().await;
    let on = opts(IndexMode::Force);
    for sql in [
        "CREATE TABLE signs (p TEXT, r INT, a INT, c FLOAT8, PRIMARY KEY (p, r))",
        "CREATE INDEX signs_a ON signs (a) INCLUDE (c)",
        "INSERT INTO signs VALUES ('x', 1, 1, 0)",
        "UPDATE signs SET c = '-0'::float8 WHERE p = 'x' AND r = 1",
    ] {
        assert!(!run(&p, sql, None, &on).await.starts_with("error"), "{sql}");
    }
    // The update rewrote the entry in place, though -0 == 0: the
    // index-only read answers the row's value.
    let sql = "SELECT c FROM signs WHERE p = 'x' AND a = 1";
    assert_eq!(run(&p, sql, None, &on).await, "-0");
    let entry = read_all_of(
        p.store(),
        "signs",
        KeyInterval::prefix(&INDEX_ROW_PREFIX.to_string()),
    )
    .await
    .remove(0);
    assert_eq!(
        entry.properties["c"],
        tablegate_store::Value::Double(-0.0),
        "{entry:?}"
    );
    assert!(
        matches!(entry.properties["c"], tablegate_store::Value::Double(d) if d.is_sign_negative())
    );
    // An entry carrying 0 for the row's -0 is drift that verify finds.
    let mut w = EntityWrite::new(entry.partition_key.clone(), entry.row_key.clone());
    for (k, v) in &entry.properties {
        w = w.with(k, v.clone());
    }
    w = w.with("c", tablegate_store::Value::Double(0.0));
    p.store()
        .execute("signs", vec![Operation::InsertOrReplace(w)].into())
        .await
        .unwrap();
    assert_eq!(run(&p, sql, None, &on).await, "0");
    let table = p.catalog().table("signs").unwrap();
    let retry = tablegate_store::RetryPolicy::default();
    let found = index::verify(p.store(), &table, false, &retry, &|_| {})
        .await
        .unwrap();
    assert_eq!(found.missing, 1, "{found:?}");
    assert!(found.examples[0].starts_with("outdated"), "{found:?}");
    let fixed = index::verify(p.store(), &table, true, &retry, &|_| {})
        .await
        .unwrap();
    assert_eq!(fixed.repaired, 1, "{fixed:?}");
    assert_eq!(run(&p, sql, None, &on).await, "-0");
}

/// CREATE INDEX … INCLUDE while the same gateway updates the included
/// values: the backfill writes entries from rows it read earlier, so only
/// the pass that ends the build (writes held) makes the entries right for
/// index-only reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_include_build_racing_updates_ends_with_the_rows_values() {
    use tablegate_store::partition::{PartitionConfig, Targets};
    let store = tablegate_store::PartitionedStore::new(
        tablegate_store::LocalStore::in_memory(),
        PartitionConfig {
            // Slow enough that updates land between the backfill's reads
            // and its writes.
            targets: Some(Targets {
                per_partition: 2_000,
                per_server: 4_000,
                per_account: 8_000,
                burst: 1.0,
            }),
            move_offline: Duration::ZERO,
            ..Default::default()
        },
    )
    .unwrap();
    let p = std::sync::Arc::new(Planner::open(store).await.unwrap());
    let o = opts(IndexMode::Force);
    let sql = "CREATE TABLE raced (p TEXT, r INT, a INT, c INT, PRIMARY KEY (p, r))";
    assert_eq!(run(&p, sql, None, &o).await, "CREATE TABLE");
    for pk in 0..20 {
        let rows: Vec<String> = (0..100)
            .map(|r| format!("('p{pk}', {r}, {}, 0)", r % 7))
            .collect();
        let sql = format!("INSERT INTO raced VALUES {}", rows.join(", "));
        assert_eq!(run(&p, &sql, None, &o).await, "INSERT 100");
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = tokio::spawn({
        let (p, done, o) = (p.clone(), done.clone(), o.clone());
        async move {
            let mut rng = Rng::with_seed(7);
            let mut n = 0u32;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                n += 1;
                let sql = format!(
                    "UPDATE raced SET c = {n} WHERE p = 'p{}' AND r = {}",
                    rng.usize(0..20),
                    rng.usize(0..100)
                );
                let out = run(&p, &sql, None, &o).await;
                assert!(out == "UPDATE 1" || out.contains("busy"), "{out}");
            }
            n
        }
    });
    let sql = "CREATE INDEX raced_a ON raced (a) INCLUDE (c)";
    assert_eq!(run(&p, sql, None, &o).await, "CREATE INDEX");
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let updates = writer.await.unwrap();
    assert!(updates > 10, "only {updates} updates ran beside the build");
    let table = p.catalog().table("raced").unwrap();
    let retry = tablegate_store::RetryPolicy::default();
    let c = index::verify(p.store(), &table, false, &retry, &|_| {})
        .await
        .unwrap();
    assert_eq!((c.rows, c.entries), (2_000, 2_000), "{c:?}");
    assert_eq!((c.missing, c.stale), (0, 0), "{c:?}");
    // Index-only reads answer what the rows hold.
    for pk in 0..20 {
        let sql = format!("SELECT r, c FROM raced WHERE p = 'p{pk}' AND a = 3 ORDER BY r");
        let forced = run(&p, &sql, None, &o).await;
        let scanned = run(&p, &sql, None, &opts(IndexMode::Off)).await;
        assert_eq!(forced, scanned, "{sql}");
    }
}
