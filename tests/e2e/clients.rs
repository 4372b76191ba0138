//! Other languages' drivers: psycopg 3 (Python) and node-postgres, each
//! creating a table, inserting, querying with parameters, paging 5,000
//! rows through a server-side cursor and reading information_schema.
//! `.ci/run` installs both (`pip install psycopg[binary]`, `npm install`
//! in tests/clients).

use std::process::Command;

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
