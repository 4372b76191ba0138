//! Frontend protocol messages against a real server on a loopback socket
//! (the gateway built without its analytics engine, over an in-memory
//! store): admission, the frame guard, startup, and the handler's simple,
//! extended, COPY and cursor paths.
//!
//! Input: a first byte, then messages. If the first byte's high bit is
//! set, the rest goes to the socket as it is (startup packets, SSL and
//! cancel requests, length claims). Otherwise the harness starts a trust
//! session and the rest is read as messages, each a type byte, a 16-bit
//! payload length and the payload, sent with the protocol's framing and
//! followed by Sync and Terminate.
//!
//! Must hold: a panic anywhere (any connection thread) aborts the run,
//! which libFuzzer reports; the server closes every session (reading to
//! EOF ends within the deadline) and still accepts the next connection.
#![no_main]

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::LazyLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use tablegate_gateway::{Server, ServerConfig};
use tablegate_planner::Planner;
use tablegate_store::partition::PartitionConfig;
use tablegate_store::{LocalStore, PartitionedStore};

/// Longest a session may take to end after its client's last byte: every
/// statement runs under a 2 s statement_timeout.
const DEADLINE: Duration = Duration::from_secs(8);

static SERVER: LazyLock<SocketAddr> = LazyLock::new(|| {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let store = PartitionedStore::new(
                LocalStore::in_memory(),
                PartitionConfig {
                    targets: None,
                    move_offline: Duration::ZERO,
                    ..Default::default()
                },
            )
            .unwrap();
            let planner = Planner::open(store).await.unwrap();
            for sql in [
                "CREATE TABLE tbl (pk TEXT, rk TEXT, n INT, x DOUBLE PRECISION, b BOOLEAN, \
                 ts TIMESTAMPTZ, bin BYTEA, PRIMARY KEY (pk, rk))",
                "CREATE TABLE kvs (k TEXT PRIMARY KEY, v TEXT)",
            ] {
                let stmt = &Planner::parse(sql).unwrap()[0];
                let plan = planner.plan(stmt, sql).unwrap();
                planner.run_ddl(&plan).await.unwrap();
            }
            let config = ServerConfig {
                session_defaults: vec![("statement_timeout".into(), "2s".into())],
                shutdown_grace: Duration::from_millis(100),
                ..Default::default()
            };
            let server = Server::bind("127.0.0.1:0".parse().unwrap(), planner, config)
                .await
                .unwrap();
            tx.send(server.local_addr().unwrap()).unwrap();
            server.run(std::future::pending()).await.unwrap();
        });
    });
    rx.recv().unwrap()
});

fn startup() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&196_608u32.to_be_bytes()); // protocol 3.0
    for (k, v) in [("user", "fuzz"), ("database", "tablegate")] {
        body.extend_from_slice(k.as_bytes());
        body.push(0);
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut out = (u32::try_from(body.len() + 4).unwrap()).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    out
}

fn message(out: &mut Vec<u8>, tag: u8, payload: &[u8]) {
    out.push(tag);
    out.extend_from_slice(&(u32::try_from(payload.len() + 4).unwrap()).to_be_bytes());
    out.extend_from_slice(payload);
}

fn bytes_for(data: &[u8]) -> Vec<u8> {
    let (mode, rest) = data.split_first().expect("non-empty");
    if mode & 0x80 != 0 {
        return rest.to_vec();
    }
    let mut out = startup();
    let mut rest = rest;
    while let [tag, hi, lo, tail @ ..] = rest {
        let n = usize::from(u16::from_be_bytes([*hi, *lo])).min(tail.len());
        message(&mut out, *tag, &tail[..n]);
        rest = &tail[n..];
    }
    message(&mut out, b'S', &[]);
    message(&mut out, b'X', &[]);
    out
}

fuzz_target!(|data: &[u8]| {
    if data.is_empty() {
        return;
    }
    let addr = *SERVER;
    let mut socket = TcpStream::connect(addr).expect("the server no longer accepts connections");
    socket.set_read_timeout(Some(DEADLINE)).unwrap();
    socket.set_write_timeout(Some(DEADLINE)).unwrap();
    // The server may close first (a fatal error): then writes fail, which
    // is an answer, not a finding.
    let _ = socket.write_all(&bytes_for(data));
    let _ = socket.shutdown(Shutdown::Write);
    let started = std::time::Instant::now();
    let mut sink = [0u8; 64 * 1024];
    // FRONTEND_SHOW=1: print what the server answered (to check seeds).
    let show = std::env::var_os("FRONTEND_SHOW").is_some();
    loop {
        match socket.read(&mut sink) {
            Ok(0) => break,
            Ok(n) if show => eprintln!("{:?}", String::from_utf8_lossy(&sink[..n])),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            // libFuzzer's timer signal.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => panic!(
                "the server did not end the session within {DEADLINE:?} ({:?}): {e}",
                started.elapsed()
            ),
        }
    }
});
