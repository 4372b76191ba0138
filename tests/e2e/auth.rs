//! SCRAM-SHA-256 against stored verifiers: the right password connects,
//! a wrong one or an unknown user gets 28P01, and the password is nowhere
//! in the data directory.

use std::process::Command;

use tokio_postgres::NoTls;

use super::server::TestServer;

#[tokio::test]
async fn scram_accepts_the_right_password_only() {
    let dir = tempfile::tempdir().unwrap();
    let stdout = set_alice(dir.path());
    assert!(stdout.contains("verifier stored"));
    // Only the verifier is at rest: the password's bytes are in no file.
    for entry in walk(dir.path()) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !bytes.windows(8).any(|w| w == b"correct "),
            "password found in {}",
            entry.display()
        );
    }
    set_user(dir.path(), "bob", "another one");
    let data = dir.path().to_owned();
    let s = TestServer::demo_in(dir, &["--auth", "scram", "--throttle", "off"]);
    let conn = |user: &str, password: &str| {
        format!(
            "host=127.0.0.1 port={} user={user} password='{password}' dbname=tablegate",
            s.port
        )
    };
    let (client, connection) =
        tokio_postgres::connect(&conn("alice", "correct horse battery"), NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    client.simple_query("SELECT version()").await.unwrap();
    // pg_roles (psql's \du) lists every user who can log in, and
    // current_user is the one who did.
    let rows = client
        .query(
            "SELECT rolname, rolcanlogin, current_user FROM pg_catalog.pg_roles ORDER BY 1",
            &[],
        )
        .await
        .unwrap();
    let roles: Vec<(String, bool, String)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(
        roles,
        [
            ("alice".into(), true, "alice".into()),
            ("bob".into(), true, "alice".into())
        ]
    );
    for (user, password) in [("alice", "wrong"), ("mallory", "correct horse battery")] {
        let err = match tokio_postgres::connect(&conn(user, password), NoTls).await {
            Ok(_) => panic!("{user} logged in with a wrong password"),
            Err(e) => e,
        };
        assert_eq!(err.code().map(|c| c.code()), Some("28P01"), "{user}: {err}");
    }
    // psql, too: without a password it is refused.
    let out = Command::new("psql")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &s.port.to_string(),
            "-U",
            "alice",
            "-w",
            "-X",
            "-c",
            "SELECT 1",
            "tablegate",
        ])
        .env("PGPASSWORD", "wrong")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr).to_lowercase();
    assert!(
        stderr.contains("password authentication failed"),
        "{stderr}"
    );
    drop(data);
}

/// `tablegate user set alice` with password `correct horse battery`
/// (from TABLEGATE_PASSWORD); its stdout.
fn set_alice(data: &std::path::Path) -> String {
    set_user(data, "alice", "correct horse battery")
}

pub(super) fn set_user(data: &std::path::Path, user: &str, password: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tablegate"))
        .args(["user", "set", user, "--data"])
        .arg(data)
        .env("TABLEGATE_PASSWORD", password)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn trust_is_refused_on_a_non_loopback_address() {
    let stderr = super::server::serve_refused(&["--listen", "0.0.0.0:0"]);
    assert!(
        stderr.contains("trust is allowed on loopback addresses only"),
        "{stderr}"
    );
}

/// With a certificate and key, TLS is required: psql with sslmode=require
/// connects, a plaintext client is refused (28000), never served in clear.
#[test]
fn tls_is_required_when_configured() {
    let certs = tempfile::tempdir().unwrap();
    let (cert, key) = (certs.path().join("cert.pem"), certs.path().join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-subj",
            "/CN=localhost",
            "-keyout",
        ])
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
    let s = TestServer::demo(&[
        "--throttle",
        "off",
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]);
    let psql = |sslmode: &str| {
        Command::new("psql")
            .arg(format!(
                "host=127.0.0.1 port={} user=tablegate dbname=tablegate sslmode={sslmode}",
                s.port
            ))
            .args(["-X", "-t", "-c", "SELECT version()"])
            .output()
            .unwrap()
    };
    let secure = psql("require");
    assert!(
        secure.status.success(),
        "{}",
        String::from_utf8_lossy(&secure.stderr)
    );
    assert!(String::from_utf8_lossy(&secure.stdout).contains("tablegate"));
    let plain = psql("disable");
    assert!(!plain.status.success());
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(stderr.contains("this server requires TLS"), "{stderr}");

    // tokio-postgres: over TLS it works (and a prepared, binary query
    // comes back); without TLS it is refused with 28000.
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let conn = format!(
            "host=127.0.0.1 port={} user=tablegate dbname=tablegate sslmode=require",
            s.port
        );
        let (c, connection) = tokio_postgres::connect(&conn, super::tls_driver::Rustls::new())
            .await
            .expect("TLS connect");
        tokio::spawn(connection);
        let row = c
            .query_one("SELECT count(*) FROM registrations", &[])
            .await
            .unwrap();
        assert!(row.get::<_, i64>(0) > 0);
        let plain = conn.replace("sslmode=require", "sslmode=disable");
        let e = match tokio_postgres::connect(&plain, NoTls).await {
            Ok(_) => panic!("a plaintext session was served"),
            Err(e) => e,
        };
        assert_eq!(
            e.as_db_error().map(|d| d.code().code()),
            Some("28000"),
            "{e:?}"
        );
    });
}

