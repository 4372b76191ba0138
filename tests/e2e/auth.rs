//! SCRAM-SHA-256 against stored verifiers: the right password connects,
//! a wrong one or an unknown user gets 28P01, and the password is nowhere
//! in the data directory.

use std::process::Command;

use tokio_postgres::NoTls;

use super::server::TestServer;

#[tokio::test]
async fn scram_accepts_the_right_password_only() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tablegate"))
        .args(["user", "set", "alice", "--data"])
        .arg(dir.path())
        .env("TABLEGATE_PASSWORD", "correct horse battery")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("verifier stored"));
    // Only the verifier is at rest: the password's bytes are in no file.
    for entry in walk(dir.path()) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !bytes.windows(8).any(|w| w == b"correct "),
            "password found in {}",
            entry.display()
        );
    }
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
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tablegate"))
        .args(["serve", "--listen", "0.0.0.0:0", "--data"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
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
