//! The Azure backend against Azurite: `tablegate serve --backend azure`
//! driven by real `psql`.
//!
//! Azurite's connection string comes from `TABLEGATE_AZURITE` (set by
//! `.ci/run`). Azurite is shared by the tests (and by whoever else uses it),
//! so every table name is unique to the run, and every server attaches
//! whatever tables already exist when it starts.

use std::io::Write;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tablegate_azure::AzureStore;
use tablegate_store::{
    EntityWrite, IfMatch, KeyBox, KeyInterval, Operation, PageRequest, Query, TableStore, Value,
};

use super::server::{TestServer, psql, psql_command};

mod cosmos;
mod faults;
mod fleet;
mod parallel;

/// The Azurite connection string, or a failure saying how to get one.
fn azurite() -> String {
    match std::env::var("TABLEGATE_AZURITE") {
        Ok(s) if !s.trim().is_empty() => s,
        _ => panic!(
            "TABLEGATE_AZURITE is not set: the Azure e2e tests need Azurite. Run `.ci/run`, \
             or start `tests/clients/node_modules/.bin/azurite-table --inMemoryPersistence \
             --tablePort 10102` and export \
             TABLEGATE_AZURITE='UseDevelopmentStorage=true;TableEndpoint=http://127.0.0.1:10102/devstoreaccount1'"
        ),
    }
}

/// Azurite's Table endpoint, from its connection string.
fn table_endpoint(conn: &str) -> String {
    conn.split(';')
        .find_map(|p| p.trim().strip_prefix("TableEndpoint="))
        .unwrap_or("http://127.0.0.1:10002/devstoreaccount1")
        .trim_end_matches('/')
        .to_owned()
}

