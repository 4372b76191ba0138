//! Protocol abuse: truncated, oversized and random messages on many
//! connections at once. The server keeps serving a well-behaved client
//! throughout and never dies.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use tokio_postgres::NoTls;

use super::rng::Rng;
use super::server::TestServer;

impl Rng {
    /// `n` deterministic bytes.
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

pub(super) fn startup() -> Vec<u8> {
    let mut body = Vec::new();
    body.extend_from_slice(&196_608u32.to_be_bytes());
    for s in ["user", "tablegate", "database", "tablegate"] {
        body.extend_from_slice(s.as_bytes());
        body.push(0);
    }
    body.push(0);
    let mut msg = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    msg.extend(body);
    msg
}

/// One abusive conversation; the server may answer or hang up, never crash.
fn abuse(port: u16, kind: u64, rng: &mut Rng) {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
    let _ = s.set_write_timeout(Some(Duration::from_millis(300)));
    let payload: Vec<u8> = match kind % 8 {
        // Garbage instead of a startup packet.
        0 => rng.bytes(64),
        // A startup packet claiming 1 GiB.
        1 => (1u32 << 30).to_be_bytes().to_vec(),
        // A truncated startup packet, then close.
        2 => startup()[..10].to_vec(),
        // Valid startup, then a Query message claiming 2 GiB.
        3 => [startup(), vec![b'Q'], 0x7fff_ffffu32.to_be_bytes().to_vec()].concat(),
        // Valid startup, then random messages.
        4 => [startup(), rng.bytes(256)].concat(),
        // Valid startup, then a Query with no terminating NUL.
        5 => [
            startup(),
            vec![b'Q'],
            9u32.to_be_bytes().to_vec(),
            b"SELEC".to_vec(),
        ]
        .concat(),
        // Valid startup, then a Parse with nonsense parameter counts.
        6 => [
            startup(),
            vec![b'P'],
            12u32.to_be_bytes().to_vec(),
            vec![0, 0, 0xff, 0xff, 0, 0, 0, 0],
        ]
        .concat(),
        // Valid startup, then a negative length.
        _ => [startup(), vec![b'Q'], (-5i32).to_be_bytes().to_vec()].concat(),
    };
    let _ = s.write_all(&payload);
    let mut buf = [0u8; 1024];
    let _ = s.read(&mut buf);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_do_not_hurt_other_clients() {
    let s = TestServer::demo(&["--throttle", "off", "--max-connections", "200"]);
    let (client, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    let port = s.port;
    let abusers: Vec<_> = (0..16u64)
        .map(|t| {
            std::thread::spawn(move || {
                let mut rng = Rng::new(0x9E37_79B9_7F4A_7C15 ^ (t + 1));
                for i in 0..40 {
                    abuse(port, t * 40 + i, &mut rng);
                }
            })
        })
        .collect();
    // The good client keeps working while the abuse runs.
    for _ in 0..20 {
        let rows = client
            .query(
                "SELECT runner FROM registrations WHERE race = $1",
                &[&"2026 New York City Marathon__Full"],
            )
            .await
            .unwrap();
        assert_eq!(rows.len(), 40);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for a in abusers {
        a.join().unwrap();
    }
    // And after it: the server is alive and accepts new clients.
    let (fresh, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    fresh.simple_query("SELECT version()").await.unwrap();
    let mut s = s;
    assert!(s.child.try_wait().unwrap().is_none(), "the server exited");
    // Length claims of 1-2 GiB were refused, not allocated.
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).unwrap();
    let peak_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap();
    assert!(peak_kb < 512 * 1024, "peak RSS {peak_kb} kB");
}

/// Statements built to exhaust the planner: a 20,000-term OR chain (a tree
/// 20,000 deep), a 20,000-value IN list, and a text over the size limit.
/// Each gets an error or an answer; the server never dies.
#[tokio::test]
async fn huge_and_deep_statements_are_refused_or_answered() {
    let s = TestServer::demo(&["--throttle", "off"]);
    let (client, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    let deep = format!(
        "SELECT name FROM registrations WHERE {}",
        (0..20_000)
            .map(|i| format!("age = {i}"))
            .collect::<Vec<_>>()
            .join(" OR ")
    );
    let err = client.simple_query(&deep).await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("54001"), "{err:?}");
    // Within the limit, a long OR chain plans and runs.
    let ok = format!(
        "SELECT name FROM registrations WHERE race = '2026 New York City Marathon__Full' AND ({})",
        (0..900)
            .map(|i| format!("age = {i}"))
            .collect::<Vec<_>>()
            .join(" OR ")
    );
    assert!(!client.simple_query(&ok).await.unwrap().is_empty());
    // A 20,000-value IN list on the PartitionKey: widened to a hull for the
    // scan, exact in the result, and quick.
    let started = std::time::Instant::now();
    let list = (0..20_000)
        .map(|i| format!("'race {i:05}'"))
        .chain(["'2026 New York City Marathon__Full'".to_owned()])
        .collect::<Vec<_>>()
        .join(", ");
    let rows = client
        .query(
            &format!("SELECT runner FROM registrations WHERE race IN ({list})"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 40, "exactly the NYC__Full rows");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    let huge = format!(
        "SELECT name FROM registrations WHERE name = '{}'",
        "x".repeat(2 << 20)
    );
    let err = client.simple_query(&huge).await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("54000"), "{err:?}");
    client.simple_query("SELECT version()").await.unwrap();
    let mut s = s;
    assert!(s.child.try_wait().unwrap().is_none(), "the server exited");
}

pub(super) fn msg(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
    m.extend_from_slice(body);
    m
}

/// A Bind whose format-code counts match neither the parameters nor the
/// result columns is answered with 08P01; the session goes on.
#[test]
fn bind_with_wrong_format_code_counts_is_a_protocol_error() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let sql = b"SELECT race, runner FROM registrations WHERE race = $1\0";
    let mut parse = vec![0u8];
    parse.extend_from_slice(sql);
    parse.extend_from_slice(&0u16.to_be_bytes());
    let mut bind = vec![0u8, 0u8]; // unnamed portal, unnamed statement
    bind.extend_from_slice(&3u16.to_be_bytes()); // 3 parameter format codes...
    bind.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    bind.extend_from_slice(&1u16.to_be_bytes()); // ...for 1 parameter
    bind.extend_from_slice(&1u32.to_be_bytes());
    bind.push(b'x');
    bind.extend_from_slice(&3u16.to_be_bytes()); // 3 result codes for 2 columns
    bind.extend_from_slice(&[0, 1, 0, 1, 0, 1]);
    let describe = [b'P', 0];
    let execute = [0u8, 0, 0, 0, 0];
    let out = [
        startup(),
        msg(b'P', &parse),
        msg(b'B', &bind),
        msg(b'D', &describe),
        msg(b'E', &execute),
        msg(b'S', &[]),
        msg(b'Q', b"SELECT 1 AS still_here\0"),
    ]
    .concat();
    c.write_all(&out).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        if String::from_utf8_lossy(&got).contains("still_here")
            && got.ends_with(&[b'Z', 0, 0, 0, 5, b'I'])
        {
            break;
        }
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("08P01"), "{text:?}");
    assert!(text.contains("still_here"), "the session goes on: {text:?}");
}

/// Messages whose bodies lie about their own layout (a count or length
/// past the end, bytes after the last field, an unknown type or subtype)
/// end the session with FATAL 08P01 "invalid message format", as in
/// PostgreSQL: what came before is answered, nothing after (pgwire's
/// decoders would read past them, or panic the connection's thread).
#[test]
fn messages_that_lie_about_their_layout_end_the_session_with_08p01() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("Parse without its counts", msg(b'P', b"\0")),
        (
            "Parse with more types than bytes",
            msg(b'P', b"\0SELECT 1\0\0\x05\0\0\0\x17"),
        ),
        (
            "Bind with a value past the end",
            msg(b'B', b"\0\0\0\0\0\x01\0\0\x10\0ab\0\0"),
        ),
        (
            "Bind with a negative length",
            msg(b'B', b"\0\0\0\0\0\x01\xff\xff\xff\xf0\0\0"),
        ),
        ("Describe of an unknown kind", msg(b'D', b"Q\0")),
        ("Close without a name", msg(b'C', b"S")),
        ("Execute without its row count", msg(b'E', b"\0")),
        (
            "Query with bytes after its text",
            msg(b'Q', b"SELECT 1\0SELECT 2\0"),
        ),
        ("Sync with a body", msg(b'S', b"x")),
        ("an unknown message type", msg(b'Y', b"")),
        ("a length shorter than itself", vec![b'Q', 0, 0, 0, 2]),
    ];
    for (what, bad) in cases {
        let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let out = [
            startup(),
            msg(b'Q', b"SELECT 1 AS before_it\0"),
            bad,
            msg(b'Q', b"SELECT 1 AS after_it\0"),
        ]
        .concat();
        c.write_all(&out).unwrap();
        let got = until_closed(&mut c, what);
        let text = String::from_utf8_lossy(&got);
        assert!(text.contains("before_it"), "{what}: {text:?}");
        assert!(
            text.contains("FATAL") && text.contains("08P01"),
            "{what}: {text:?}"
        );
        assert!(!text.contains("after_it"), "{what}: {text:?}");
    }
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(&[startup(), msg(b'Q', b"SELECT 1 AS fine\0")].concat())
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).contains("fine") {
        let n = c.read(&mut buf).unwrap();
        assert!(n > 0, "a fresh session was closed");
        got.extend_from_slice(&buf[..n]);
    }
    let mut s = s;
    assert!(s.child.try_wait().unwrap().is_none(), "the server exited");
}

