//! The web console (`serve --http`): a workload through psycopg, then the
//! JSON API read over HTTP and every page rendered by headless Chromium
//! (`tests/clients/console_client.py`; `.ci/run` installs Debian's
//! `chromium`): the hot PartitionKey is where the workload put it and is
//! flagged against its target, an append-only load climbs the key space,
//! EXPLAIN shows the right class; then SCRAM users and trust off loopback.

use std::process::Command;

use super::server::TestServer;

/// The console port a server printed at start-up.
fn console_port(s: &TestServer) -> u16 {
    let lines = s.stdout.lock().unwrap();
    lines
        .iter()
        .find_map(|l| l.split_once("console on http://").map(|(_, url)| url))
        .and_then(|url| url.trim_end_matches('/').rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no console address in {lines:?}"))
}

fn script(args: &[&str]) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients");
    let out = Command::new("python3")
        .arg(format!("{dir}/console_client.py"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("python3 runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.ends_with("console ok\n"),
        "console_client.py {args:?} failed (apt-get install chromium: .ci/run does):\n{stdout}\n{stderr}"
    );
}

#[test]
fn the_console_draws_the_workload_where_it_went() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::serve_in(
        dir.path(),
        &["--http", "127.0.0.1:0", "--keyviz-slot-seconds", "1"],
    );
    let (http, pg) = (console_port(&s).to_string(), s.port.to_string());
    let mut args = vec!["workload", &http, &pg];
    // `TABLEGATE_SCREENSHOTS=DIR cargo test ... console::` refreshes the
    // README's pictures from this run.
    let shots = std::env::var("TABLEGATE_SCREENSHOTS").unwrap_or_default();
    if !shots.is_empty() {
        args.extend(["--screenshots", &shots]);
    }
    script(&args);
}

#[test]
fn the_console_asks_scram_users_for_their_password() {
    let dir = tempfile::tempdir().unwrap();
    super::auth::set_user(dir.path(), "alice", "correct horse");
    let s = TestServer::serve_in(dir.path(), &["--auth", "scram", "--http", "127.0.0.1:0"]);
    script(&[
        "scram",
        &console_port(&s).to_string(),
        "alice",
        "correct horse",
    ]);
}

#[test]
fn the_console_with_trust_is_refused_on_a_non_loopback_address() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tablegate"))
        .args(["serve", "--listen", "127.0.0.1:0", "--unix-socket-dir", ""])
        .args(["--http", "0.0.0.0:0", "--data"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("refusing to serve the console on 0.0.0.0:0 with trust authentication"),
        "{stderr}"
    );
}
