//! Faults, end to end, against the real server over its durable engine:
//! a failing disk, with faults injected under the engine
//! (`TABLEGATE_INJECT_FAULTS`) and, when the tests run as root, a real full
//! disk (a small tmpfs); and a process short of file handles. Each checks
//! what the client is told (SQLSTATE, message, hint), what the operator
//! sees (the log line, `tablegate.health`, the metrics) and that every
//! acknowledged write is there after a restart.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use super::product::{free_port, samples, scrape};
use super::server::TestServer;

/// A server with a fault control file, its metrics and its log.
struct Faulty {
    server: TestServer,
    control: PathBuf,
    log: PathBuf,
    metrics: u16,
}

fn start(data: &Path, work: &Path) -> Faulty {
    let control = work.join("faults");
    let log = work.join("server.log");
    let metrics = free_port();
    let addr = format!("127.0.0.1:{metrics}");
    let server = TestServer::serve_logged(
        data,
        &["--throttle", "off", "--metrics-listen", &addr],
        &[("TABLEGATE_INJECT_FAULTS", &control)],
        &log,
    );
    Faulty {
        server,
        control,
        log,
        metrics,
    }
}

/// A client of `s`, and the table `ledger` (pk, rk, v) made through it.
async fn ledger(s: &TestServer) -> Client {
    let c = connect(s).await;
    c.batch_execute("CREATE TABLE ledger (pk text, rk text, v text, PRIMARY KEY (pk, rk))")
        .await
        .unwrap();
    c
}

async fn connect(s: &TestServer) -> Client {
    let (c, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    c
}

/// One statement's INSERT of 100 rows into PartitionKey `p{n}` (one EGT).
fn insert(n: usize, value: &str) -> String {
    let rows: Vec<String> = (0..100)
        .map(|r| format!("('p{n}', 'r{r:03}', '{value}')"))
        .collect();
    format!("INSERT INTO ledger VALUES {}", rows.join(", "))
}

async fn count(c: &Client) -> i64 {
    c.query_one("SELECT count(*) FROM ledger", &[])
        .await
        .unwrap()
        .get(0)
}

/// `tablegate.health`'s one row as (column, text) pairs.
async fn health(c: &Client) -> Vec<(String, Option<String>)> {
    let msgs = c
        .simple_query("SELECT * FROM tablegate.health")
        .await
        .unwrap();
    let row = msgs
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(r),
            _ => None,
        })
        .expect("one row");
    row.columns()
        .iter()
        .enumerate()
        .map(|(i, col)| (col.name().to_owned(), row.get(i).map(str::to_owned)))
        .collect()
}

fn field<'a>(h: &'a [(String, Option<String>)], name: &str) -> Option<&'a str> {
    h.iter()
        .find(|(n, _)| n == name)
        .and_then(|(_, v)| v.as_deref())
}

fn metric(port: u16, series: &str) -> f64 {
    // The store's gauges are published once a second.
    std::thread::sleep(Duration::from_millis(1200));
    let body = scrape(port);
    samples(&body)
        .into_iter()
        .find(|(k, _)| k == series)
        .unwrap_or_else(|| panic!("{series} missing:\n{body}"))
        .1
}