/// A table name unique to this run (Azure: letters and digits only).
fn unique(prefix: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        % 1_000_000;
    format!(
        "{prefix}{}t{millis}n{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Held while a server starts and while a test makes a table behind
/// tablegate's back: a server attaches every table when it starts, and one
/// caught between its creation and its first entities would be recorded in
/// the shared catalog with no columns.
static STARTS: Mutex<()> = Mutex::new(());

fn starts() -> std::sync::MutexGuard<'static, ()> {
    STARTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// `tablegate serve --backend azure` on Azurite (the data directory is
/// unused by this backend; it is there because `serve_in` passes one).
struct Azure {
    s: TestServer,
    _dir: tempfile::TempDir,
}

fn serve() -> Azure {
    serve_on(&azurite(), &[])
}

/// [`serve`] with another connection string (the fault proxy's) and more
/// arguments.
fn serve_on(conn: &str, args: &[&str]) -> Azure {
    let dir = tempfile::tempdir().unwrap();
    let _start = starts();
    let mut all = vec!["--backend", "azure", "--azure-connection-string", conn];
    all.extend(args);
    let s = TestServer::serve_in(dir.path(), &all);
    Azure { s, _dir: dir }
}

/// Drops its table through the server when the test ends, passed or not
/// (declared after the server, so dropped while it still runs): Azurite is
/// shared, and every server attaches what is left in it.
struct DropTable {
    port: u16,
    table: String,
}

impl DropTable {
    fn new(s: &TestServer, table: &str) -> DropTable {
        DropTable {
            port: s.port,
            table: table.to_owned(),
        }
    }
}

impl Drop for DropTable {
    fn drop(&mut self) {
        let _ = Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-U", "tablegate", "-X", "-q", "tablegate", "-c"])
            .arg(format!("DROP TABLE IF EXISTS {}", self.table))
            .output();
    }
}

/// A server on Azurite and a new table `prefix…` of `columns` (dropped
/// when the test ends, before the server stops).
fn serve_with_table(prefix: &str, columns: &str) -> (Azure, String, DropTable) {
    with_table(serve(), prefix, columns)
}

/// `a` and a new table `prefix…` of `columns` made through it.
fn with_table(a: Azure, prefix: &str, columns: &str) -> (Azure, String, DropTable) {
    let t = unique(prefix);
    let drop = DropTable::new(&a.s, &t);
    let (_, err, ok) = psql(&a.s, &[&format!("CREATE TABLE {t} ({columns})")]);
    assert!(ok, "{err}");
    (a, t, drop)
}

/// psql, unaligned and tuples only (`|` between fields), one `-c` each.
fn psql_at(s: &TestServer, commands: &[&str]) -> (String, String, bool) {
    let mut cmd = psql_command(s);
    cmd.args(["-v", "ON_ERROR_STOP=1", "-A", "-t", "-F", "|"]);
    for c in commands {
        cmd.args(["-c", c]);
    }
    let out = cmd.output().expect("psql is installed");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

/// psql reading a script from stdin (one session, statement by statement,
/// as a person typing them), with extra psql arguments.
fn psql_script(s: &TestServer, args: &[&str], script: &str) -> (String, String, bool) {
    let mut child = psql_command(s)
        .args(args)
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql is installed");
    let mut stdin = child.stdin.take().unwrap();
    let text = script.to_owned();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(text.as_bytes());
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

/// A query's rows as `a|b|c` lines.
fn rows(s: &TestServer, sql: &str) -> Vec<String> {
    let (out, err, ok) = psql_at(s, &[sql]);
    assert!(ok, "{sql}: {err}");
    out.lines().map(str::to_owned).collect()
}

/// The plan lines of `EXPLAIN [ANALYZE] sql`, trimmed.
fn plan(s: &TestServer, explain: &str, sql: &str) -> Vec<String> {
    rows(s, &format!("{explain} {sql}"))
        .into_iter()
        .map(|l| l.trim().to_owned())
        .collect()
}

/// The first plan line starting with `prefix`.
fn line<'a>(plan: &'a [String], prefix: &str) -> &'a str {
    plan.iter()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line {prefix:?} in plan:\n{}", plan.join("\n")))
}

/// `returned N` of the `Actual: entities scanned ...` line.
fn returned(plan: &[String]) -> u64 {
    let l = line(plan, "Actual: entities scanned");
    l.split(", ")
        .find_map(|p| p.strip_prefix("returned "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no returned count in {l:?}"))
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn azure_psql_tour() {
    let a = serve();
    let s = &a.s;
    let t = unique("tour");
    let _drop = DropTable::new(s, &t);
    let (_, err, ok) = psql(
        s,
        &[
            &format!(
                "CREATE TABLE {t} (region text, id text, n int, x double precision, \
                 label text, ok boolean, at timestamptz, PRIMARY KEY (region, id))"
            ),
            &format!(
                "INSERT INTO {t} VALUES \
                 ('east', 'e1', 1, 1.5, 'one', true, '2024-01-01 10:00:00+00'), \
                 ('east', 'e2', 2, 2.5, 'two', false, '2024-01-02 10:00:00+00'), \
                 ('east', 'e3', 3, 3.5, 'three', true, NULL), \
                 ('east', 'e4', 40, 40.25, 'forty', false, '2024-01-04 00:00:00+00'), \
                 ('north', 'n1', 10, 10.5, 'ten', true, '2024-02-01 00:00:00+00'), \
                 ('north', 'n2', 20, NULL, 'twenty', NULL, '2024-02-02 00:00:00+00'), \
                 ('south', 's1', 100, 100.5, 'hundred', true, '2024-03-01 00:00:00+00'), \
                 ('west', 'w1', 5, -5.75, 'five', false, '2024-04-01 12:30:00+00'), \
                 ('west', 'w2', 50, 50, 'fifty', true, '2024-04-02 00:00:00+00')"
            ),
        ],
    );
    assert!(ok, "{err}");
    // One entity-group transaction per PartitionKey.
    assert!(err.contains("4 entity-group transactions"), "{err}");

    // Every type round-trips through the service.
    assert_eq!(
        rows(
            s,
            &format!(
                "SELECT region, id, n, x, label, ok, at FROM {t} WHERE region = 'east' AND id = 'e2'"
            )
        ),
        ["east|e2|2|2.5|two|f|2024-01-02 10:00:00+00"]
    );
    assert_eq!(
        rows(
            s,
            &format!("SELECT id, x, ok, at FROM {t} WHERE region = 'north' AND id = 'n2'")
        ),
        ["n2|||2024-02-02 00:00:00+00"]
    );

    // One query of each class: its rows, then EXPLAIN ANALYZE.
    let backend = "Backend: Azure Table Storage (account devstoreaccount1, ";
    for (sql, class, filter, want) in [
        (
            format!("SELECT region, id, n FROM {t} WHERE region = 'east' AND id = 'e2'"),
            "point",
            "PartitionKey eq 'east' and RowKey eq 'e2'",
            vec!["east|e2|2"],
        ),
        (
            // With a residual filter on the int column, sent to the service.
            format!("SELECT region, id, n FROM {t} WHERE region = 'east' AND id >= 'e2' AND n > 2"),
            "row-range",
            "PartitionKey eq 'east' and RowKey ge 'e2' and n gt 2",
            vec!["east|e3|3", "east|e4|40"],
        ),
        (
            format!("SELECT region, id, n FROM {t} WHERE region >= 'south'"),
            "partition-range",
            "PartitionKey ge 'south'",
            vec!["south|s1|100", "west|w1|5", "west|w2|50"],
        ),
        (
            format!("SELECT region, id, n FROM {t} WHERE n >= 20"),
            "full-scan",
            "n ge 20",
            vec!["east|e4|40", "north|n2|20", "south|s1|100", "west|w2|50"],
        ),
    ] {
        assert_eq!(rows(s, &sql), want, "{sql}");
        let p = plan(s, "EXPLAIN ANALYZE", &sql);
        let all = p.join("\n");
        assert!(
            line(&p, "Class: ").starts_with(&format!("Class: {class} (")),
            "{sql}:\n{all}"
        );
        assert!(line(&p, "Backend: ").starts_with(backend), "{all}");
        let f = line(&p, "OData $filter: ");
        assert!(f.contains(filter), "{sql}: want {filter:?} in\n{all}");
        assert!(f.ends_with(" comparisons)"), "{all}");
        assert!(
            line(&p, "OData $select: ").contains("PartitionKey,RowKey"),
            "{all}"
        );
        assert!(
            line(&p, "Estimated: ").starts_with("Estimated: unknown ("),
            "{all}"
        );
        assert_eq!(returned(&p), want.len() as u64, "{sql}:\n{all}");
        // Without ANALYZE: the same plan, nothing measured.
        let p = plan(s, "EXPLAIN", &sql);
        assert!(line(&p, "Class: ").starts_with(&format!("Class: {class} (")));
        assert!(line(&p, "OData $filter: ").contains(filter));
        assert!(!p.iter().any(|l| l.starts_with("Actual:")), "{p:?}");
    }

    // UPDATE ... SET col = NULL removes the property (RETURNING shows it).
    let (out, err, ok) = psql_at(
        s,
        &[&format!(
            "UPDATE {t} SET label = NULL, n = n + 1 WHERE region = 'east' AND id = 'e1' \
             RETURNING id, n, label, x"
        )],
    );
    assert!(ok, "{err}");
    assert!(out.starts_with("e1|2||1.5\n"), "{out}");
    assert_eq!(
        rows(
            s,
            &format!(
                "SELECT id, n, coalesce(label, '<null>') FROM {t} WHERE region = 'east' AND id = 'e1'"
            )
        ),
        ["e1|2|<null>"]
    );
    let e = runtime().block_on(async {
        let store = AzureStore::connect(&azurite(), None).await.unwrap();
        store.get(&t, "east", "e1").await.unwrap().unwrap()
    });
    assert!(!e.properties.contains_key("label"), "{e:?}");
    assert_eq!(e.properties.get("n"), Some(&Value::Int32(2)), "{e:?}");

    // DELETE of one entity.
    let (out, err, ok) = psql(
        s,
        &[&format!(
            "DELETE FROM {t} WHERE region = 'north' AND id = 'n2'"
        )],
    );
    assert!(ok && out.contains("DELETE 1"), "{out}{err}");
    assert!(
        rows(s, &format!("SELECT id FROM {t} WHERE region = 'north'")) == ["n1"],
        "n2 deleted"
    );

    // Aggregates run in the analytics engine over the store scan.
    // n: 2 2 3 40 10 100 5 50.
    assert_eq!(
        rows(s, &format!("SELECT count(*), sum(n), avg(n) FROM {t}")),
        ["8|212|26.5"]
    );
    assert_eq!(
        rows(
            s,
            &format!("SELECT region, count(*), avg(n) FROM {t} GROUP BY region ORDER BY region")
        ),
        ["east|4|11.75", "north|1|10", "south|1|100", "west|2|27.5"]
    );
    let p = plan(s, "EXPLAIN", &format!("SELECT count(*), avg(n) FROM {t}"));
    assert!(
        line(&p, "Route: ").starts_with("Route: analytics engine"),
        "{p:?}"
    );

    let (_, err, ok) = psql(s, &[&format!("DROP TABLE {t}")]);
    assert!(ok, "{err}");
}

#[test]
fn azure_cursor_pages_5000_rows() {
    let a = serve();
    let s = &a.s;
    let t = unique("cur");
    let _drop = DropTable::new(s, &t);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rows.txt");
    let mut data = String::new();
    let mut want = Vec::new();
    for i in 0..5000 {
        data.push_str(&format!("p{}\tr{i:05}\t{i}\n", i % 5));
        want.push(format!("p{}|r{i:05}|{i}", i % 5));
    }
    // Key order: PartitionKey, then RowKey.
    want.sort();
    std::fs::write(&file, data).unwrap();
    let (out, err, ok) = psql(
        s,
        &[
            &format!("CREATE TABLE {t} (pk text, rk text, n int, PRIMARY KEY (pk, rk))"),
            &format!("\\copy {t} from '{}'", file.display()),
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains("COPY 5000"), "{out}");
    // 5 PartitionKeys × 1,000 rows: 10 EGTs each.
    assert!(err.contains("50 entity-group transactions"), "{err}");

    // One session: a cursor over a full scan, 1,000 rows a FETCH until one
    // comes back empty; and one over the analytics engine (ORDER BY).
    let mut script = format!(
        "BEGIN;\nDECLARE c CURSOR FOR SELECT pk, rk, n FROM {t};\n\
         DECLARE d CURSOR FOR SELECT rk FROM {t} ORDER BY n DESC;\n"
    );
    for _ in 0..6 {
        script.push_str("FETCH 1000 FROM c;\n");
    }
    script.push_str("FETCH 3 FROM d;\nCLOSE c;\nCLOSE d;\nCOMMIT;\n");
    let started = Instant::now();
    let (out, err, ok) = psql_script(
        s,
        &["-v", "ON_ERROR_STOP=1", "-A", "-F", "|", "-P", "footer=on"],
        &script,
    );
    assert!(ok, "{err}");
    let elapsed = started.elapsed();
    // Each FETCH prints a header, its rows and a footer.
    let footers: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with('(') && l.ends_with(')'))
        .collect();
    assert_eq!(
        footers,
        [
            "(1000 rows)",
            "(1000 rows)",
            "(1000 rows)",
            "(1000 rows)",
            "(1000 rows)",
            "(0 rows)",
            "(3 rows)"
        ],
        "{err}"
    );
    let got: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with('p') && *l != "pk|rk|n" && l.matches('|').count() == 2)
        .collect();
    assert_eq!(got.len(), 5000);
    let distinct: std::collections::BTreeSet<&str> = got.iter().copied().collect();
    assert_eq!(distinct.len(), 5000, "distinct rows");
    assert!(got == want, "rows in key order");
    let top: Vec<&str> = out
        .lines()
        .skip_while(|l| *l != "(0 rows)")
        .filter(|l| l.starts_with("r0"))
        .collect();
    assert_eq!(top, ["r04999", "r04998", "r04997"], "{out}");
    assert!(out.contains("COMMIT"), "{out}");
    assert!(elapsed < Duration::from_secs(20), "{elapsed:?}");

    // Read page by page, the scan follows the service's continuation
    // tokens (1,000 a page); in parallel, it is cut into segments.
    let p = plan(
        s,
        "SET tablegate.scan_parallelism = 1; EXPLAIN ANALYZE",
        &format!("SELECT pk, rk FROM {t}"),
    );
    assert!(
        line(&p, "Class: ").starts_with("Class: full-scan ("),
        "{p:?}"
    );
    assert!(
        line(&p, "OData $filter: ").starts_with("OData $filter: none"),
        "{p:?}"
    );
    let actual = line(&p, "Actual: entities scanned");
    assert!(
        actual.starts_with("Actual: entities scanned 5000, returned 5000, pages 5,")
            && actual.contains("continuation tokens followed 4"),
        "{actual}"
    );
    let p = plan(s, "EXPLAIN ANALYZE", &format!("SELECT pk, rk FROM {t}"));
    let actual = line(&p, "Actual: entities scanned");
    assert!(
        actual.starts_with("Actual: entities scanned 5000, returned 5000,"),
        "{actual}"
    );
    assert!(
        p.iter()
            .any(|l| l.starts_with("Actual: ") && l.contains("segments read in parallel")),
        "{p:?}"
    );

    let (_, err, ok) = psql(s, &[&format!("DROP TABLE {t}")]);
    assert!(ok, "{err}");
}

#[test]
fn azure_transactions_100_and_101() {
    let a = serve();
    let s = &a.s;
    let t = unique("txn");
    let _drop = DropTable::new(s, &t);
    let (_, err, ok) = psql(
        s,
        &[&format!(
            "CREATE TABLE {t} (pk text, rk text, n int, PRIMARY KEY (pk, rk))"
        )],
    );
    assert!(ok, "{err}");
    let txn = |pk: &str, n: usize| {
        let mut script = String::from("\\set VERBOSITY verbose\nBEGIN;\n");
        for i in 0..n {
            script.push_str(&format!(
                "INSERT INTO {t} VALUES ('{pk}', 'r{i:03}', {i});\n"
            ));
        }
        script.push_str("COMMIT;\n");
        script
    };

    // 100 INSERTs into one new PartitionKey: one entity-group transaction.
    let (out, err, ok) = psql_script(s, &["-v", "ON_ERROR_STOP=1"], &txn("g100", 100));
    assert!(ok, "{err}");
    assert_eq!(out.matches("INSERT 0 1").count(), 100, "{out}");
    assert!(out.trim_end().ends_with("COMMIT"), "{out}");
    assert_eq!(
        rows(
            s,
            &format!("SELECT count(*), min(rk), max(rk), sum(n) FROM {t} WHERE pk = 'g100'")
        ),
        ["100|r000|r099|4950"]
    );

    // 101: refused with 54000 (the 101st entity, or at COMMIT), and the
    // transaction ends in a rollback with nothing applied. psql goes on
    // after the error so that COMMIT is sent.
    let (out, err, _) = psql_script(s, &[], &txn("g101", 101));
    assert!(err.contains("ERROR:  54000"), "{err}");
    assert!(err.contains("at most 100"), "{err}");
    assert_eq!(err.matches("ERROR:").count(), 1, "one error: {err}");
    assert!(out.trim_end().ends_with("ROLLBACK"), "{out}");
    assert_eq!(
        rows(s, &format!("SELECT count(*) FROM {t} WHERE pk = 'g101'")),
        ["0"]
    );
    // The first transaction is untouched.
    assert_eq!(rows(s, &format!("SELECT count(*) FROM {t}")), ["100"]);

    let (_, err, ok) = psql(s, &[&format!("DROP TABLE {t}")]);
    assert!(ok, "{err}");
}

#[test]
fn azure_attach_existing_table() {
    let conn = azurite();
    let t = unique("ext");
    let entity = |pk: &str, rk: &str, name: &str, age: Value| {
        Operation::Insert(
            EntityWrite::new(pk, rk)
                .with("Name", Value::String(name.to_owned()))
                .with("Age", age),
        )
    };
    // Made behind tablegate's back (no server starts meanwhile).
    let store = {
        let _start = starts();
        runtime().block_on(async {
            let store = AzureStore::connect(&conn, None).await.unwrap();
            store.create_table(&t).await.unwrap();
            store
                .execute(
                    &t,
                    vec![
                        entity("team", "a", "Ann", Value::Int32(30)),
                        entity("team", "b", "Bob", Value::Int32(41)),
                        entity("team", "c", "Cy", Value::String("forty".into())),
                    ]
                    .into(),
                )
                .await
                .unwrap();
            store
                .execute(
                    &t,
                    vec![entity("other", "d", "Di", Value::Int32(25))].into(),
                )
                .await
                .unwrap();
            store
        })
    };

    let a = serve();
    let s = &a.s;
    let _drop = DropTable::new(s, &t);
    let (out, err, ok) = psql(s, &[&format!("\\d {t}")]);
    assert!(ok, "{err}");
    let col = |name: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no column {name}: {out}"))
            .to_owned()
    };
    assert!(col("partition_key").contains("| text"), "{out}");
    assert!(col("row_key").contains("| text"), "{out}");
    assert!(col("Age").contains("| integer"), "{out}");
    assert!(col("Name").contains("| text"), "{out}");

    // The entity whose Age is a string reads it as NULL.
    let sql = format!("SELECT partition_key, row_key, \"Name\", \"Age\" FROM {t}");
    assert_eq!(
        rows(s, &sql),
        [
            "other|d|Di|25",
            "team|a|Ann|30",
            "team|b|Bob|41",
            "team|c|Cy|"
        ]
    );
    assert_eq!(
        rows(
            s,
            &format!(
                "SELECT row_key, \"Age\" FROM {t} WHERE partition_key = 'team' AND row_key = 'c'"
            )
        ),
        ["c|"]
    );
    let p = plan(s, "EXPLAIN ANALYZE", &sql);
    assert!(
        line(&p, "Class: ").starts_with("Class: full-scan ("),
        "{p:?}"
    );
    assert_eq!(returned(&p), 4);
    assert_eq!(
        line(&p, "Actual: 1 property values"),
        "Actual: 1 property values read as NULL (stored with another type than the column's)"
    );
    // Typed comparisons: the service compares Int32 with Int32 only.
    assert_eq!(
        rows(
            s,
            &format!("SELECT row_key FROM {t} WHERE partition_key = 'team' AND \"Age\" > 26")
        ),
        ["a", "b"]
    );
    // The attached table takes writes like any other.
    let (_, err, ok) = psql(
        s,
        &[&format!(
            "INSERT INTO {t} (partition_key, row_key, \"Name\", \"Age\") VALUES ('team', 'e', 'Eve', 52)"
        )],
    );
    assert!(ok, "{err}");
    let e = runtime().block_on(async { store.get(&t, "team", "e").await.unwrap().unwrap() });
    assert_eq!(e.properties.get("Age"), Some(&Value::Int32(52)), "{e:?}");

    // What reads as NULL is NULL to every predicate and aggregate, as to
    // SELECT (IS NULL is finished locally: it has no OData form).
    let is_null =
        format!("SELECT row_key FROM {t} WHERE partition_key = 'team' AND \"Age\" IS NULL");
    let got = (
        rows(s, &is_null),
        rows(
            s,
            &format!("SELECT row_key FROM {t} WHERE \"Age\" IS NOT NULL"),
        ),
        rows(s, &format!("SELECT count(*), count(\"Age\") FROM {t}")),
    );
    assert!(
        got.0 == ["c"] && got.1 == ["d", "a", "b", "e"] && got.2 == ["5|4"],
        "IS NULL, IS NOT NULL, count: {got:?}\n{}",
        plan(s, "EXPLAIN ANALYZE", &is_null).join("\n")
    );

    let (_, err, ok) = psql(s, &[&format!("DROP TABLE {t}")]);
    assert!(ok, "{err}");
}

/// `tablegate serve --backend azure` with `AZURE_STORAGE_CONNECTION_STRING`;
/// returns (stderr, exit status success), failing if it starts serving.
fn serve_must_fail(conn: &str) -> (String, bool) {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tablegate"))
        .args([
            "serve",
            "--backend",
            "azure",
            "--listen",
            "127.0.0.1:0",
            "--data",
        ])
        .arg(dir.path())
        .env("AZURE_STORAGE_CONNECTION_STRING", conn)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tablegate");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "tablegate kept running with {conn:?}: {}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("listening"), "{stdout}");
    (
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

#[test]
fn azure_bad_connection_strings_stop_the_server() {
    let endpoint = table_endpoint(&azurite());
    // Not base64.
    let (err, ok) = serve_must_fail(&format!(
        "AccountName=devstoreaccount1;AccountKey=not base64!;TableEndpoint={endpoint}"
    ));
    assert!(!ok && err.contains("AccountKey is not base64"), "{err}");
    // Nobody listening.
    let (err, ok) = serve_must_fail(
        "AccountName=devstoreaccount1;AccountKey=a2V5;TableEndpoint=http://127.0.0.1:1/devstoreaccount1",
    );
    assert!(
        !ok && err.contains("cannot reach the Azure Table service") && err.contains("127.0.0.1:1"),
        "{err}"
    );
    // A valid key, but not the account's: the service refuses the
    // signature, and the message must say so.
    let key =
        "dGhpcyBpcyBub3QgdGhlIGtleSBvZiBkZXZzdG9yZWFjY291bnQxIGF0IGFsbCwgbm90IGF0IGFsbCEhISE=";
    let (err, ok) = serve_must_fail(&format!(
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={key};TableEndpoint={endpoint}"
    ));
    assert!(!ok, "{err}");
    assert!(
        err.contains("cannot reach the Azure Table service"),
        "{err}"
    );
    assert!(
        err.contains("AuthorizationFailure")
            || err.contains("AuthenticationFailed")
            || err.contains("authenticate"),
        "the message names neither the error code nor the reason: {err}"
    );
}

/// Optimistic concurrency through SQL on the Table service: the service's
/// ETags (`W/"datetime'…%3A…'"`, 100 ns ticks) match as text in SELECT,
/// IN lists, UPDATE and DELETE; the ETag that was read wins once, a stale
/// one matches nothing, and so does a malformed one.
#[test]
fn azure_etags_guard_updates_through_sql() {
    let (a, t, _drop) = serve_with_table("etag", "pk text, rk text, v int, PRIMARY KEY (pk, rk)");
    let s = &a.s;
    let (_, err, ok) = psql(
        s,
        &[&format!(
            "INSERT INTO {t} VALUES ('a', 'r1', 1), ('a', 'r2', 1)"
        )],
    );
    assert!(ok, "{err}");
    // Azurite's ETags carry milliseconds: two entities written in the same
    // one share theirs. Rewrite r2 until they differ.
    let distinct = || {
        let mut e = rows(s, &format!("SELECT etag FROM {t} WHERE pk = 'a'"));
        e.dedup();
        e.len()
    };
    for _ in 0..50 {
        if distinct() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
        let (_, err, ok) = psql(
            s,
            &[&format!(
                "UPDATE {t} SET v = 1 WHERE pk = 'a' AND rk = 'r2'"
            )],
        );
        assert!(ok, "{err}");
    }
    assert_eq!(distinct(), 2);
    let etag = rows(
        s,
        &format!("SELECT etag FROM {t} WHERE pk = 'a' AND rk = 'r1'"),
    )
    .pop()
    .unwrap();
    assert!(
        etag.starts_with("W/\"datetime'") && etag.contains("%3A"),
        "{etag}"
    );
    let lit = etag.replace('\'', "''");
    assert_eq!(
        rows(
            s,
            &format!("SELECT rk FROM {t} WHERE pk = 'a' AND etag = '{lit}'")
        ),
        ["r1"]
    );
    assert_eq!(
        rows(
            s,
            &format!("SELECT rk FROM {t} WHERE pk = 'a' AND etag IN ('{lit}', 'W/\"x\"')")
        ),
        ["r1"]
    );
    assert_eq!(
        rows(
            s,
            &format!("SELECT rk FROM {t} WHERE pk = 'a' AND etag <> '{lit}'")
        ),
        ["r2"]
    );
    let update =
        format!("UPDATE {t} SET v = v + 1 WHERE pk = 'a' AND rk = 'r1' AND etag = '{lit}'");
    let (out, err, ok) = psql(s, &[&update]);
    assert!(ok && out.contains("UPDATE 1"), "{out}{err}");
    // The same ETag is stale now.
    let (out, err, ok) = psql(s, &[&update]);
    assert!(ok && out.contains("UPDATE 0"), "{out}{err}");
    let (out, err, ok) = psql(
        s,
        &[&format!(
            "DELETE FROM {t} WHERE pk = 'a' AND rk = 'r2' AND etag = 'W/\"wrong\"'"
        )],
    );
    assert!(ok && out.contains("DELETE 0"), "{out}{err}");
    assert_eq!(
        rows(s, &format!("SELECT rk, v FROM {t} ORDER BY rk")),
        ["r1|2", "r2|1"]
    );
}

/// A value the service refuses as too large is 54000, as the same value
/// refused by tablegate's own check is. Azurite measures an entity by its
/// request body's UTF-8 bytes: eleven strings of 32,768 `€` are 704 KiB by
/// the service's UTF-16 formula (tablegate's check passes them) and 1.03 MiB
/// of UTF-8, so only the emulator refuses them (EntityTooLarge).
#[test]
fn azure_refuses_oversized_values_with_54000() {
    let columns: Vec<String> = (1..=11).map(|i| format!("s{i} text")).collect();
    let (a, t, _drop) = serve_with_table(
        "big",
        &format!(
            "pk text, rk text, {}, PRIMARY KEY (pk, rk)",
            columns.join(", ")
        ),
    );
    let s = &a.s;
    let euros = ["repeat('€', 32768)"; 11].join(", ");
    for (rk, values) in [("service", euros.as_str()), ("check", "repeat('x', 32769)")] {
        let (_, err, ok) = psql(
            s,
            &[
                "\\set VERBOSITY verbose",
                &format!("INSERT INTO {t} SELECT 'a', '{rk}', {values}"),
            ],
        );
        assert!(!ok && err.contains("54000"), "{rk}: {err}");
    }
    assert_eq!(rows(s, &format!("SELECT count(*) FROM {t}")), ["0"]);
}

/// Key ranges select by code points on the Table service too, though it
/// compares strings by UTF-16 units (where U+FFFD sorts above every
/// supplementary character): the bounds it gets are widened and each page
/// re-checked, so the rows are the embedded engine's.
#[test]
fn azure_key_ranges_select_by_code_point() {
    let (a, t, _drop) = serve_with_table("cps", "pk text, rk text, PRIMARY KEY (pk, rk)");
    let s = &a.s;
    let keys = ["ab", "a\u{FFFD}", "a😀", "a\u{E000}z", "b"];
    let values: Vec<String> = keys
        .iter()
        .flat_map(|k| [format!("('p', '{k}')"), format!("('{k}', 'x')")])
        .collect();
    let (_, err, ok) = psql(
        s,
        &[&format!("INSERT INTO {t} VALUES {}", values.join(", "))],
    );
    assert!(ok, "{err}");
    let cp = |pick: &dyn Fn(&str) -> bool| -> Vec<String> {
        let mut v: Vec<String> = keys
            .iter()
            .filter(|k| pick(k))
            .map(|k| k.to_string())
            .collect();
        v.sort();
        v
    };
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    for (op, bound) in [
        (">", "a\u{FFFD}"),
        (">=", "a\u{E000}"),
        ("<", "a😀"),
        ("<=", "a\u{FFFD}"),
    ] {
        let pick = |k: &str| match op {
            ">" => k > bound,
            ">=" => k >= bound,
            "<" => k < bound,
            _ => k <= bound,
        };
        assert_eq!(
            sorted(rows(
                s,
                &format!("SELECT rk FROM {t} WHERE pk = 'p' AND rk {op} '{bound}'")
            )),
            cp(&pick),
            "rk {op} {bound:?}"
        );
        assert_eq!(
            sorted(rows(
                s,
                &format!("SELECT pk FROM {t} WHERE pk <> 'p' AND pk {op} '{bound}'")
            )),
            cp(&pick),
            "pk {op} {bound:?}"
        );
    }
    assert_eq!(
        sorted(rows(
            s,
            &format!("SELECT rk FROM {t} WHERE pk = 'p' AND rk LIKE 'a\u{FFFD}%'")
        )),
        ["a\u{FFFD}"]
    );

    // ORDER BY the keys gives code-point order, as on the embedded engine
    // (the service returns UTF-16 order: 😀 before U+E000 and U+FFFD), with
    // a LIMIT too, in a partition and across partitions.
    let all = cp(&|_| true);
    assert_eq!(
        rows(
            s,
            &format!("SELECT rk FROM {t} WHERE pk = 'p' ORDER BY pk, rk")
        ),
        all
    );
    assert_eq!(
        rows(
            s,
            &format!("SELECT rk FROM {t} WHERE pk = 'p' ORDER BY rk LIMIT 3")
        ),
        all[..3]
    );
    let pks = rows(
        s,
        &format!("SELECT pk FROM {t} WHERE pk <> 'p' ORDER BY pk"),
    );
    assert_eq!(pks, all);
    assert_eq!(
        rows(
            s,
            &format!("SELECT pk FROM {t} WHERE pk <> 'p' ORDER BY pk LIMIT 2 OFFSET 2")
        ),
        all[2..4]
    );
}

/// `tablegate index verify|repair --azure-connection-string`: drift made
/// behind the gateways' back on the account (a local entry deleted) is
/// found, repaired, and found no more; the repaired entry carries its
/// INCLUDE value again.
#[test]
fn azure_index_verify_finds_and_repairs_drift() {
    let (a, t, _drop) = serve_with_table(
        "ixv",
        "org text, id int, email text, team int, PRIMARY KEY (org, id)",
    );
    let s = &a.s;
    let (_, err, ok) = psql(
        s,
        &[
            &format!("CREATE INDEX {t}_team ON {t} (team) INCLUDE (email)"),
            &format!("CREATE INDEX {t}_email ON {t} (email) GLOBAL"),
            &format!(
                "INSERT INTO {t} VALUES ('o1', 1, 'a@x', 1), ('o1', 2, 'b@x', 2), ('o1', 3, 'c@x', 1)"
            ),
        ],
    );
    assert!(ok, "{err}");
    let cli = |action: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_tablegate"))
            .args(["index", action, &t, "--azure-connection-string"])
            .arg(azurite())
            .output()
            .unwrap();
        (
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            out.status.success(),
        )
    };
    let (out, ok) = cli("verify");
    assert!(ok && out.contains(": 0 missing, 0 stale"), "{out}");
    // The entry of row ('o1', 1) in the local index goes missing.
    runtime().block_on(async {
        let store = AzureStore::connect(&azurite(), None).await.unwrap();
        let q = Query::spans(vec![KeyBox {
            pk: KeyInterval::point("o1"),
            rk: KeyInterval::prefix("\u{10FFFF}0"),
        }]);
        let page = store.query(&t, &q, &PageRequest::default()).await.unwrap();
        let entry = page
            .entities
            .iter()
            .find(|e| e.properties.get("tg_base") == Some(&Value::String("0000000001".into())))
            .unwrap_or_else(|| panic!("no entry of row 1: {:?}", page.entities));
        store
            .execute(
                &t,
                vec![Operation::Delete {
                    partition_key: "o1".into(),
                    row_key: entry.row_key.clone(),
                    if_match: IfMatch::Any,
                }]
                .into(),
            )
            .await
            .unwrap();
    });
    let (out, ok) = cli("verify");
    assert!(!ok && out.contains(": 1 missing, 0 stale"), "{out}");
    let (out, ok) = cli("repair");
    assert!(ok && out.contains("1 repaired"), "{out}");
    let (out, ok) = cli("verify");
    assert!(ok && out.contains(": 0 missing, 0 stale"), "{out}");
    // Read from the entries alone (force: the scan is as cheap here).
    let (out, err, ok) = psql(
        s,
        &[
            "SET tablegate.use_indexes = force",
            &format!("SELECT id, email FROM {t} WHERE org = 'o1' AND team = 1 ORDER BY id"),
        ],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains(" 1 | a@x") && out.contains(" 3 | c@x"),
        "{out}"
    );
    // No statistics to weigh it by: an index that applies is used, and
    // EXPLAIN says so.
    let p = plan(
        s,
        "EXPLAIN",
        &format!("SELECT id, email FROM {t} WHERE org = 'o1' AND team = 1"),
    )
    .join("\n");
    assert!(
        p.contains(&format!("Index Only Lookup: {t}_team"))
            && p.contains("Chosen because: this backend keeps no statistics"),
        "{p}"
    );
}
