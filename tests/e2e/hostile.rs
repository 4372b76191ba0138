//! Hostile clients: each way one client used to take the whole server
//! down or lock others out, followed by the check that matters: a
//! well-behaved session never noticed, and a fresh client still connects
//! at once.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tokio_postgres::{Client, NoTls};

use super::abuse::{msg, startup};
use super::server::TestServer;

const NYC: &str = "2026 New York City Marathon__Full";

async fn connect(s: &TestServer) -> Client {
    connect_to(&s.conn_str()).await
}

async fn connect_to(conn: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(conn, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

/// The server is alive, `client` still answers a point query, and a fresh
/// client connects and answers; returns how long the fresh one took.
async fn still_serving(s: &mut TestServer, client: &Client) -> Duration {
    assert!(s.child.try_wait().unwrap().is_none(), "the server exited");
    let rows = client
        .query("SELECT runner FROM registrations WHERE race = $1", &[&NYC])
        .await
        .unwrap();
    assert!(!rows.is_empty());
    let started = Instant::now();
    let fresh = tokio::time::timeout(Duration::from_secs(10), connect(s))
        .await
        .expect("a fresh client connects");
    fresh
        .query("SELECT runner FROM registrations WHERE race = $1", &[&NYC])
        .await
        .unwrap();
    started.elapsed()
}

fn code(e: &tokio_postgres::Error) -> Option<&str> {
    e.code().map(|c| c.code())
}

/// Peak resident memory of the server, in KiB.
fn peak_rss_kb(s: &TestServer) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

/// CPU seconds the server has used so far.
fn cpu_seconds(s: &TestServer) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", s.child.id())).unwrap();
    // Fields after the command name, which is in parentheses.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f[11].parse::<f64>().unwrap() + f[12].parse::<f64>().unwrap();
    ticks / 100.0
}

/// Statements that each aborted the whole process: parameter numbers
/// without bound and operator chains deeper than a thread's stack, on the
/// native and analytics paths, in simple and extended protocol and in
/// PREPARE.
#[tokio::test]
async fn statements_that_used_to_kill_the_server_get_errors() {
    let mut s = TestServer::demo(&["--throttle", "off"]);
    let bystander = connect(&s).await;
    let c = connect(&s).await;
    for sql in [
        "SELECT name FROM registrations WHERE race = $100000000000",
        "SELECT name FROM registrations WHERE race = $65536",
        "SELECT count(*) FROM registrations WHERE race = $70000 GROUP BY race",
        "PREPARE q AS SELECT name FROM registrations WHERE race = $100000000000",
        "INSERT INTO registrations (race, runner) VALUES ($1, $99999999)",
    ] {
        let err = c.simple_query(sql).await.unwrap_err();
        assert_eq!(code(&err), Some("42P02"), "{sql}: {err:?}");
        let err = c.prepare(sql).await.unwrap_err();
        assert_eq!(code(&err), Some("42P02"), "{sql}: {err:?}");
    }
    let chains = [
        format!("SELECT 1{}", "&1".repeat(300_000)),
        format!("SELECT 'a'{}", "::text".repeat(100_000)),
        format!("SELECT 1{}", " IS NULL".repeat(100_000)),
        format!("SELECT 1{}", "|1".repeat(300_000)),
        format!("SELECT 1{}", "#1".repeat(300_000)),
        format!("SELECT 1{}", "<<1".repeat(300_000)),
        format!(
            "SELECT name FROM registrations WHERE race = 'x'{}",
            " AND age > 1".repeat(60_000)
        ),
        format!("SELECT 1{}", " UNION SELECT 1".repeat(60_000)),
        format!("SELECT NULL::int{}", "[]".repeat(400_000)),
        format!("SELECT {}1{}", "(".repeat(100_000), ")".repeat(100_000)),
        format!("SELECT {}1", "- ".repeat(200_000)),
    ];
    for sql in &chains {
        let err = c.simple_query(sql).await.unwrap_err();
        assert_eq!(code(&err), Some("54001"), "{}: {err:?}", &sql[..30]);
        let err = c.prepare(sql).await.unwrap_err();
        assert_eq!(code(&err), Some("54001"), "{}: {err:?}", &sql[..30]);
    }
    // sqlparser reads a chain of NOTs as a syntax error: an answer too.
    let err = c
        .simple_query(&format!("SELECT {}TRUE", "NOT ".repeat(200_000)))
        .await
        .unwrap_err();
    assert!(code(&err).is_some(), "{err:?}");
    // The session that sent them goes on.
    c.simple_query("SELECT 1").await.unwrap();
    let took = still_serving(&mut s, &bystander).await;
    eprintln!("fresh connection after the statements: {took:?}");
}

/// 300 sockets that never send a startup packet used to hold every slot
/// for as long as they stayed open. Starting connections now have a
/// budget of their own, the oldest is evicted for a newcomer, and session
/// slots are counted after authentication.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_sockets_do_not_lock_clients_out() {
    let mut s = TestServer::demo(&[
        "--throttle",
        "off",
        "--max-connections",
        "20",
        "--max-starting-connections",
        "16",
    ]);
    let bystander = connect(&s).await;
    let idle: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", s.port)).ok())
        .collect();
    assert!(idle.len() > 250, "{} sockets", idle.len());
    // Half-sent startup packets too (a slowloris).
    let mut slow: Vec<TcpStream> = (0..50)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", s.port)).ok())
        .collect();
    for sock in &mut slow {
        let _ = sock.write_all(&startup()[..6]);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let took = still_serving(&mut s, &bystander).await;
    eprintln!("fresh connection beside 350 idle sockets: {took:?}");
    // Every session slot can still be filled by real clients, and the
    // 21st session is refused.
    let mut clients = Vec::new();
    let err = loop {
        match tokio_postgres::connect(&s.conn_str(), NoTls).await {
            Ok((c, conn)) => {
                tokio::spawn(conn);
                clients.push(c);
                assert!(clients.len() < 20, "a 21st session was admitted");
            }
            Err(e) => break e,
        }
    };
    assert_eq!(code(&err), Some("53300"), "{err}");
    assert!(
        clients.len() >= 18,
        "{} sessions beside the bystander",
        clients.len()
    );
    // At the limit, a cancel request is still served.
    let busy = clients.pop().unwrap();
    let token = busy.cancel_token();
    let heavy = tokio::spawn(async move {
        busy.simple_query(
            "SELECT max(a.value + b.value) FROM generate_series(1, 10000) a CROSS JOIN generate_series(1, 1000000000) b",
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let asked = Instant::now();
    token.cancel_query(NoTls).await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), heavy)
        .await
        .expect("the cancel took effect")
        .unwrap()
        .unwrap_err();
    assert_eq!(code(&err), Some("57014"), "{err}");
    eprintln!("cancel at the connection limit took {:?}", asked.elapsed());
    drop(idle);
    drop(slow);
}

/// Length claims of 1 GiB before and after authentication are refused
/// when their header arrives, with FATAL 54000, not buffered.
#[test]
fn oversized_messages_are_refused_before_they_are_buffered() {
    let s = TestServer::demo(&["--throttle", "off", "--max-message-mb", "1"]);
    let exchange = |bytes: &[u8]| -> String {
        let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        c.write_all(bytes).unwrap();
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got);
        String::from_utf8_lossy(&got).into_owned()
    };
    // A startup packet claiming 1 GiB.
    let got = exchange(&(1u32 << 30).to_be_bytes());
    assert!(got.is_empty() || got.contains("54000"), "{got:?}");
    // After authentication: a Query claiming 1 GiB, then one of 2 MiB
    // over the 1 MiB limit; neither body is sent.
    for len in [0x3fff_fff0u32, 2 << 20] {
        let got = exchange(&[startup(), vec![b'Q'], len.to_be_bytes().to_vec()].concat());
        assert!(got.contains("54000"), "{got:?}");
        assert!(got.contains("exceeds the limit"), "{got:?}");
    }
    // Under the limit, a large statement still runs.
    let sql = format!("SELECT '{}' AS big\0", "x".repeat(900_000));
    let got = exchange(&[startup(), msg(b'Q', sql.as_bytes()), msg(b'X', &[])].concat());
    assert!(got.contains("big"), "the 900 KB query ran");
    let mut s = s;
    assert!(s.child.try_wait().unwrap().is_none(), "the server exited");
    assert!(
        peak_rss_kb(&s) < 400 * 1024,
        "peak RSS {} kB",
        peak_rss_kb(&s)
    );
}

/// Under SCRAM every session used to get the same process id, so cancel
/// requests (psql's Ctrl-C, JDBC timeouts) did nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_sessions_can_be_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tablegate"))
        .args(["user", "set", "alice", "--data"])
        .arg(dir.path())
        .env("TABLEGATE_PASSWORD", "pw")
        .output()
        .unwrap();
    assert!(out.status.success());
    let s = TestServer::demo_in(dir, &["--auth", "scram", "--throttle", "off"]);
    let conn = format!(
        "host=127.0.0.1 port={} user=alice password=pw dbname=tablegate",
        s.port
    );
    let a = connect_to(&conn).await;
    let b = connect_to(&conn).await;
    let token = a.cancel_token();
    let heavy = tokio::spawn(async move {
        a.simple_query(
            "SELECT max(a.value + b.value) FROM generate_series(1, 10000) a CROSS JOIN generate_series(1, 1000000000) b",
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    token.cancel_query(NoTls).await.unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), heavy)
        .await
        .expect("the cancel took effect")
        .unwrap()
        .unwrap_err();
    assert_eq!(code(&err), Some("57014"), "{err}");
    // The other session was not touched.
    b.simple_query("SELECT 1").await.unwrap();
}

/// Heavy analytics used to saturate the runtime the listener runs on:
/// new connections and cancels waited for seconds. They now run on a pool
/// of their own with an admission limit; past it, statements wait, then
/// get 53000.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturated_analytics_leave_connections_and_cancels_prompt() {
    let mut s = TestServer::demo(&[
        "--throttle",
        "off",
        "--analytics-concurrency",
        "2",
        "--analytics-queue-wait",
        "2",
    ]);
    let bystander = connect(&s).await;
    let heavy_sql = "SELECT max(a.value + b.value) FROM generate_series(1, 10000) a CROSS JOIN generate_series(1, 1000000000) b";
    let mut tokens = Vec::new();
    let mut running = Vec::new();
    for _ in 0..2 {
        let c = connect(&s).await;
        tokens.push(c.cancel_token());
        running.push(tokio::spawn(async move { c.simple_query(heavy_sql).await }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Both turns are taken: a third waits its queue time, then 53000.
    let queued = connect(&s).await;
    let started = Instant::now();
    let err = queued.simple_query(heavy_sql).await.unwrap_err();
    assert_eq!(code(&err), Some("53000"), "{err}");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // Native queries and new connections do not wait for the engine.
    let took = still_serving(&mut s, &bystander).await;
    eprintln!("fresh connection with both cores on analytics: {took:?}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    // Cancels take effect, and the work stops with them.
    let asked = Instant::now();
    for t in &tokens {
        t.cancel_query(NoTls).await.unwrap();
    }
    for r in running {
        let err = tokio::time::timeout(Duration::from_secs(10), r)
            .await
            .expect("the cancel took effect")
            .unwrap()
            .unwrap_err();
        assert_eq!(code(&err), Some("57014"), "{err}");
    }
    eprintln!("two cancels under saturation took {:?}", asked.elapsed());
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = cpu_seconds(&s);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle_cpu = cpu_seconds(&s) - before;
    assert!(idle_cpu < 0.5, "{idle_cpu} CPU seconds after the cancels");
}
