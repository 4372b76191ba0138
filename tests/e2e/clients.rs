//! Other languages' drivers: psycopg 3 (Python) and node-postgres, each
//! creating a table, inserting, querying with parameters, paging 5,000
//! rows through a server-side cursor and reading information_schema.
//! SQLAlchemy 2 runs one script against tablegate and PostgreSQL 15 and
//! the two print the same lines. `.ci/run` installs them (`pip install
//! psycopg[binary] sqlalchemy`, `npm install` in tests/clients).

use std::process::Command;

use super::pgref::PgRef;
use super::server::TestServer;

fn run(program: &str, script: &str, port: u16, hint: &str) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients");
    let out = Command::new(program)
        .arg(format!("{dir}/{script}"))
        .arg(port.to_string())
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{program} not found ({e}): {hint}"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.contains(" ok"),
        "{script} failed ({hint}):\n{stdout}\n{stderr}"
    );
}

#[test]
fn psycopg_and_node_postgres() {
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    run(
        "python3",
        "psycopg_client.py",
        s.port,
        "pip install 'psycopg[binary]' (.ci/run does)",
    );
    run(
        "node",
        "node_client.js",
        s.port,
        "npm install in tests/clients (.ci/run does)",
    );
}

#[test]
fn sqlalchemy_sees_what_it_sees_on_postgresql() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients");
    let script = |url: String, server: &str| {
        let out = Command::new("python3")
            .arg(format!("{dir}/sqlalchemy_client.py"))
            .args([url.as_str(), server])
            .current_dir(dir)
            .output()
            .expect("python3 runs (pip install sqlalchemy: .ci/run does)");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success() && stdout.ends_with("sqlalchemy ok\n"),
            "sqlalchemy_client.py against {server}:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let pg = PgRef::start();
    let s = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let want = script(
        format!(
            "postgresql+psycopg://postgres@127.0.0.1:{}/postgres",
            pg.port()
        ),
        "postgresql",
    );
    let got = script(
        format!(
            "postgresql+psycopg://tablegate@127.0.0.1:{}/tablegate",
            s.port
        ),
        "tablegate",
    );
    assert_eq!(got, want);
}
