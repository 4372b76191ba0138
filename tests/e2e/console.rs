//! The web console (`serve --http`): a workload through psycopg, then the
//! JSON API read over HTTP and every page rendered by headless Chromium
//! (`tests/clients/console_client.py`; `.ci/run` installs Debian's
//! `chromium`): the hot PartitionKey is where the workload put it and is
//! flagged against its target, an append-only load climbs the key space,
//! EXPLAIN shows the right class and the ranges it touches, a cell names
//! the statements that hit it, and all of it survives a restart; then
//! SCRAM users and trust off loopback.

use super::server::{TestServer, python_client, serve_refused};

/// The console port a server printed at start-up.
fn console_port(s: &TestServer) -> u16 {
    s.printed_port("console on http://")
}

fn script(args: &[&str]) {
    python_client(
        "console_client.py",
        args,
        "console ok\n",
        "apt-get install chromium: .ci/run does",
    );
}

#[test]
fn the_console_draws_the_workload_where_it_went() {
    let dir = tempfile::tempdir().unwrap();
    let serve_args = [
        "--http",
        "127.0.0.1:0",
        "--keyviz-slot-seconds",
        "1",
        "--partition-target",
        "1000",
    ];
    let s = TestServer::serve_in(dir.path(), &serve_args);
    let (http, pg) = (console_port(&s).to_string(), s.port.to_string());
    let mut args = vec!["workload", &http, &pg];
    // `TABLEGATE_SCREENSHOTS=DIR cargo test ... console::` refreshes the
    // README's pictures from this run.
    let shots = std::env::var("TABLEGATE_SCREENSHOTS").unwrap_or_default();
    if !shots.is_empty() {
        args.extend(["--screenshots", &shots]);
    }
    script(&args);
    // The history (and the statements behind it) outlives a restart.
    assert!(s.terminate(), "the server did not stop cleanly");
    let s = TestServer::serve_in(dir.path(), &serve_args);
    script(&["history", &console_port(&s).to_string()]);
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
    let stderr = serve_refused(&["--listen", "127.0.0.1:0", "--http", "0.0.0.0:0"]);
    assert!(
        stderr.contains("refusing to serve the console on 0.0.0.0:0 with trust authentication"),
        "{stderr}"
    );
}
