//! `tablegate stress`: the seeds' partition stress test.
//!
//! Creates a test table, loads one PartitionKey, then drives that one
//! partition as hard as `--clients` connections can (or at `--rate`) with
//! a read/write mix for `--duration`, and reports what the partition
//! admitted against its 2,000 entities/s target: entities/s, the share of
//! requests throttled (SQLSTATE 53000), latency percentiles of admitted
//! requests, and a verdict.
//!
//! It talks to a server over the wire like any client: a running one with
//! `--connect`, or one it starts in this process on a temporary data
//! directory (with `--partition-target` as the target). Sessions set
//! `tablegate.retry_policy = none`, so the server answers a throttled
//! request with 53000 at once and the client backs off with the seeds'
//! exponential formula: the throttled share is then the share of
//! requests the partition refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::config::Settings;
use crate::serve::Embedded;

/// `tablegate stress` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct StressArgs {
    /// A running server: a connection string ("host=… port=…"), whose
    /// gaps the PG* environment variables fill ('' for the environment
    /// alone); without it, a server is started in this process on a
    /// temporary data directory.
    #[arg(long)]
    pub connect: Option<String>,
    /// Concurrent client connections.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// How long to drive the partition, in seconds.
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Share of requests that are point reads (the rest are upserts).
    #[arg(long, default_value_t = 0.5)]
    pub read_share: f64,
    /// Offered load in requests/s over all clients (default: as fast as
    /// they can).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Entities loaded into the partition first.
    #[arg(long, default_value_t = 1_000)]
    pub entities: usize,
    /// The per-PartitionKey target of the in-process server, entities/s
    /// (ignored with --connect: the running server has its own).
    #[arg(long, default_value_t = 2_000)]
    pub partition_target: u64,
    /// The target the report compares with, entities/s [default: the
    /// partition target].
    #[arg(long)]
    pub target: Option<u64>,
    /// Write a throughput-over-time chart (SVG) here.
    #[arg(long)]
    pub chart: Option<std::path::PathBuf>,
    /// Keep the test table afterwards.
    #[arg(long)]
    pub keep: bool,
}

/// The PartitionKey driven.
const HOT: &str = "hot";

/// What the clients measured.
#[derive(Debug, Default)]
struct Tally {
    /// Latencies of admitted requests, in microseconds.
    latencies: Vec<u32>,
    /// Admitted and throttled requests per whole second since the start.
    per_second: Vec<(u64, u64)>,
    admitted: u64,
    throttled: u64,
    /// Errors that are not throttling (fail the run).
    errors: Vec<String>,
}

