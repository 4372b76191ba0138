//! Arrow Flight SQL (`serve --flight-listen`), driven by ADBC's Flight SQL
//! driver and pyarrow from Python (`tests/clients/flight_client.py`; `.ci/run`
//! installs adbc-driver-flightsql, pyarrow and pandas): every column type
//! read as Arrow and compared with what psycopg reads through pgwire,
//! parameters, EXPLAIN, SQLSTATEs, 100,000 rows of bulk ingest read back,
//! metadata, pandas, transactions; then SCRAM users over TLS and tokens
//! that expire.

use std::process::Command;

use super::server::{TestServer, python_client, serve_refused};

/// The Flight SQL port a server printed at start-up.
fn flight_port(s: &TestServer) -> u16 {
    s.printed_port("Arrow Flight SQL on ")
}

fn script(args: &[&str]) {
    python_client(
        "flight_client.py",
        args,
        "flight ok\n",
        "pip install adbc-driver-flightsql pyarrow pandas: .ci/run does",
    );
}

#[test]
fn adbc_reads_what_psycopg_reads_and_ingests_in_bulk() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::serve_in(
        dir.path(),
        &["--throttle", "off", "--flight-listen", "127.0.0.1:0"],
    );
    let (flight, pg) = (flight_port(&s).to_string(), s.port.to_string());
    script(&["trust", &flight, &pg]);
}

#[test]
fn flight_sql_takes_scram_users_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    super::auth::set_user(dir.path(), "alice", "correct horse");
    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = (certs.path().join("cert.pem"), certs.path().join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args(["-subj", "/CN=localhost"])
        // Go's TLS (under ADBC) checks the subject alternative name.
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl is installed");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let s = TestServer::serve_in(
        dir.path(),
        &[
            "--auth",
            "scram",
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
            "--flight-listen",
            "127.0.0.1:0",
            "--flight-token-seconds",
            "3",
        ],
    );
    let flight = flight_port(&s).to_string();
    script(&[
        "secure",
        &flight,
        cert.to_str().unwrap(),
        "alice",
        "correct horse",
    ]);
}

#[test]
fn flight_sql_with_trust_is_refused_on_a_non_loopback_address() {
    let stderr = serve_refused(&["--listen", "127.0.0.1:0", "--flight-listen", "0.0.0.0:0"]);
    assert!(
        stderr.contains("refusing to serve Flight SQL on 0.0.0.0:0 with trust authentication"),
        "{stderr}"
    );
}

/// The README's pandas example runs against the demo as written.
#[test]
fn the_pandas_example_runs_against_the_demo() {
    let s = TestServer::demo(&["--throttle", "off", "--flight-listen", "127.0.0.1:0"]);
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/flight_pandas.py");
    let out = Command::new("python3")
        .arg(example)
        .arg(flight_port(&s).to_string())
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("2026 New York City Marathon__Full"),
        "{stdout}"
    );
    assert!(
        stdout.contains("runners aged 30-39, columns ['runner', 'name', 'age']"),
        "{stdout}"
    );
}
