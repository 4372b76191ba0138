//! The connection `import --connect` and `stress --connect` make, and how
//! the command line prints a server error ([`db_error`]): a tokio-postgres
//! connection string, with what it leaves out taken from
//! PostgreSQL's environment variables as libpq takes them (`PGHOST`,
//! `PGPORT`, `PGUSER`, `PGPASSWORD`, `PGDATABASE`, `PGSSLMODE`), then
//! tablegate's defaults (the Unix socket directory or localhost, port 5433,
//! user and database `tablegate`).

use tokio_postgres::Config;
use tokio_postgres::config::SslMode;

/// Connects to `c` (plaintext), spawning the connection's task.
pub async fn connect(c: &Config) -> Result<tokio_postgres::Client, String> {
    let (client, connection) = c
        .connect(tokio_postgres::NoTls)
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", describe(c)))?;
    tokio::spawn(connection);
    Ok(client)
}

/// `host:port` (or the socket directory) for messages.
fn describe(c: &Config) -> String {
    let host = match c.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "?".into(),
    };
    format!("{host}:{}", c.get_ports().first().copied().unwrap_or(5432))
}

/// Where `import` and `stress` connect for `conn` (which may be empty).
pub fn client_config(conn: &str) -> Result<Config, String> {
    client_config_with(conn, |k| std::env::var(k).ok())
}

fn client_config_with(conn: &str, env: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
    let env = |k: &str| env(k).filter(|v| !v.is_empty());
    let mut c: Config = if conn.trim().is_empty() {
        Config::new()
    } else {
        conn.parse()
            .map_err(|e| format!("invalid connection string {conn:?}: {e}"))?
    };
    if c.get_hosts().is_empty() {
        match env("PGHOST") {
            Some(hosts) => {
                for h in hosts.split(',') {
                    if h.starts_with('/') {
                        c.host_path(h);
                    } else {
                        c.host(h);
                    }
                }
            }
            None if std::path::Path::new("/var/run/postgresql").is_dir() => {
                c.host_path("/var/run/postgresql");
            }
            None => {
                c.host("localhost");
            }
        }
    }
    if c.get_ports().is_empty() {
        let port = match env("PGPORT") {
            Some(p) => p
                .parse()
                .map_err(|_| format!("PGPORT={p:?} is not a port number"))?,
            None => 5433,
        };
        c.port(port);
    }
    if c.get_user().is_none() {
        c.user(env("PGUSER").as_deref().unwrap_or("tablegate"));
    }
    if c.get_password().is_none()
        && let Some(p) = env("PGPASSWORD")
    {
        c.password(p);
    }
    if c.get_dbname().is_none() {
        c.dbname(env("PGDATABASE").as_deref().unwrap_or("tablegate"));
    }
    // The connection string's sslmode, else PGSSLMODE's. These commands
    // speak plaintext: a mode that demands TLS is refused up front rather
    // than silently ignored.
    let mode = if conn.contains("sslmode") {
        None
    } else {
        env("PGSSLMODE")
    };
    match mode.as_deref() {
        None => {}
        Some("disable" | "allow" | "prefer") => {
            c.ssl_mode(SslMode::Disable);
        }
        Some(m @ ("require" | "verify-ca" | "verify-full")) => {
            return Err(format!(
                "PGSSLMODE={m}: import and stress connect without TLS; use PGSSLMODE=disable (or prefer)"
            ));
        }
        Some(m) => return Err(format!("PGSSLMODE={m:?} is not an sslmode")),
    }
    if c.get_ssl_mode() == SslMode::Require {
        return Err(
            "sslmode=require: import and stress connect without TLS; use sslmode=disable".into(),
        );
    }
    Ok(c)
}

/// A server error as the command line prints it: the message, its
/// SQLSTATE, and the hint when there is one.
pub fn db_error(e: tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => {
            let mut m = format!("{} ({})", d.message(), d.code().code());
            if let Some(h) = d.hint() {
                m.push_str(&format!("\nhint: {h}"));
            }
            m
        }
        None => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio_postgres::config::Host;

    fn with(vars: &[(&str, &str)], conn: &str) -> Result<Config, String> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        client_config_with(conn, move |k| {
            vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn the_environment_fills_what_the_string_leaves_out() {
        let c = with(
            &[
                ("PGHOST", "db.example"),
                ("PGPORT", "6000"),
                ("PGUSER", "ana"),
                ("PGPASSWORD", "s3cret"),
                ("PGDATABASE", "races"),
            ],
            "",
        )
        .unwrap();
        assert_eq!(c.get_hosts(), &[Host::Tcp("db.example".into())]);
        assert_eq!(c.get_ports(), &[6000]);
        assert_eq!(c.get_user(), Some("ana"));
        assert_eq!(c.get_password(), Some(&b"s3cret"[..]));
        assert_eq!(c.get_dbname(), Some("races"));
        // The string wins over the environment.
        let c = with(
            &[("PGHOST", "db.example"), ("PGUSER", "ana")],
            "host=h1 user=bo",
        )
        .unwrap();
        assert_eq!(c.get_hosts(), &[Host::Tcp("h1".into())]);
        assert_eq!(c.get_user(), Some("bo"));
        // A socket directory as the host.
        let c = with(&[("PGHOST", "/tmp/sock")], "").unwrap();
        assert_eq!(c.get_hosts(), &[Host::Unix("/tmp/sock".into())]);
        // Defaults: tablegate's port and user.
        let c = with(&[], "host=127.0.0.1").unwrap();
        assert_eq!(c.get_ports(), &[5433]);
        assert_eq!(c.get_user(), Some("tablegate"));
    }

    #[test]
    fn sslmode_that_demands_tls_is_refused() {
        assert!(with(&[("PGSSLMODE", "disable")], "").is_ok());
        assert!(with(&[("PGSSLMODE", "prefer")], "").is_ok());
        let e = with(&[("PGSSLMODE", "require")], "").unwrap_err();
        assert!(e.contains("without TLS"), "{e}");
        assert!(with(&[("PGSSLMODE", "sometimes")], "").is_err());
        assert!(with(&[("PGPORT", "x")], "").is_err());
        assert!(with(&[], "sslmode=require").is_err());
    }
}