impl Tally {
    fn second(&mut self, at: Duration) -> &mut (u64, u64) {
        let s = at.as_secs() as usize;
        if self.per_second.len() <= s {
            self.per_second.resize(s + 1, (0, 0));
        }
        &mut self.per_second[s]
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The seeds' backoff: `Rand(0.8z, 1.2z)·(2^x − 1)` plus `zmin`, at most
/// `zmax`, with z = 10 ms, zmin = 2 ms, zmax = 200 ms (a stress client
/// wants to come back quickly).
fn backoff(attempt: u32, jitter: f64) -> Duration {
    let z = 0.010 * (0.8 + 0.4 * jitter);
    let y = 0.002 + z * (2f64.powi(attempt.min(20) as i32) - 1.0);
    Duration::from_secs_f64(y.min(0.2))
}

async fn connect(conn: &tokio_postgres::Config) -> Result<tokio_postgres::Client, String> {
    crate::pgenv::connect(conn).await
}

fn is_throttled(e: &tokio_postgres::Error) -> bool {
    e.code() == Some(&tokio_postgres::error::SqlState::from_code("53000"))
}

fn db_err(e: tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{}: {}", d.code().code(), d.message()),
        None => e.to_string(),
    }
}

/// Runs the stress test and prints the report.
pub async fn run(args: StressArgs) -> Result<(), String> {
    if !(0.0..=1.0).contains(&args.read_share) {
        return Err("--read-share must be from 0 to 1".into());
    }
    if args.clients == 0 || args.duration <= 0.0 {
        return Err("--clients and --duration must be positive".into());
    }
    let mut _data = None;
    let mut embedded = None;
    let conn = match &args.connect {
        Some(c) => crate::pgenv::client_config(c)?,
        None => {
            let dir = tempfile::tempdir().map_err(err)?;
            let mut settings = Settings {
                data: dir.path().to_owned(),
                ..Default::default()
            };
            settings.throttle.per_partition = args.partition_target;
            let server = Embedded::start(settings).await?;
            let c = server.config();
            eprintln!(
                "started a server in this process on {} (PartitionKey target {}/s)",
                server.addr, args.partition_target
            );
            _data = Some(dir);
            embedded = Some(server);
            c
        }
    };
    let target = args.target.unwrap_or(args.partition_target);
    let result = drive(&args, &conn, target).await;
    if let Some(server) = embedded {
        server.stop().await?;
    }
    result
}

async fn drive(
    args: &StressArgs,
    conn: &tokio_postgres::Config,
    target: u64,
) -> Result<(), String> {
    let setup = connect(conn).await?;
    let table = format!(
        "stress_{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    setup
        .batch_execute(&format!(
            "CREATE TABLE {table} (pk TEXT, rk TEXT, n INTEGER, payload TEXT, PRIMARY KEY (pk, rk))"
        ))
        .await
        .map_err(db_err)?;

    // Load: 100-row INSERTs, one entity-group transaction each, retried
    // by the server's own policy (loading is not what is measured).
    let bar = indicatif::ProgressBar::new(args.entities as u64).with_style(
        indicatif::ProgressStyle::with_template(
            "loading  {bar:40} {pos}/{len} entities ({per_sec})",
        )
        .map_err(err)?,
    );
    let payload = "x".repeat(100);
    let mut i = 0;
    while i < args.entities {
        let end = (i + 100).min(args.entities);
        let values: Vec<String> = (i..end)
            .map(|k| format!("('{HOT}', 'r{k:07}', {k}, '{payload}')"))
            .collect();
        let sql = format!("INSERT INTO {table} VALUES {}", values.join(", "));
        loop {
            match setup.batch_execute(&sql).await {
                Ok(()) => break,
                Err(e) if is_throttled(&e) => tokio::time::sleep(Duration::from_millis(50)).await,
                Err(e) => return Err(db_err(e)),
            }
        }
        bar.set_position(end as u64);
        i = end;
    }
    bar.finish_and_clear();
    eprintln!(
        "loaded {} entities into PartitionKey '{HOT}'",
        args.entities
    );
    // Let the bucket refill after the load, so the run starts fair.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let tally = Arc::new(Mutex::new(Tally::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let duration = Duration::from_secs_f64(args.duration);
    let start = Instant::now();
    let per_client_interval = args
        .rate
        .filter(|r| *r > 0.0)
        .map(|r| Duration::from_secs_f64(args.clients as f64 / r));
    let mut tasks = Vec::new();
    for c in 0..args.clients {
        let client = connect(conn).await?;
        client
            .batch_execute("SET tablegate.retry_policy = none")
            .await
            .map_err(db_err)?;
        let read = client
            .prepare(&format!("SELECT n FROM {table} WHERE pk = $1 AND rk = $2"))
            .await
            .map_err(db_err)?;
        // Setting every supplied column makes the upsert a blind
        // InsertOrReplace: one entity of cost, no read first.
        let write = client
            .prepare(&format!(
                "INSERT INTO {table} (pk, rk, n, payload) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (pk, rk) DO UPDATE SET n = EXCLUDED.n, payload = EXCLUDED.payload"
            ))
            .await
            .map_err(db_err)?;
        let tally = tally.clone();
        let stop = stop.clone();
        let (entities, read_share, payload) =
            (args.entities.max(1), args.read_share, payload.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng =
                fastrand::Rng::with_seed(0x9E37_79B9_7F4A_7C15 ^ ((c as u64 + 1) * 0x1000_0001));
            let mut next_at = Instant::now();
            let mut attempt = 0u32;
            let mut op: Option<(bool, String, i32)> = None;
            while !stop.load(Ordering::Relaxed) {
                if let Some(every) = per_client_interval {
                    tokio::time::sleep_until(next_at.into()).await;
                    next_at += every;
                }
                let (is_read, rk, n) = op.get_or_insert_with(|| {
                    let k = rng.usize(..entities);
                    (rng.f64() < read_share, format!("r{k:07}"), rng.i32(..))
                });
                let began = Instant::now();
                let result = if *is_read {
                    client.query_opt(&read, &[&HOT, &*rk]).await.map(|_| ())
                } else {
                    client
                        .execute(&write, &[&HOT, &*rk, &*n, &payload])
                        .await
                        .map(|_| ())
                };
                let at = start.elapsed();
                if at > duration {
                    break;
                }
                match result {
                    Ok(()) => {
                        let mut t = tally.lock();
                        t.admitted += 1;
                        t.second(at).0 += 1;
                        t.latencies
                            .push(began.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        drop(t);
                        op = None;
                        attempt = 0;
                    }
                    Err(e) if is_throttled(&e) => {
                        {
                            let mut t = tally.lock();
                            t.throttled += 1;
                            t.second(at).1 += 1;
                        }
                        attempt += 1;
                        tokio::time::sleep(backoff(attempt, rng.f64())).await;
                    }
                    Err(e) => {
                        tally.lock().errors.push(db_err(e));
                        break;
                    }
                }
            }
        }));
    }

    let bar = indicatif::ProgressBar::new(duration.as_millis() as u64).with_style(
        indicatif::ProgressStyle::with_template("driving  {bar:40} {elapsed}/{duration} {msg}")
            .map_err(err)?,
    );
    while start.elapsed() < duration {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (admitted, throttled) = {
            let t = tally.lock();
            (t.admitted, t.throttled)
        };
        let secs = start.elapsed().as_secs_f64().max(0.001);
        bar.set_position(start.elapsed().as_millis().min(duration.as_millis()) as u64);
        bar.set_message(format!(
            "{:.0} entities/s admitted, {:.0}% throttled",
            admitted as f64 / secs,
            100.0 * throttled as f64 / (admitted + throttled).max(1) as f64
        ));
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    bar.finish_and_clear();

    let mut tally = std::mem::take(&mut *tally.lock());
    if !args.keep {
        let _ = setup.batch_execute(&format!("DROP TABLE {table}")).await;
    }
    if let Some(e) = tally.errors.first() {
        return Err(format!("a client failed: {e}"));
    }
    let report = Report::new(args.clients, args.read_share, target, duration, &mut tally);
    print!("{}", report.text());
    if let Some(path) = &args.chart {
        chart(path, &tally.per_second, target, &report)?;
        println!("chart: {}", path.display());
    }
    Ok(())
}

/// The numbers the report prints.
#[derive(Debug)]
struct Report {
    clients: usize,
    read_share: f64,
    seconds: f64,
    target: u64,
    admitted: u64,
    throttled: u64,
    p50: f64,
    p95: f64,
    p99: f64,
    max: f64,
}

impl Report {
    fn new(
        clients: usize,
        read_share: f64,
        target: u64,
        duration: Duration,
        t: &mut Tally,
    ) -> Report {
        t.latencies.sort_unstable();
        let pct = |p: f64| {
            if t.latencies.is_empty() {
                return 0.0;
            }
            let i = ((t.latencies.len() as f64 * p).ceil() as usize).clamp(1, t.latencies.len());
            f64::from(t.latencies[i - 1]) / 1e3
        };
        Report {
            clients,
            read_share,
            seconds: duration.as_secs_f64(),
            target,
            admitted: t.admitted,
            throttled: t.throttled,
            p50: pct(0.50),
            p95: pct(0.95),
            p99: pct(0.99),
            max: pct(1.0),
        }
    }

    fn rate(&self) -> f64 {
        self.admitted as f64 / self.seconds
    }

    fn throttled_share(&self) -> f64 {
        self.throttled as f64 / (self.admitted + self.throttled).max(1) as f64
    }

    fn text(&self) -> String {
        let rate = self.rate();
        let share = self.throttled_share();
        let verdict = if share > 0.05 || rate >= 0.9 * self.target as f64 {
            format!(
                "the partition is too hot: it ran at its target ({rate:.0} of {} entities/s) and refused {:.0}% of requests. \
                 Spread this load over more PartitionKeys, or batch writes into entity-group transactions.",
                self.target,
                share * 100.0
            )
        } else {
            format!(
                "fine: {rate:.0} entities/s is {:.0}% of the {} entities/s target, with {:.1}% of requests throttled.",
                100.0 * rate / self.target as f64,
                self.target,
                share * 100.0
            )
        };
        format!(
            "stress test: one PartitionKey, {} clients, {:.0}% reads / {:.0}% upserts, {:.1} s\n\
             admitted:   {} entities in {:.1} s = {rate:.0} entities/s (target {}/s: {:.1}%)\n\
             throttled:  {} of {} requests ({:.1}%) answered 53000 and were retried after backing off\n\
             latency:    p50 {:.2} ms, p95 {:.2} ms, p99 {:.2} ms, max {:.2} ms (admitted requests)\n\
             verdict:    {verdict}\n",
            self.clients,
            self.read_share * 100.0,
            (1.0 - self.read_share) * 100.0,
            self.seconds,
            self.admitted,
            self.seconds,
            self.target,
            100.0 * rate / self.target as f64,
            self.throttled,
            self.admitted + self.throttled,
            share * 100.0,
            self.p50,
            self.p95,
            self.p99,
            self.max,
        )
    }
}

/// Admitted and throttled requests per second, with the target line.
fn chart(
    path: &std::path::Path,
    per_second: &[(u64, u64)],
    target: u64,
    report: &Report,
) -> Result<(), String> {
    use plotters::prelude::*;
    let seconds = per_second.len().max(1);
    let top = per_second
        .iter()
        .map(|(a, t)| (*a).max(*t))
        .max()
        .unwrap_or(0)
        .max(target) as f64
        * 1.2;
    let root = SVGBackend::new(path, (900, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!(
                "One PartitionKey: {:.0} entities/s admitted, {:.0}% throttled",
                report.rate(),
                report.throttled_share() * 100.0
            ),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..seconds as f64, 0f64..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("seconds")
        .y_desc("requests per second")
        .draw()
        .map_err(err)?;
    let points = |pick: fn(&(u64, u64)) -> u64| -> Vec<(f64, f64)> {
        per_second
            .iter()
            .enumerate()
            .map(|(s, v)| (s as f64 + 0.5, pick(v) as f64))
            .collect()
    };
    chart
        .draw_series(LineSeries::new(points(|v| v.0), BLUE.stroke_width(2)))
        .map_err(err)?
        .label("admitted entities/s")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLUE));
    chart
        .draw_series(LineSeries::new(points(|v| v.1), RED.stroke_width(2)))
        .map_err(err)?
        .label("throttled requests/s (53000)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], RED));
    chart
        .draw_series(LineSeries::new(
            vec![(0.0, target as f64), (seconds as f64, target as f64)],
            BLACK.stroke_width(1),
        ))
        .map_err(err)?
        .label(format!("target {target} entities/s"))
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        assert!(backoff(1, 0.5) < backoff(2, 0.5));
        assert!(backoff(3, 0.0) < backoff(4, 0.0));
        assert_eq!(backoff(30, 1.0), Duration::from_millis(200));
        // x = 1, z = 10 ms: 2 ms + 10 ms · (2¹ − 1).
        assert_eq!(backoff(1, 0.5), Duration::from_millis(12));
    }

    #[test]
    fn percentiles_and_verdicts() {
        let mut t = Tally {
            latencies: (1..=100).map(|ms| ms * 1000).collect(),
            admitted: 20_000,
            throttled: 5_000,
            ..Default::default()
        };
        let r = Report::new(2, 0.5, 2000, Duration::from_secs(10), &mut t);
        assert_eq!((r.p50, r.p95, r.p99, r.max), (50.0, 95.0, 99.0, 100.0));
        assert!(
            r.text().contains("2000 entities/s (target 2000/s: 100.0%)"),
            "{}",
            r.text()
        );
        assert!(r.text().contains("too hot"));
        let mut t = Tally {
            latencies: vec![1000],
            admitted: 5_000,
            throttled: 0,
            ..Default::default()
        };
        let r = Report::new(2, 0.5, 2000, Duration::from_secs(10), &mut t);
        assert!(r.text().contains("verdict:    fine"), "{}", r.text());
    }

    #[test]
    fn chart_is_svg_with_the_target_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.svg");
        let mut t = Tally {
            latencies: vec![1],
            per_second: vec![(2100, 50), (2000, 80), (1990, 60)],
            admitted: 6090,
            throttled: 190,
            errors: vec![],
        };
        let r = Report::new(1, 0.5, 2000, Duration::from_secs(3), &mut t);
        chart(&path, &t.per_second, 2000, &r).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("target 2000 entities/s"));
    }
}
