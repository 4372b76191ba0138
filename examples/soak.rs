//! Soak: many clients mixing everything a real workload does against one
//! `tablegate serve`, for minutes, then the checks a production server
//! must pass. Not a timed test: a script with a report.
//!
//! Clients mix point reads, row ranges, scans, analytics joins, writes in
//! autocommit and in entity-group transactions, cursors read halfway and
//! abandoned, streams dropped mid-way (the client hangs up), cancels,
//! statement timeouts and re-prepared statements, and reconnect all the
//! time. At the end it checks:
//!
//! - no errors but the intended ones (53000 throttling, 57014 cancel and
//!   timeout, 40001 conflicts);
//! - every acknowledged write is there (a ledger of them);
//! - the server's RSS is flat after warm-up, and its threads and open files
//!   are back to their idle counts once the clients are gone;
//! - p99 latency per class, printed.
//!
//! It writes `soak.md` and `soak.svg` (RSS, threads, files over time) to
//! `--out`, and exits non-zero if a check fails.
//!
//! ```sh
//! cargo build && cargo run --example soak -- --duration 600 --clients 200
//! ```
//!
//! `.ci/run` runs a one-minute version with 50 clients.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use futures::StreamExt;
use parking_lot::Mutex;
use tokio_postgres::{Client, NoTls};

#[derive(Debug, Parser)]
struct Args {
    /// Seconds the clients run.
    #[arg(long, default_value_t = 600)]
    duration: u64,
    /// Concurrent clients.
    #[arg(long, default_value_t = 200)]
    clients: usize,
    /// Where the report and chart go.
    #[arg(long, default_value = "target/soak")]
    out: PathBuf,
    /// Seed of the clients' choices.
    #[arg(long, default_value_t = 20261127)]
    seed: u64,
    /// Leave out what runs in the analytics engine (scans, joins, cancels
    /// and timeouts of joins): to tell its memory from the native path's.
    #[arg(long)]
    native_only: bool,
    /// Report RSS growth without failing on it (to look at other checks
    /// while hunting a leak).
    #[arg(long)]
    allow_rss_growth: bool,
}

/// Partitions preloaded, 100 rows each.
const PARTITIONS: usize = 100;

/// SQLSTATEs the workload provokes on purpose.
const INTENDED: [&str; 3] = ["53000", "57014", "40001"];

#[derive(Default)]
struct Tally {
    latencies: BTreeMap<&'static str, Vec<Duration>>,
    intended: BTreeMap<String, u64>,
    unexpected: BTreeMap<String, (u64, String)>,
    /// Acknowledged writes: (PartitionKey, RowKey).
    ledger: Vec<(String, String)>,
}

impl Tally {
    fn ok(&mut self, class: &'static str, took: Duration) {
        self.latencies.entry(class).or_default().push(took);
    }

    fn error(&mut self, class: &'static str, e: &tokio_postgres::Error) {
        match e.code().map(|c| c.code().to_owned()) {
            Some(code) if INTENDED.contains(&code.as_str()) => {
                *self.intended.entry(code).or_default() += 1;
            }
            code => {
                let key = format!("{class}: {}", code.unwrap_or_else(|| "no SQLSTATE".into()));
                let entry = self
                    .unexpected
                    .entry(key)
                    .or_insert_with(|| (0, e.to_string()));
                entry.0 += 1;
            }
        }
    }
}

#[derive(Clone, Copy)]
struct Sample {
    at: f64,
    rss_mib: f64,
    threads: u64,
    files: u64,
}

fn sample(pid: u32, start: Instant) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let files = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some(Sample {
        at: start.elapsed().as_secs_f64(),
        rss_mib: field("VmRSS:")? as f64 / 1024.0,
        threads: field("Threads:")?,
        files,
    })
}

async fn connect(
    port: u16,
) -> Result<(Client, tokio::task::JoinHandle<()>), tokio_postgres::Error> {
    let conf = format!("host=127.0.0.1 port={port} user=tablegate dbname=tablegate");
    let (client, conn) = tokio_postgres::connect(&conf, NoTls).await?;
    let task = tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok((client, task))
}

/// A value of `n` no other row has, so the joins on `n` stay one-to-one.
fn unique_n(client: usize, seq: u64) -> i32 {
    1_000_000 + (client as i32) * 100_000 + (seq % 100_000) as i32
}

