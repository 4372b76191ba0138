//! Starts the real binary and stops it.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running `tablegate demo` on a free port, with a small data set.
pub struct TestServer {
    pub child: Child,
    pub port: u16,
    /// Everything the server printed on stdout so far.
    pub stdout: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    _dir: Option<tempfile::TempDir>,
    /// The directory of the server's Unix-domain socket: one per server,
    /// so a killed server leaves no socket file in the system's directory.
    pub socket_dir: tempfile::TempDir,
}

impl TestServer {
    /// Starts `tablegate demo` (20 runners unless `extra` says otherwise)
    /// with extra arguments and waits until it listens.
    pub fn demo(extra: &[&str]) -> TestServer {
        Self::demo_in(tempfile::tempdir().unwrap(), extra)
    }

    /// Like [`demo`](Self::demo), in a data directory the test prepared.
    pub fn demo_in(dir: tempfile::TempDir, extra: &[&str]) -> TestServer {
        let runners: &[&str] = if extra.contains(&"--runners") {
            &[]
        } else {
            &["--runners", "20"]
        };
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tablegate"));
        cmd.args(["demo", "--listen", "127.0.0.1:0", "--data"])
            .arg(dir.path())
            .args(runners)
            .args(extra);
        let mut s = Self::start(cmd, extra, Stdio::null());
        s._dir = Some(dir);
        s
    }

    /// `tablegate serve` on a data directory the caller owns (it survives
    /// the server, for restart tests).
    pub fn serve_in(dir: &std::path::Path, extra: &[&str]) -> TestServer {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tablegate"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(dir)
            .args(extra);
        Self::start(cmd, extra, Stdio::null())
    }

    /// [`serve_in`](Self::serve_in) with extra environment variables and
    /// the server's log (stderr) written to `log`.
    pub fn serve_logged(
        dir: &std::path::Path,
        extra: &[&str],
        env: &[(&str, &std::path::Path)],
        log: &std::path::Path,
    ) -> TestServer {
        Self::serve_wrapped(&[], dir, extra, env, log)
    }

    /// [`serve_logged`](Self::serve_logged) run through `wrapper` (a
    /// command and its arguments that ends by running the one after it,
    /// such as `prlimit --nofile=… --`).
    pub fn serve_wrapped(
        wrapper: &[&str],
        dir: &std::path::Path,
        extra: &[&str],
        env: &[(&str, &std::path::Path)],
        log: &std::path::Path,
    ) -> TestServer {
        let bin = env!("CARGO_BIN_EXE_tablegate");
        let mut cmd = match wrapper.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(dir)
            .args(extra);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let log = std::fs::File::create(log).expect("log file");
        Self::start(cmd, extra, log.into())
    }

    /// Starts `cmd` with its stderr going to `stderr`.
    fn start(mut cmd: Command, extra: &[&str], stderr: Stdio) -> TestServer {
        let socket_dir = tempfile::tempdir().unwrap();
        if !extra.contains(&"--unix-socket-dir") {
            cmd.arg("--unix-socket-dir").arg(socket_dir.path());
        }
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .expect("start tablegate");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = lines.clone();
        std::thread::spawn(move || {
            let mut port = None;
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix("tablegate listening on ") {
                    port = addr.rsplit(':').next().and_then(|p| p.parse::<u16>().ok());
                }
                let last = line.starts_with("connect with: ");
                seen.lock().unwrap().push(line);
                // Ready once the start-up banner is complete (its last line
                // stored), so tests that read it see all of it.
                if last && let Some(p) = port {
                    let _ = tx.send(p);
                }
            }
        });
        let port = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("server did not start");
        TestServer {
            child,
            port,
            stdout: lines,
            _dir: None,
            socket_dir,
        }
    }

    /// The port of the address the server printed after `label` at
    /// start-up (`Arrow Flight SQL on grpc://127.0.0.1:PORT`, `console on
    /// http://127.0.0.1:PORT/`).
    pub fn printed_port(&self, label: &str) -> u16 {
        let lines = self.stdout.lock().unwrap();
        lines
            .iter()
            .find_map(|l| l.split_once(label).map(|(_, url)| url))
            .and_then(|url| url.trim_end_matches('/').rsplit(':').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("no \"{label}\" address in {lines:?}"))
    }

    /// tokio-postgres connection string.
    pub fn conn_str(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=tablegate dbname=tablegate",
            self.port
        )
    }

    /// SIGKILL: no shutdown, no flush.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits; returns whether it exited cleanly.
    pub fn terminate(mut self) -> bool {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `python3 tests/clients/SCRIPT ARGS`, which must succeed and end
/// its output with `done`; `needs` says what to install when it cannot.
pub fn python_client(script: &str, args: &[&str], done: &str, needs: &str) {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/clients");
    let out = Command::new("python3")
        .arg(format!("{dir}/{script}"))
        .args(args)
        .current_dir(dir)
        .output()
        .expect("python3 runs");
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success() && stdout.ends_with(done),
        "{script} {args:?} failed ({needs}):\n{stdout}\n{stderr}"
    );
}

/// `tablegate serve` with `args` under trust, which must refuse to start;
/// its stderr.
pub fn serve_refused(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tablegate"))
        .args(["serve", "--unix-socket-dir", ""])
        .args(args)
        .arg("--data")
        .arg(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the server started with {args:?} and kept running");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success(), "the server started with {args:?}");
    let mut stderr = String::new();
    use std::io::Read as _;
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    stderr
}

/// psql connected to the test server as `tablegate` (no psqlrc); callers
/// add their options.
pub fn psql_command(s: &TestServer) -> Command {
    let mut cmd = Command::new("psql");
    cmd.args([
        "-h",
        "127.0.0.1",
        "-p",
        &s.port.to_string(),
        "-U",
        "tablegate",
        "-X",
        "tablegate",
    ]);
    cmd
}

/// Runs psql with `-c` commands; returns (stdout, stderr, success).
pub fn psql(s: &TestServer, commands: &[&str]) -> (String, String, bool) {
    let mut cmd = psql_command(s);
    cmd.args(["-v", "ON_ERROR_STOP=1"]);
    for c in commands {
        cmd.args(["-c", c]);
    }
    let out = cmd.output().expect("psql is installed");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}