/// The server's log once it contains `line` (waits up to 5 s).
async fn logged(log: &Path, line: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(log).unwrap();
        if text.contains(line) || std::time::Instant::now() > deadline {
            assert!(text.contains(line), "{line:?} not logged:\n{text}");
            return text;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The db error of a failed statement.
fn db_error(e: &tokio_postgres::Error) -> &tokio_postgres::error::DbError {
    e.as_db_error()
        .unwrap_or_else(|| panic!("not a server error: {e}"))
}

async fn writes_stop_then_a_restart_recovers(fault: &str, code: &str, cause: &str, hint: &str) {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let f = start(data.path(), work.path());
    let c = ledger(&f.server).await;
    for n in 0..5 {
        c.batch_execute(&insert(n, "acked")).await.unwrap();
    }
    assert_eq!(
        field(&health(&c).await, "state"),
        Some("ok"),
        "healthy before the fault"
    );
    assert_eq!(
        metric(f.metrics, "tablegate_engine_accepts_writes"),
        1.0,
        "healthy before the fault"
    );

    std::fs::write(&f.control, format!("{fault}\n")).unwrap();
    let e = c.batch_execute(&insert(5, "failed")).await.unwrap_err();
    let db = db_error(&e);
    assert_eq!(db.code().code(), code, "{db:?}");
    assert!(db.message().contains(cause), "{db:?}");
    assert!(
        db.hint()
            .is_some_and(|h| h.contains(hint) && h.contains("restart")),
        "{db:?}"
    );

    // The disk is fine again, but the engine cannot tell which of its
    // writes reached it: writes stay refused, with the first cause.
    std::fs::write(&f.control, "").unwrap();
    let e = c.batch_execute(&insert(6, "refused")).await.unwrap_err();
    let db = db_error(&e);
    assert_eq!(db.code().code(), code, "{db:?}");
    assert!(
        db.message().contains(cause) && db.message().contains("since"),
        "{db:?}"
    );
    // DDL is a write too.
    let e = c
        .batch_execute("CREATE TABLE other (pk text PRIMARY KEY)")
        .await
        .unwrap_err();
    assert_eq!(db_error(&e).code().code(), code, "{e:?}");

    // Reads go on.
    let acked = count(&c).await;
    assert!(
        acked == 500 || (fault.starts_with("fsync") && acked == 600),
        "{acked}"
    );
    let h = health(&c).await;
    assert_eq!(field(&h, "state"), Some("writes stopped"), "{h:?}");
    assert_eq!(field(&h, "accepts_writes"), Some("f"), "{h:?}");
    assert_eq!(
        field(&h, "disk_full"),
        Some(if code == "53100" { "t" } else { "f" }),
        "{h:?}"
    );
    assert!(
        field(&h, "cause").is_some_and(|c| c.contains(cause)),
        "{h:?}"
    );
    assert!(field(&h, "since").is_some(), "{h:?}");
    assert!(
        field(&h, "advice").is_some_and(|a| a.contains("restart")),
        "{h:?}"
    );
    assert_eq!(metric(f.metrics, "tablegate_engine_accepts_writes"), 0.0);
    assert!(metric(f.metrics, "tablegate_engine_errors_total{op=\"write\"}") >= 3.0);
    assert_eq!(
        metric(f.metrics, "tablegate_engine_disk_full"),
        if code == "53100" { 1.0 } else { 0.0 }
    );
    // Logged once, with its cause, however many writes were refused.
    let log = std::fs::read_to_string(&f.log).unwrap();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("the storage engine failed a write"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains(cause) && lines[0].contains("ERROR"),
        "{log}"
    );
    assert!(!log.contains('\u{1b}'), "no colours in a log file: {log}");

    // A restart recovers every acknowledged write and takes writes again.
    drop(c);
    f.server.kill9();
    let f = start(data.path(), work.path());
    let c = connect(&f.server).await;
    let after = count(&c).await;
    assert!(
        after == acked,
        "{after} rows after the restart, {acked} before"
    );
    for n in 0..5 {
        let rows: i64 = c
            .query_one(
                "SELECT count(*) FROM ledger WHERE pk = $1 AND v = 'acked'",
                &[&format!("p{n}")],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(rows, 100, "statement {n} was acknowledged");
    }
    c.batch_execute(&insert(7, "after")).await.unwrap();
    assert_eq!(count(&c).await, after + 100);
    assert_eq!(field(&health(&c).await, "state"), Some("ok"));
}

#[tokio::test]
async fn a_failed_fsync_stops_writes_with_58030_and_loses_nothing() {
    writes_stop_then_a_restart_recovers("fsync eio", "58030", "journal fsync failed", "disk").await;
}

/// COPY applies its entity-group transactions without waiting for each
/// one's fsync, then syncs once per flush: a failed fsync still fails the
/// COPY, and none of its rows is reported as applied.
#[tokio::test]
async fn a_failed_fsync_fails_a_copy() {
    use futures::SinkExt;
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let f = start(data.path(), work.path());
    let c = ledger(&f.server).await;
    let copy = |rows: std::ops::Range<usize>| {
        let c = &c;
        async move {
            let sink = c
                .copy_in("COPY ledger FROM STDIN")
                .await
                .map_err(|e| e.to_string())?;
            let mut sink = std::pin::pin!(sink);
            let text: String = rows
                .map(|i| format!("p{}\t{i:05}\tcopied\n", i / 150))
                .collect();
            sink.send(bytes::Bytes::from(text))
                .await
                .map_err(|e| e.to_string())?;
            sink.finish().await.map_err(|e| {
                let db = db_error(&e);
                format!("{} {} | {:?}", db.code().code(), db.message(), db.detail())
            })
        }
    };
    assert_eq!(copy(0..600).await, Ok(600));
    std::fs::write(&f.control, "fsync eio\n").unwrap();
    let err = copy(600..1200).await.unwrap_err();
    assert!(
        err.starts_with("58030") && err.contains("journal fsync failed"),
        "{err}"
    );
    assert!(
        err.contains("may not be on disk; the 0 row(s) before them are"),
        "{err}"
    );
    std::fs::write(&f.control, "").unwrap();
    assert!(count(&c).await >= 600);
}

#[tokio::test]
async fn a_full_disk_stops_writes_with_53100_and_loses_nothing() {
    writes_stop_then_a_restart_recovers(
        "write enospc",
        "53100",
        "No space left on device",
        "disk is full",
    )
    .await;
}

#[tokio::test]
async fn a_failed_read_is_reported_and_reads_and_writes_go_on() {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let f = start(data.path(), work.path());
    let c = ledger(&f.server).await;
    c.batch_execute(&insert(0, "x")).await.unwrap();
    std::fs::write(&f.control, "read eio\n").unwrap();
    for sql in [
        "SELECT v FROM ledger WHERE pk = 'p0' AND rk = 'r001'",
        "SELECT count(*) FROM ledger WHERE pk = 'p0'",
    ] {
        let e = c.simple_query(sql).await.unwrap_err();
        let db = db_error(&e);
        assert_eq!(db.code().code(), "58030", "{sql}: {db:?}");
        assert!(db.message().contains("read failed"), "{sql}: {db:?}");
    }
    std::fs::write(&f.control, "").unwrap();
    assert_eq!(count(&c).await, 100);
    c.batch_execute(&insert(1, "y")).await.unwrap();
    let h = health(&c).await;
    assert_eq!(
        field(&h, "state"),
        Some("ok"),
        "a read error stops nothing: {h:?}"
    );
    assert!(
        field(&h, "read_errors").is_some_and(|n| n.parse::<u64>().unwrap() >= 2),
        "{h:?}"
    );
    assert!(metric(f.metrics, "tablegate_engine_errors_total{op=\"read\"}") >= 2.0);
}

/// A tmpfs of a given size, unmounted when dropped.
struct SmallDisk {
    dir: tempfile::TempDir,
}

impl SmallDisk {
    /// `None` when this process may not mount (not root).
    fn mount(mib: u32) -> Option<SmallDisk> {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(SmallDisk { dir })
    }

    fn resize(&self, mib: u32) {
        let ok = std::process::Command::new("mount")
            .args(["-o", &format!("remount,size={mib}m")])
            .arg(self.dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "remount");
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

#[tokio::test]
async fn a_real_full_disk_answers_53100_and_a_restart_after_freeing_space_recovers() {
    let Some(disk) = SmallDisk::mount(24) else {
        eprintln!("skipped: mounting a tmpfs needs root (CI runs as root)");
        return;
    };
    let data = disk.dir.path().join("data");
    let work = tempfile::tempdir().unwrap();
    let f = start(&data, work.path());
    let c = ledger(&f.server).await;
    let value = "x".repeat(2000);
    let mut acked = 0;
    let err = loop {
        match c.batch_execute(&insert(acked, &value)).await {
            Ok(()) => acked += 1,
            Err(e) => break e,
        }
        assert!(acked < 2_000, "a 24 MiB disk never filled");
    };
    let db = db_error(&err);
    assert_eq!(db.code().code(), "53100", "{db:?}");
    assert!(db.message().contains("No space left on device"), "{db:?}");
    assert!(acked > 10, "{acked} statements before the disk filled");
    let seen = count(&c).await;
    assert_eq!(
        seen,
        acked as i64 * 100,
        "reads go on, with every acknowledged row"
    );
    let h = health(&c).await;
    assert_eq!(field(&h, "disk_full"), Some("t"), "{h:?}");

    drop(c);
    f.server.kill9();
    disk.resize(96);
    let f = start(&data, work.path());
    let c = connect(&f.server).await;
    let after = count(&c).await;
    // Every acknowledged statement, and never part of one.
    assert!(
        after == seen || after == seen + 100,
        "{after} rows, {seen} acknowledged"
    );
    c.batch_execute(&insert(acked + 1, "after")).await.unwrap();
    assert_eq!(field(&health(&c).await, "state"), Some("ok"));
    drop(c);
    drop(f);
}

#[tokio::test]
async fn short_of_file_handles_the_server_refuses_connections_and_says_so() {
    let data = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let log = work.path().join("server.log");
    let metrics = free_port();
    let metrics_addr = format!("127.0.0.1:{metrics}");
    // Soft limit 100, hard 600: the server raises the soft limit to 600
    // and keeps 512 descriptors out of the connections' budget, which
    // leaves (600 - 512) / 6 = 14 connections.
    let s = TestServer::serve_wrapped(
        &["prlimit", "--nofile=100:600", "--"],
        data.path(),
        &["--throttle", "off", "--metrics-listen", &metrics_addr],
        &[],
        &log,
    );
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", s.child.id())).unwrap();
    let files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    assert_eq!(
        files.split_whitespace().nth(3),
        Some("600"),
        "soft limit raised to the hard one: {files}"
    );
    // Logged as the server starts serving, just after its banner.
    logged(
        &log,
        "the open-file limit (600) leaves room for 14 connections",
    )
    .await;

    let mut held = Vec::new();
    let mut refused = None;
    for _ in 0..40 {
        match tokio_postgres::connect(&s.conn_str(), NoTls).await {
            Ok((c, conn)) => {
                tokio::spawn(conn);
                held.push(c);
            }
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
    }
    assert_eq!(held.len(), 14, "connections within the budget");
    let e = refused.expect("the 15th connection is refused");
    let db = db_error(&e);
    assert_eq!(db.code().code(), "53300", "{db:?}");
    assert!(db.message().contains("file handles"), "{db:?}");
    // The operator sees it: one warning naming the limit, and a counter.
    let refused_log = "refusing new connections (FATAL 53300): the open-file limit is reached";
    let text = logged(&log, refused_log).await;
    assert_eq!(text.matches(refused_log).count(), 1, "{text}");
    assert_eq!(
        metric(
            metrics,
            "tablegate_connections_refused_total{reason=\"file_handles\"}"
        ),
        1.0
    );
    // The ones admitted work, and once some leave, others get in.
    held[0].simple_query("SELECT 1").await.unwrap();
    held.truncate(10);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let c = connect(&s).await;
    c.simple_query("SELECT 1").await.unwrap();
}

/// Runs `tablegate serve` on `data` expecting it to refuse to start;
/// returns what it printed on stderr.
fn refuses_to_start(data: &Path) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tablegate"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--unix-socket-dir",
            "",
            "--data",
        ])
        .arg(data)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "started on damaged data: {err}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "a clean refusal, not a crash: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    assert!(
        err.contains("Restore the data directory from a backup"),
        "{err}"
    );
    err
}

/// A data directory with `statements` acknowledged INSERTs of 100 rows
/// each, left as `kill -9` leaves it; returns the journal's path and the
/// end of its data (the zero-fill writes zeros past it).
async fn killed_with_rows(data: &Path, statements: usize) -> (PathBuf, usize) {
    let s = TestServer::serve_in(data, &["--throttle", "off"]);
    let c = ledger(&s).await;
    for n in 0..statements {
        c.batch_execute(&insert(n, "acked")).await.unwrap();
    }
    drop(c);
    s.kill9();
    let journal = data.join("0.jnl");
    let bytes = std::fs::read(&journal).unwrap();
    let end = bytes.iter().rposition(|&b| b != 0).unwrap() + 1;
    (journal, end)
}

#[tokio::test]
async fn a_torn_journal_tail_is_recovered_up_to_the_last_whole_batch() {
    let data = tempfile::tempdir().unwrap();
    let (journal, end) = killed_with_rows(data.path(), 10).await;
    // A crash in the middle of writing the last batch.
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&journal)
        .unwrap();
    f.set_len(end as u64 - 20).unwrap();
    drop(f);
    let s = TestServer::serve_in(data.path(), &["--throttle", "off"]);
    let c = connect(&s).await;
    for n in 0..10 {
        let rows: i64 = c
            .query_one(
                "SELECT count(*) FROM ledger WHERE pk = $1",
                &[&format!("p{n}")],
            )
            .await
            .unwrap()
            .get(0);
        // The torn batch is the last statement's: it is wholly gone, and
        // every statement before it wholly there.
        assert_eq!(rows, if n == 9 { 0 } else { 100 }, "statement {n}");
    }
    c.batch_execute(&insert(10, "after")).await.unwrap();
}

#[tokio::test]
async fn a_damaged_journal_refuses_to_start_naming_the_file() {
    let data = tempfile::tempdir().unwrap();
    let (journal, end) = killed_with_rows(data.path(), 10).await;
    // One flipped byte in the middle of the data: not a torn tail.
    let mut bytes = std::fs::read(&journal).unwrap();
    bytes[end / 2] ^= 0x55;
    std::fs::write(&journal, bytes).unwrap();
    let err = refuses_to_start(data.path());
    assert!(err.contains("journal batch fails its check"), "{err}");
    assert!(
        err.contains(&journal.display().to_string()),
        "names the file: {err}"
    );
}

#[tokio::test]
async fn a_damaged_catalog_entry_refuses_to_start_naming_the_table() {
    let data = tempfile::tempdir().unwrap();
    killed_with_rows(data.path(), 1).await;
    {
        let store = tablegate_store::LocalStore::open(
            data.path(),
            tablegate_store::StoreOptions::default(),
        )
        .unwrap();
        let mut def = tablegate_store::EntityWrite::new("tables", "ledger");
        def.properties.insert(
            "definition".into(),
            Some(tablegate_store::Value::String(
                "{\"name\": \"ledger\", \"colu".into(),
            )),
        );
        store
            .execute_blocking(
                "tgsys_catalog",
                &[tablegate_store::Operation::InsertOrReplace(def)],
            )
            .unwrap();
    }
    let err = refuses_to_start(data.path());
    assert!(err.contains("corrupt catalog entry: ledger"), "{err}");
    assert!(err.contains("table catalog"), "{err}");
}

/// Every file under `dir`, with its size.
fn files(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else {
            out.push((p, e.metadata().unwrap().len()));
        }
    }
    out
}

/// A flipped byte in a table file (the sorted runs the engine flushes its
/// memtables to; the journal no longer covers them once flushed): the
/// server refuses to start, naming the damage and what to do.
#[tokio::test]
async fn a_damaged_table_file_refuses_to_start() {
    let data = tempfile::tempdir().unwrap();
    // Keyspaces keep the memtable size they were created with: small ones
    // flush to table files after 64 KiB, long before the journal rotates.
    drop(
        tablegate_store::LocalStore::open(
            data.path(),
            tablegate_store::StoreOptions {
                memtable_bytes: Some(64 * 1024),
                ..tablegate_store::StoreOptions::default()
            },
        )
        .unwrap(),
    );
    let s = TestServer::serve_in(data.path(), &["--throttle", "off"]);
    let c = ledger(&s).await;
    let wide = "x".repeat(500);
    for n in 0..20 {
        c.batch_execute(&insert(n, &wide)).await.unwrap();
    }
    // Entity table files, once flushes and compactions have settled (a
    // file being written when the process dies is not part of the tree).
    let tables = || -> Vec<(PathBuf, u64)> {
        let mut t: Vec<_> = files(data.path())
            .into_iter()
            .filter(|(p, n)| *n > 0 && p.components().any(|c| c.as_os_str() == "tables"))
            .collect();
        t.sort();
        t
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut last = tables();
    loop {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let now = tables();
        if now == last && now.iter().map(|(_, n)| n).sum::<u64>() > 500_000 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{now:?}");
        last = now;
    }
    drop(c);
    s.kill9();
    let (victim, len) = last.into_iter().max_by_key(|(_, n)| *n).unwrap();
    // A third of the way in: inside a data block (the index and filter
    // blocks are at the end).
    let mut bytes = std::fs::read(&victim).unwrap();
    bytes[(len / 3) as usize] ^= 0x55;
    std::fs::write(&victim, bytes).unwrap();

    // Opening walks every block of the entities keyspace (the packed
    // layout's index, `store/src/engine/packed`), so the damage is found
    // before the first client is served.
    let err = refuses_to_start(data.path());
    assert!(
        err.contains("a block of a table file fails its checksum"),
        "{err}"
    );
    assert!(
        err.contains("Checksum mismatch for block"),
        "the engine's log line: {err}"
    );
}