/// `user set` at a terminal (a pseudo-terminal from `script`) asks twice
/// and echoes neither; the password it stored logs in; a mismatch changes
/// nothing.
#[tokio::test]
async fn user_set_at_a_terminal_does_not_echo_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let typed = |answers: [&'static str; 2]| {
        let cmd = format!(
            "{} user set bob --data {}",
            env!("CARGO_BIN_EXE_tablegate"),
            dir.path().display()
        );
        let mut child = Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("script (util-linux) is installed");
        let mut stdin = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let reader = {
            let seen = seen.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 256];
                while let Ok(n @ 1..) = std::io::Read::read(&mut stdout, &mut buf) {
                    seen.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            })
        };
        for (prompt, answer) in ["password for bob: ", "enter it again: "]
            .into_iter()
            .zip(answers)
        {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while !String::from_utf8_lossy(&seen.lock().unwrap()).contains(prompt) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no prompt {prompt:?}: {:?}",
                    String::from_utf8_lossy(&seen.lock().unwrap())
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            // The prompt is printed just before echo is turned off.
            std::thread::sleep(std::time::Duration::from_millis(200));
            std::io::Write::write_all(&mut stdin, format!("{answer}\n").as_bytes()).unwrap();
        }
        let status = child.wait().unwrap();
        reader.join().unwrap();
        let out = String::from_utf8_lossy(&seen.lock().unwrap()).into_owned();
        (status.success(), out)
    };
    let (ok, out) = typed(["hunter22", "hunter23"]);
    assert!(!ok && out.contains("do not match"), "{out}");
    assert!(!out.contains("hunter2"), "echoed: {out}");
    let (ok, out) = typed(["hunter22", "hunter22"]);
    assert!(ok && out.contains("user bob set"), "{out}");
    assert!(!out.contains("hunter22"), "echoed: {out}");

    let s = TestServer::serve_in(dir.path(), &["--auth", "scram", "--throttle", "off"]);
    let conn = format!(
        "host=127.0.0.1 port={} user=bob password=hunter22 dbname=tablegate",
        s.port
    );
    let (c, connection) = tokio_postgres::connect(&conn, NoTls).await.unwrap();
    tokio::spawn(connection);
    c.simple_query("SELECT 1").await.unwrap();
}

/// With TABLEGATE_LOG_FORMAT=json every log line is one JSON object (no
/// colour codes in a file), and a failed login is one of them: user and
/// peer, never the password.
#[tokio::test]
async fn failed_logins_are_logged_as_json_without_the_password() {
    let dir = tempfile::tempdir().unwrap();
    set_alice(dir.path());
    let log = dir.path().join("server.log");
    let s = TestServer::serve_logged(
        dir.path(),
        &["--auth", "scram", "--throttle", "off"],
        &[("TABLEGATE_LOG_FORMAT", std::path::Path::new("json"))],
        &log,
    );
    let conn = |password: &str| {
        format!(
            "host=127.0.0.1 port={} user=alice password='{password}' dbname=tablegate",
            s.port
        )
    };
    let e = match tokio_postgres::connect(&conn("tr0ub4dor"), NoTls).await {
        Ok(_) => panic!("logged in with a wrong password"),
        Err(e) => e,
    };
    assert_eq!(e.code().map(|c| c.code()), Some("28P01"), "{e}");
    let (c, connection) = tokio_postgres::connect(&conn("correct horse battery"), NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    c.simple_query("SELECT 1").await.unwrap();

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap();
        if text.contains("authentication failed") || std::time::Instant::now() > deadline {
            break text;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert!(!text.contains('\u{1b}'), "colour codes in a file: {text}");
    assert!(
        !text.contains("tr0ub4dor") && !text.contains("correct horse"),
        "{text}"
    );
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}")))
        .collect();
    let failed: Vec<_> = lines
        .iter()
        .filter(|l| l["fields"]["message"] == "authentication failed")
        .collect();
    assert_eq!(failed.len(), 1, "{text}");
    let line = failed[0];
    assert_eq!(line["level"], "WARN", "{line}");
    assert_eq!(line["fields"]["user"], "alice", "{line}");
    assert!(
        line["fields"]["peer"]
            .as_str()
            .is_some_and(|p| p.starts_with("127.0.0.1:")),
        "{line}"
    );
}