/// One client until `stop`.
async fn client(
    id: usize,
    port: u16,
    seed: u64,
    native_only: bool,
    stop: Arc<AtomicBool>,
    tally: Arc<Mutex<Tally>>,
) {
    let mut rng = fastrand::Rng::with_seed(seed ^ (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mine = format!("c{id:04}");
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let (c, task) = match connect(port).await {
            Ok(x) => x,
            Err(e) => {
                tally.lock().error("connect", &e);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let mut point = c
            .prepare("SELECT n, v FROM soak WHERE pk = $1 AND rk = $2")
            .await
            .ok();
        // A connection lives for a few to a few dozen statements.
        for _ in 0..rng.usize(3..40) {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let pk = format!("p{:03}", rng.usize(..PARTITIONS));
            let rk = format!("r{:03}", rng.usize(..100));
            let started = Instant::now();
            let mut roll = rng.u32(..100);
            if native_only && matches!(roll, 45..53 | 86..92) {
                roll = 0;
            }
            let (class, result): (&'static str, Result<(), tokio_postgres::Error>) = match roll {
                0..30 => {
                    if rng.u32(..10) == 0 {
                        // Re-prepared, as pools and ORMs do.
                        point = c
                            .prepare("SELECT n, v FROM soak WHERE pk = $1 AND rk = $2")
                            .await
                            .ok();
                    }
                    let r = match &point {
                        Some(p) => c.query(p, &[&pk, &rk]).await.map(drop),
                        None => c
                            .query("SELECT n, v FROM soak WHERE pk = $1 AND rk = $2", &[&pk, &rk])
                            .await
                            .map(drop),
                    };
                    ("point", r)
                }
                30..45 => (
                    "row-range",
                    c.query(
                        "SELECT rk, n FROM soak WHERE pk = $1 AND rk >= 'r020' AND rk < 'r060'",
                        &[&pk],
                    )
                    .await
                    .map(drop),
                ),
                45..50 => (
                    "scan",
                    c.query("SELECT count(*) FROM soak WHERE n % 7 = 3", &[])
                        .await
                        .map(drop),
                ),
                50..53 => (
                    "analytics",
                    c.simple_query(&format!(
                        "SELECT a.pk, count(*), max(b.n) FROM soak a JOIN soak b \
                         ON a.pk = b.pk AND a.rk = b.rk WHERE a.pk IN ('{pk}', 'p000') GROUP BY a.pk"
                    ))
                    .await
                    .map(drop),
                ),
                53..68 => {
                    seq += 1;
                    let rk = format!("w{seq:07}");
                    let r = c
                        .execute(
                            "INSERT INTO soak VALUES ($1, $2, $3, 'written')",
                            &[&mine, &rk, &unique_n(id, seq)],
                        )
                        .await
                        .map(drop);
                    if r.is_ok() {
                        tally.lock().ledger.push((mine.clone(), rk));
                    }
                    ("write", r)
                }
                68..78 => {
                    // An entity-group transaction: three rows of one
                    // PartitionKey, acknowledged at COMMIT.
                    let rks: Vec<String> = (0..3)
                        .map(|_| {
                            seq += 1;
                            format!("t{seq:07}")
                        })
                        .collect();
                    let r = async {
                        c.batch_execute("BEGIN").await?;
                        for rk in &rks {
                            let n = unique_n(id, rk[1..].parse().unwrap_or(0));
                            c.execute(
                                "INSERT INTO soak VALUES ($1, $2, $3, 'egt')",
                                &[&mine, rk, &n],
                            )
                            .await?;
                        }
                        c.batch_execute("COMMIT").await
                    }
                    .await;
                    match &r {
                        Ok(()) => tally
                            .lock()
                            .ledger
                            .extend(rks.into_iter().map(|rk| (mine.clone(), rk))),
                        Err(_) => {
                            let _ = c.batch_execute("ROLLBACK").await;
                        }
                    }
                    ("transaction", r)
                }
                78..83 => {
                    // A cursor read halfway, then abandoned: rolled back, or
                    // the connection simply ends.
                    let r = async {
                        c.batch_execute("BEGIN").await?;
                        c.execute(
                            "DECLARE cur CURSOR FOR SELECT * FROM soak WHERE pk = $1",
                            &[&pk],
                        )
                        .await?;
                        c.batch_execute("FETCH 10 FROM cur").await
                    }
                    .await;
                    let abandon = rng.bool();
                    if !abandon || r.is_err() {
                        let _ = c.batch_execute("ROLLBACK").await;
                    }
                    tally.lock().ok("cursor", started.elapsed());
                    if let Err(e) = &r {
                        tally.lock().error("cursor", e);
                    }
                    if abandon {
                        break;
                    }
                    continue;
                }
                83..86 => {
                    // The client hangs up in the middle of a large answer.
                    let r = async {
                        let rows = c
                            .query_raw("SELECT * FROM soak", std::iter::empty::<&str>())
                            .await?;
                        let mut rows = std::pin::pin!(rows);
                        for _ in 0..10 {
                            if rows.next().await.transpose()?.is_none() {
                                break;
                            }
                        }
                        Ok::<_, tokio_postgres::Error>(())
                    }
                    .await;
                    if let Err(e) = &r {
                        tally.lock().error("hang-up", e);
                    }
                    task.abort();
                    break;
                }
                86..89 => {
                    // A cancel while an analytics query runs.
                    let token = c.cancel_token();
                    let canceller = tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        let _ = token.cancel_query(NoTls).await;
                    });
                    let r = c
                        .simple_query(
                            "SELECT a.n % 10, count(*) FROM soak a JOIN soak b ON a.n = b.n GROUP BY 1",
                        )
                        .await
                        .map(drop);
                    let _ = canceller.await;
                    ("cancel", r)
                }
                89..92 => {
                    let r = async {
                        c.batch_execute("SET statement_timeout = '5ms'").await?;
                        let r = c
                            .simple_query(
                                "SELECT a.n % 10, count(*) FROM soak a JOIN soak b ON a.n = b.n GROUP BY 1",
                            )
                            .await
                            .map(drop);
                        c.batch_execute("RESET statement_timeout").await?;
                        r
                    }
                    .await;
                    ("timeout", r)
                }
                _ => break, // reconnect
            };
            let mut t = tally.lock();
            match &result {
                Ok(()) => t.ok(class, started.elapsed()),
                Err(e) => {
                    t.ok(class, started.elapsed());
                    t.error(class, e);
                }
            }
        }
        drop(c);
        let _ = task.await;
    }
}

fn percentile(v: &mut [Duration], p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort_unstable();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn chart(path: &std::path::Path, samples: &[Sample], clients_end: f64) -> Result<(), String> {
    use plotters::prelude::*;
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let end = samples.last().map_or(1.0, |s| s.at).max(1.0);
    let root = SVGBackend::new(path, (900, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let (top, bottom) = root.split_vertically(320);
    let rss_top = samples.iter().map(|s| s.rss_mib).fold(1.0, f64::max) * 1.2;
    let mut c = ChartBuilder::on(&top)
        .caption("Server RSS during the soak (MiB)", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..end, 0f64..rss_top)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc("seconds")
        .draw()
        .map_err(|e| err(&e))?;
    c.draw_series(LineSeries::new(
        samples.iter().map(|s| (s.at, s.rss_mib)),
        BLUE.stroke_width(2),
    ))
    .map_err(|e| err(&e))?;
    c.draw_series(LineSeries::new(
        vec![(clients_end, 0.0), (clients_end, rss_top)],
        BLACK.stroke_width(1),
    ))
    .map_err(|e| err(&e))?;
    let count_top = samples
        .iter()
        .map(|s| s.threads.max(s.files))
        .max()
        .unwrap_or(1) as f64
        * 1.2;
    let mut c = ChartBuilder::on(&bottom)
        .caption(
            "Threads (red) and open files (green); the line marks the clients' end",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..end, 0f64..count_top)
        .map_err(|e| err(&e))?;
    c.configure_mesh()
        .x_desc("seconds")
        .draw()
        .map_err(|e| err(&e))?;
    c.draw_series(LineSeries::new(
        samples.iter().map(|s| (s.at, s.threads as f64)),
        RED.stroke_width(2),
    ))
    .map_err(|e| err(&e))?;
    c.draw_series(LineSeries::new(
        samples.iter().map(|s| (s.at, s.files as f64)),
        GREEN.stroke_width(2),
    ))
    .map_err(|e| err(&e))?;
    c.draw_series(LineSeries::new(
        vec![(clients_end, 0.0), (clients_end, count_top)],
        BLACK.stroke_width(1),
    ))
    .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// The server: `tablegate serve` beside this example's binary.
struct Server {
    child: std::process::Child,
    port: u16,
    _data: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(max_connections: usize) -> Result<Server, String> {
    use std::io::BufRead;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let bin = exe
        .parent()
        .and_then(|examples| examples.parent())
        .map(|d| d.join("tablegate"))
        .ok_or("no target directory")?;
    if !bin.exists() {
        return Err(format!(
            "{} not found: run `cargo build` first",
            bin.display()
        ));
    }
    let data = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut child = std::process::Command::new(&bin)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--unix-socket-dir",
            "",
            "--data",
        ])
        .arg(data.path())
        .args(["--max-connections", &max_connections.to_string()])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .map_err(|e| e.to_string())?;
    let stdout = child.stdout.take().expect("piped");
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut port = None;
    for line in lines.by_ref() {
        let line = line.map_err(|e| e.to_string())?;
        if let Some(addr) = line.strip_prefix("tablegate listening on ") {
            port = addr.rsplit(':').next().and_then(|p| p.parse().ok());
        }
        if line.starts_with("connect with: ") {
            break;
        }
    }
    // Keep reading so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Ok(Server {
        child,
        port: port.ok_or("the server did not start")?,
        _data: data,
    })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    match run(Args::parse()).await {
        Ok(true) => std::process::ExitCode::SUCCESS,
        Ok(false) => std::process::ExitCode::FAILURE,
        Err(e) => {
            eprintln!("soak: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<bool, String> {
    let server = start_server(args.clients + 20)?;
    let pid = server.child.id();
    let port = server.port;
    let err = |e: tokio_postgres::Error| e.to_string();
    let (c, task) = connect(port).await.map_err(err)?;
    c.batch_execute("CREATE TABLE soak (pk text, rk text, n int, v text, PRIMARY KEY (pk, rk))")
        .await
        .map_err(err)?;
    for p in 0..PARTITIONS {
        let rows: Vec<String> = (0..100)
            .map(|r| format!("('p{p:03}', 'r{r:03}', {}, 'preloaded')", p * 100 + r))
            .collect();
        c.batch_execute(&format!("INSERT INTO soak VALUES {}", rows.join(", ")))
            .await
            .map_err(err)?;
    }
    drop(c);
    let _ = task.await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let start = Instant::now();
    let idle = sample(pid, start).ok_or("cannot read the server's /proc entry")?;
    println!(
        "soak: {} clients for {} s against pid {pid} (idle: {:.0} MiB, {} threads, {} files)",
        args.clients, args.duration, idle.rss_mib, idle.threads, idle.files
    );

    let samples = Arc::new(Mutex::new(vec![idle]));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (samples, sampling) = (samples.clone(), sampling.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            while sampling.load(Ordering::Relaxed) {
                tick.tick().await;
                if let Some(s) = sample(pid, start) {
                    samples.lock().push(s);
                }
            }
        })
    };
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let clients: Vec<_> = (0..args.clients)
        .map(|id| {
            tokio::spawn(client(
                id,
                port,
                args.seed,
                args.native_only,
                stop.clone(),
                tally.clone(),
            ))
        })
        .collect();
    let mut last_report = Instant::now();
    while start.elapsed() < Duration::from_secs(args.duration) {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if last_report.elapsed() >= Duration::from_secs(30) {
            last_report = Instant::now();
            let s = samples.lock().last().copied().expect("idle sample");
            let t = tally.lock();
            let done: usize = t.latencies.values().map(Vec::len).sum();
            println!(
                "  {:>4.0} s: {done} statements, {} intended errors, {} unexpected; RSS {:.0} MiB, {} threads, {} files",
                s.at,
                t.intended.values().sum::<u64>(),
                t.unexpected.values().map(|v| v.0).sum::<u64>(),
                s.rss_mib,
                s.threads,
                s.files
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    let clients_end = start.elapsed().as_secs_f64();
    for c in clients {
        // A client still in a statement finishes it; none may hang.
        if tokio::time::timeout(Duration::from_secs(60), c)
            .await
            .is_err()
        {
            return Err("a client did not finish within 60 s of the end".into());
        }
    }
    // Back to idle: connection threads end, their files close.
    let mut settled = None;
    for _ in 0..30 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let s = sample(pid, start).ok_or("the server is gone")?;
        if s.threads <= idle.threads + 2 && s.files <= idle.files + 4 {
            settled = Some(s);
            break;
        }
    }
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.await;
    let after = sample(pid, start).ok_or("the server is gone")?;
    samples.lock().push(after);

    // Every acknowledged write is there.
    let (c, _task) = connect(port).await.map_err(err)?;
    let tally = std::mem::take(&mut *tally.lock());
    let mut by_pk: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (pk, rk) in &tally.ledger {
        by_pk.entry(pk).or_default().push(rk);
    }
    let mut missing = 0usize;
    for (pk, rks) in &by_pk {
        let present: HashSet<String> = c
            .query("SELECT rk FROM soak WHERE pk = $1", &[pk])
            .await
            .map_err(err)?
            .iter()
            .map(|r| r.get(0))
            .collect();
        missing += rks.iter().filter(|rk| !present.contains(**rk)).count();
    }

    // RSS after warm-up: the last quarter of the run against the second.
    let samples = samples.lock().clone();
    let window = |from: f64, to: f64| {
        samples
            .iter()
            .filter(|s| s.at >= from * clients_end && s.at < to * clients_end)
            .map(|s| s.rss_mib)
            .fold(0.0, f64::max)
    };
    let (warm, late) = (window(0.25, 0.5), window(0.75, 1.0));
    let rss_flat = late <= warm * 1.25 + 32.0;

    let mut report = String::new();
    report.push_str(&format!(
        "# Soak: {} clients, {} s\n\n| class | statements | p50 ms | p99 ms |\n| --- | ---: | ---: | ---: |\n",
        args.clients, args.duration
    ));
    let mut latencies = tally.latencies;
    for (class, v) in &mut latencies {
        let n = v.len();
        report.push_str(&format!(
            "| {class} | {n} | {:.2} | {:.2} |\n",
            percentile(v, 0.5).as_secs_f64() * 1e3,
            percentile(v, 0.99).as_secs_f64() * 1e3
        ));
    }
    report.push_str("\n| check | result |\n| --- | --- |\n");
    let intended: Vec<String> = tally
        .intended
        .iter()
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    report.push_str(&format!("| intended errors | {} |\n", intended.join(", ")));
    let unexpected_ok = tally.unexpected.is_empty();
    report.push_str(&format!(
        "| unexpected errors | {} |\n",
        if unexpected_ok {
            "none".to_owned()
        } else {
            tally
                .unexpected
                .iter()
                .map(|(k, (n, first))| format!("{k} ×{n} (first: {first})"))
                .collect::<Vec<_>>()
                .join("; ")
        }
    ));
    report.push_str(&format!(
        "| acknowledged writes present | {} of {} |\n",
        tally.ledger.len() - missing,
        tally.ledger.len()
    ));
    report.push_str(&format!(
        "| RSS | idle {:.0} MiB, max {warm:.0} MiB in the 2nd quarter, {late:.0} MiB in the last: {} |\n",
        idle.rss_mib,
        if rss_flat { "flat" } else { "GROWING" }
    ));
    report.push_str(&format!(
        "| back to idle | threads {} → {}, open files {} → {}: {} |\n",
        idle.threads,
        after.threads,
        idle.files,
        after.files,
        if settled.is_some() { "yes" } else { "NO" }
    ));
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let svg = args.out.join("soak.svg");
    chart(&svg, &samples, clients_end)?;
    report.push_str(&format!("\n![RSS, threads and files]({})\n", svg.display()));
    std::fs::write(args.out.join("soak.md"), &report).map_err(|e| e.to_string())?;
    println!("\n{report}");
    let passed =
        unexpected_ok && missing == 0 && (rss_flat || args.allow_rss_growth) && settled.is_some();
    println!("soak {}", if passed { "passed" } else { "FAILED" });
    drop(server);
    Ok(passed)
}