/// Execute's row count as PostgreSQL reads it: zero or negative is every
/// row, a huge one is a limit, not an allocation (pgwire reserved room for
/// that many rows: -1 overflowed the capacity and panicked the session,
/// found by the `frontend` fuzz target).
#[test]
fn execute_row_counts_of_any_size_are_answered() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    for max_rows in [-1i32, i32::MIN, i32::MAX, 0, 2] {
        let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut execute = vec![0u8];
        execute.extend_from_slice(&max_rows.to_be_bytes());
        let out = [
            startup(),
            msg(b'P', b"\0SELECT runner FROM registrations\0\0\0"),
            msg(b'B', b"\0\0\0\0\0\0\0\0"),
            msg(b'E', &execute),
            msg(b'S', &[]),
            msg(b'Q', b"SELECT 1 AS still_here\0"),
            msg(b'X', &[]),
        ]
        .concat();
        c.write_all(&out).unwrap();
        let got = until_closed(&mut c, &format!("max_rows {max_rows}"));
        let text = String::from_utf8_lossy(&got);
        assert!(text.contains("still_here"), "max_rows {max_rows}: {text:?}");
        let suspended = tags_after_startup(&got).contains(&b's');
        assert_eq!(suspended, max_rows == 2, "max_rows {max_rows}: {text:?}");
    }
}

