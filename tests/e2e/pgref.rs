//! A throwaway PostgreSQL 15 cluster for side-by-side tests: initdb into a
//! temporary directory, serve on a free loopback port, stop on drop.
//! PostgreSQL refuses to run as root, so the cluster runs as the `postgres`
//! system user (`.ci/run` creates it when a machine lacks it).

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Command, Stdio};

const BIN: &str = "/usr/lib/postgresql/15/bin";

/// A running reference cluster.
pub struct PgRef {
    dir: PathBuf,
    port: u16,
}

fn as_postgres(args: &[&str]) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--"]).args(args);
    c
}

impl PgRef {
    /// Starts a cluster (fsync off: a reference for results, not speed).
    pub fn start() -> PgRef {
        assert!(
            Command::new("id")
                .arg("postgres")
                .stdout(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
            "the `postgres` system user is missing: .ci/run creates it (useradd -r postgres)"
        );
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let dir = std::env::temp_dir().join(format!("tg-pgref-{}-{port}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.to_str().unwrap().to_owned();
        // From here on, a failed start still stops what started and
        // removes the directory (Drop).
        let pg = PgRef { dir, port };
        assert!(
            Command::new("chown")
                .args(["-R", "postgres", &d])
                .status()
                .unwrap()
                .success()
        );
        let data = format!("{d}/data");
        let out = as_postgres(&[
            &format!("{BIN}/initdb"),
            "-D",
            &data,
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
        ])
        .output()
        .expect("runuser runs initdb (util-linux)");
        assert!(
            out.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let opts = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={d} -c fsync=off"
        );
        let out = as_postgres(&[
            &format!("{BIN}/pg_ctl"),
            "-D",
            &data,
            "-o",
            &opts,
            "-l",
            &format!("{d}/log"),
            "-w",
            "start",
        ])
        .output()
        .expect("runuser runs pg_ctl (util-linux)");
        assert!(
            out.status.success(),
            "pg_ctl start: {} {}",
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(format!("{d}/log")).unwrap_or_default()
        );
        pg
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// tokio-postgres connection string.
    pub fn conn_str(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }
}

impl Drop for PgRef {
    fn drop(&mut self) {
        let data = format!("{}/data", self.dir.display());
        let _ = as_postgres(&[
            &format!("{BIN}/pg_ctl"),
            "-D",
            &data,
            "-m",
            "immediate",
            "stop",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A client of `conn`, its connection driven in the background.
pub async fn client(conn: &str) -> tokio_postgres::Client {
    let (c, connection) = tokio_postgres::connect(conn, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    c
}

/// The set-up of every side-by-side test: a PostgreSQL 15 reference and a
/// small tablegate demo server (throttling off), each with a client; the
/// reference session renders times in UTC, as tablegate does.
pub struct SideBySide {
    /// The reference cluster, kept running while this lives.
    _pg: PgRef,
    /// A client of the reference.
    pub p: tokio_postgres::Client,
    /// The tablegate server (kept running).
    pub s: super::server::TestServer,
    /// A client of tablegate.
    pub t: tokio_postgres::Client,
}

impl SideBySide {
    /// Starts both and connects.
    pub async fn start() -> SideBySide {
        let pg = PgRef::start();
        let p = client(&pg.conn_str()).await;
        p.batch_execute("SET TimeZone = 'UTC'").await.unwrap();
        let s = super::server::TestServer::demo(&["--throttle", "off", "--runners", "1"]);
        let t = client(&s.conn_str()).await;
        SideBySide { _pg: pg, p, s, t }
    }
}