/// Everything the server sends until it closes the connection (within the
/// socket's read timeout, or the test fails naming `what`).
fn until_closed(c: &mut TcpStream, what: &str) -> Vec<u8> {
    let mut got = Vec::new();
    if let Err(e) = c.read_to_end(&mut got) {
        panic!("{what}: the session did not end: {e}");
    }
    got
}

/// The tags of the backend messages in `bytes`, after the startup's
/// (everything up to its first ReadyForQuery).
fn tags_after_startup(bytes: &[u8]) -> Vec<u8> {
    let mut tags = Vec::new();
    let mut at = 0;
    while at + 5 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[at + 1..at + 5].try_into().unwrap()) as usize;
        tags.push(bytes[at]);
        at += 1 + len;
    }
    let ready = tags.iter().position(|&t| t == b'Z').expect("startup ends");
    tags.split_off(ready + 1)
}

/// Describe answers as PostgreSQL's does: a statement without result
/// columns gets its ParameterDescription and then NoData (not an empty
/// RowDescription), a SELECT portal its RowDescription, and a portal
/// without result columns NoData.
#[test]
fn describe_sends_no_data_for_statements_without_columns() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let parse = |name: &[u8], sql: &[u8]| {
        let mut p = name.to_vec();
        p.push(0);
        p.extend_from_slice(sql);
        p.push(0);
        p.extend_from_slice(&0u16.to_be_bytes());
        msg(b'P', &p)
    };
    // Binds `portal` to `stmt` with one text parameter.
    let bind = |portal: &[u8], stmt: &[u8], value: &[u8]| {
        let mut b = portal.to_vec();
        b.push(0);
        b.extend_from_slice(stmt);
        b.push(0);
        b.extend_from_slice(&0u16.to_be_bytes());
        b.extend_from_slice(&1u16.to_be_bytes());
        b.extend_from_slice(&(value.len() as u32).to_be_bytes());
        b.extend_from_slice(value);
        b.extend_from_slice(&0u16.to_be_bytes());
        msg(b'B', &b)
    };
    let describe = |kind: u8, name: &[u8]| {
        let mut d = vec![kind];
        d.extend_from_slice(name);
        d.push(0);
        msg(b'D', &d)
    };
    let out = [
        startup(),
        parse(
            b"del",
            b"DELETE FROM registrations WHERE race = $1 AND runner = 'nobody'",
        ),
        describe(b'S', b"del"),
        parse(b"sel", b"SELECT name FROM registrations WHERE race = $1"),
        describe(b'S', b"sel"),
        bind(b"p_sel", b"sel", b"no such race"),
        describe(b'P', b"p_sel"),
        bind(b"p_del", b"del", b"no such race"),
        describe(b'P', b"p_del"),
        msg(b'S', &[]),
    ]
    .concat();
    c.write_all(&out).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        let tags = tags_after_startup(&got);
        if tags.last() == Some(&b'Z') {
            break;
        }
    }
    let tags = String::from_utf8(tags_after_startup(&got)).unwrap();
    // ParseComplete, ParameterDescription, NoData; ParseComplete,
    // ParameterDescription, RowDescription; BindComplete, RowDescription;
    // BindComplete, NoData; ReadyForQuery.
    assert_eq!(tags, "1tn1tT2T2nZ", "{:?}", String::from_utf8_lossy(&got));
}
