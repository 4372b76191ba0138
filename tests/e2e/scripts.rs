//! Script tests: SQL statements and what the server answered, held together
//! in readable files under `tests/scripts/` (toydb's style, with the
//! `goldenscript` crate). Each script gets a fresh `tablegate serve` on an
//! empty data directory; its statements go over the wire and the recorded
//! output below each `---` must match.
//!
//! Regenerate after a deliberate change, then read the diff:
//!
//! ```sh
//! UPDATE_GOLDENFILES=1 cargo test -p tablegate --test e2e scripts
//! ```
//!
//! Script syntax (see the goldenscript crate for the rest):
//!
//! - `> SQL` runs SQL with the simple query protocol; several statements
//!   separated by `;` run as one query string, as psql's `-c` sends them.
//!   A line ending in `\` continues on the next.
//! - `[extended]> SQL` runs one statement with the extended protocol
//!   (Parse, Bind, Describe, Execute, Sync), results as text.
//! - `execute "SQL" PARAM...` does the same with text parameters `$1`,
//!   `$2`, ... (`NULL` is SQL NULL; quote a parameter that has spaces or
//!   characters other than letters, digits and `_-./@`).
//! - `NAME: > SQL` runs it on the session NAME (a connection of its own,
//!   opened on first use); without a prefix, on the default session.
//!
//! Output: rows as a table (NULL spelled out; `EXPLAIN`'s single
//! `QUERY PLAN` column as its bare lines), the command tag of statements
//! other than SELECT, SHOW and EXPLAIN (an INSERT with RETURNING shows
//! both), `ERROR <SQLSTATE>: <message>` with its DETAIL and HINT lines
//! (an error discards the rows of the result it ends, as psql does), and
//! NOTICEs where they arrive.
//!
//! The client is a small synchronous implementation of the PostgreSQL
//! protocol rather than tokio-postgres, whose `simple_query` reports a
//! statement's row count but not its command tag nor where a notice came.

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt::Write as _;
use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::server::TestServer;

/// One test per script, named after its file (`scripts::keys` runs
/// `tests/scripts/keys.test`).
macro_rules! scripts {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run_script(stringify!($name));
            }
        )*
        const SCRIPTS: &[&str] = &[$(stringify!($name)),*];
    };
}

scripts!(
    advise,
    analytics,
    errors,
    global_indexes,
    indexes,
    keys,
    prepared,
    transactions,
    typed_keys,
    what_if,
    writes
);

/// The same scripts on the Azure backend (each over an Azurite of its
/// own, so the scripts' table names cannot meet another test's): the
/// output must match the golden file's, except for the EXPLAIN blocks, whose
/// estimates and backend lines are the embedded engine's.
macro_rules! on_azure {
    ($($test:ident: $name:ident),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                run_on_azure(stringify!($name));
            }
        )*
    };
}

on_azure!(
    azure_writes: writes,
    azure_transactions: transactions,
    azure_prepared: prepared,
    azure_errors: errors,
    azure_indexes: indexes,
    azure_global_indexes: global_indexes,
);

fn run_on_azure(name: &str) {
    let path = scripts_dir().join(format!("{name}.test"));
    let golden = std::fs::read_to_string(&path).unwrap();
    let azurite = Azurite::start();
    let mut runner = ScriptRunner {
        azure: Some(azurite.connection_string()),
        ..ScriptRunner::default()
    };
    let got = goldenscript::generate(&mut runner, &golden)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (want, got) = (comparable(&golden), comparable(&got));
    if want != got {
        let diff: Vec<String> = want
            .iter()
            .zip(&got)
            .filter(|(w, g)| w != g)
            .take(3)
            .map(|(w, g)| format!("embedded:\n{w}\nazure:\n{g}"))
            .collect();
        panic!(
            "{} differs on the Azure backend ({} vs {} blocks):\n{}",
            path.display(),
            want.len(),
            got.len(),
            diff.join("\n\n")
        );
    }
}

/// A script's blocks (text between blank lines), without those that run
/// EXPLAIN.
fn comparable(text: &str) -> Vec<String> {
    text.split("\n\n")
        .filter(|b| !b.lines().any(|l| l.contains("> EXPLAIN")))
        .map(str::to_owned)
        .collect()
}

/// An Azurite of its own, in memory, stopped when dropped.
struct Azurite {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Azurite {
    fn start() -> Azurite {
        let bin = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/clients/node_modules/.bin/azurite-table");
        assert!(
            bin.exists(),
            "{} is missing: run `npm install` in tests/clients (.ci/run does)",
            bin.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let dir = tempfile::tempdir().unwrap();
        let child = std::process::Command::new(bin)
            .args(["--tableHost", "127.0.0.1", "--tablePort", &port.to_string()])
            .args(["--inMemoryPersistence", "--disableTelemetry", "--silent"])
            .current_dir(dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("azurite-table starts");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "Azurite did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Azurite {
            child,
            port,
            _dir: dir,
        }
    }

    fn connection_string(&self) -> String {
        format!(
            "UseDevelopmentStorage=true;TableEndpoint=http://127.0.0.1:{}/devstoreaccount1",
            self.port
        )
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn scripts_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts")
}

fn run_script(name: &str) {
    let path = scripts_dir().join(format!("{name}.test"));
    let mut runner = ScriptRunner::default();
    if let Err(e) = goldenscript::run(&mut runner, &path) {
        panic!("{}: {e}", path.display());
    }
}

/// A script file that no test runs would never be checked.
#[test]
fn every_script_has_a_test() {
    let mut found: Vec<String> = std::fs::read_dir(scripts_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut listed: Vec<String> = SCRIPTS.iter().map(|s| format!("{s}.test")).collect();
    listed.sort();
    assert_eq!(
        found, listed,
        "every file in tests/scripts/ is NAME.test with NAME in the scripts! list of tests/e2e/scripts.rs"
    );
}

/// Runs a script's commands on a server of its own.
#[derive(Default)]
struct ScriptRunner {
    /// Serve on the Azure backend over this connection string.
    azure: Option<String>,
    server: Option<TestServer>,
    _data: Option<tempfile::TempDir>,
    /// Sessions by prefix ("" for commands without one).
    sessions: BTreeMap<String, Session>,
}

impl goldenscript::Runner for ScriptRunner {
    type Command = goldenscript::Command;

    fn start_script(&mut self) -> Result<(), Box<dyn Error>> {
        let data = tempfile::tempdir()?;
        let mut args = vec!["--throttle", "off"];
        if let Some(conn) = &self.azure {
            args.extend(["--backend", "azure", "--azure-connection-string", conn]);
        }
        self.server = Some(TestServer::serve_in(data.path(), &args));
        self._data = Some(data);
        Ok(())
    }

    fn end_script(&mut self) -> Result<(), Box<dyn Error>> {
        self.sessions.clear();
        self.server = None;
        Ok(())
    }

    fn run(
        &mut self,
        command: &goldenscript::Command,
        context: &goldenscript::Context,
    ) -> Result<String, Box<dyn Error>> {
        let prefix = context.prefix.clone().unwrap_or_default();
        if !self.sessions.contains_key(&prefix) {
            let port = self.server.as_ref().ok_or("no server")?.port;
            let mut session = Session::connect(port)?;
            // On Azure, a statement stalled behind another session fails
            // the script instead of passing slowly after a retry.
            if self.azure.is_some() {
                session.simple("SET statement_timeout = '20s'")?;
            }
            self.sessions.insert(prefix.clone(), session);
        }
        let session = self.sessions.get_mut(&prefix).unwrap();
        let mut tags = context.tags.clone();
        let extended = tags.remove("extended");
        if let Some(tag) = tags.first() {
            return Err(format!("unknown tag [{tag}]").into());
        }
        if command.name == "execute" {
            let mut args = command.consume_args();
            let sql = args.next_pos().ok_or("execute \"SQL\" PARAM...")?;
            let params: Vec<Option<&str>> = std::iter::from_fn(|| args.next_pos())
                .map(|p| (p != "NULL").then_some(p))
                .collect();
            args.reject_next()?;
            return session.extended(sql, &params);
        }
        if !command.args.is_empty() {
            return Err(format!(
                "write SQL as a literal line, `> {}`, so that it is not parsed as arguments",
                command.name
            )
            .into());
        }
        if extended {
            session.extended(&command.name, &[])
        } else {
            session.simple(&command.name)
        }
    }
}

/// One connection speaking the PostgreSQL protocol (version 3.0), text
/// format only.
struct Session {
    write: TcpStream,
    read: BufReader<TcpStream>,
}

/// A backend message: its type byte and body.
struct Message {
    kind: u8,
    body: Vec<u8>,
}

/// Reads the fields of a message body in order.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn u8(&mut self) -> Result<u8, Box<dyn Error>> {
        let (&b, rest) = self.0.split_first().ok_or("message too short")?;
        self.0 = rest;
        Ok(b)
    }

    fn i16(&mut self) -> Result<i16, Box<dyn Error>> {
        let (b, rest) = self.0.split_at_checked(2).ok_or("message too short")?;
        self.0 = rest;
        Ok(i16::from_be_bytes(b.try_into().unwrap()))
    }

    fn i32(&mut self) -> Result<i32, Box<dyn Error>> {
        let (b, rest) = self.0.split_at_checked(4).ok_or("message too short")?;
        self.0 = rest;
        Ok(i32::from_be_bytes(b.try_into().unwrap()))
    }

    fn cstr(&mut self) -> Result<String, Box<dyn Error>> {
        let end = self
            .0
            .iter()
            .position(|&b| b == 0)
            .ok_or("unterminated string")?;
        let s = String::from_utf8(self.0[..end].to_vec())?;
        self.0 = &self.0[end + 1..];
        Ok(s)
    }

    fn bytes(&mut self, n: usize) -> Result<&[u8], Box<dyn Error>> {
        let (b, rest) = self.0.split_at_checked(n).ok_or("message too short")?;
        self.0 = rest;
        Ok(b)
    }
}

fn cstr(buf: &mut Vec<u8>, s: &str) {
    buf.extend_from_slice(s.as_bytes());
    buf.push(0);
}

/// An open result set: its columns and the rows so far.
struct Table {
    columns: Vec<String>,
    /// Columns of a number type, right-aligned as psql does.
    numeric: Vec<bool>,
    rows: Vec<Vec<Option<String>>>,
}

impl Session {
    fn connect(port: u16) -> Result<Session, Box<dyn Error>> {
        let write = TcpStream::connect(("127.0.0.1", port))?;
        write.set_read_timeout(Some(Duration::from_secs(120)))?;
        write.set_nodelay(true)?;
        let mut s = Session {
            read: BufReader::new(write.try_clone()?),
            write,
        };
        let mut body = 196_608i32.to_be_bytes().to_vec(); // protocol 3.0
        for (k, v) in [
            ("user", "tablegate"),
            ("database", "tablegate"),
            ("application_name", "scripts"),
        ] {
            cstr(&mut body, k);
            cstr(&mut body, v);
        }
        body.push(0);
        let len = i32::try_from(body.len() + 4)?;
        s.write.write_all(&len.to_be_bytes())?;
        s.write.write_all(&body)?;
        loop {
            let m = s.recv()?;
            match m.kind {
                b'R' => {
                    let code = Fields(&m.body).i32()?;
                    if code != 0 {
                        return Err(format!("authentication request {code}: not supported").into());
                    }
                }
                b'E' => return Err(notice_text(&m.body)?.into()),
                b'Z' => return Ok(s),
                _ => {} // ParameterStatus, BackendKeyData, notices
            }
        }
    }

    fn send(&mut self, kind: u8, body: &[u8]) -> Result<(), Box<dyn Error>> {
        let mut msg = Vec::with_capacity(body.len() + 5);
        msg.push(kind);
        msg.extend_from_slice(&i32::try_from(body.len() + 4)?.to_be_bytes());
        msg.extend_from_slice(body);
        self.write.write_all(&msg)?;
        Ok(())
    }

    fn recv(&mut self) -> Result<Message, Box<dyn Error>> {
        let mut head = [0u8; 5];
        self.read.read_exact(&mut head)?;
        let len = i32::from_be_bytes(head[1..].try_into().unwrap());
        let mut body = vec![0u8; usize::try_from(len)? - 4];
        self.read.read_exact(&mut body)?;
        Ok(Message {
            kind: head[0],
            body,
        })
    }

    /// Runs a query string with the simple query protocol.
    fn simple(&mut self, sql: &str) -> Result<String, Box<dyn Error>> {
        let mut body = Vec::new();
        cstr(&mut body, sql);
        self.send(b'Q', &body)?;
        self.results()
    }

    /// Runs one statement with the extended protocol and text parameters.
    fn extended(&mut self, sql: &str, params: &[Option<&str>]) -> Result<String, Box<dyn Error>> {
        let mut parse = Vec::new();
        cstr(&mut parse, ""); // the unnamed statement
        cstr(&mut parse, sql);
        parse.extend_from_slice(&0i16.to_be_bytes()); // parameter types from context
        self.send(b'P', &parse)?;

        let mut bind = Vec::new();
        cstr(&mut bind, ""); // the unnamed portal
        cstr(&mut bind, "");
        bind.extend_from_slice(&0i16.to_be_bytes()); // parameters in text
        bind.extend_from_slice(&i16::try_from(params.len())?.to_be_bytes());
        for p in params {
            match p {
                None => bind.extend_from_slice(&(-1i32).to_be_bytes()),
                Some(v) => {
                    bind.extend_from_slice(&i32::try_from(v.len())?.to_be_bytes());
                    bind.extend_from_slice(v.as_bytes());
                }
            }
        }
        bind.extend_from_slice(&0i16.to_be_bytes()); // results in text
        self.send(b'B', &bind)?;

        let mut describe = vec![b'P'];
        cstr(&mut describe, "");
        self.send(b'D', &describe)?;
        let mut execute = Vec::new();
        cstr(&mut execute, "");
        execute.extend_from_slice(&0i32.to_be_bytes()); // every row
        self.send(b'E', &execute)?;
        self.send(b'S', &[])?;
        self.results()
    }

    /// Reads and renders everything up to ReadyForQuery.
    fn results(&mut self) -> Result<String, Box<dyn Error>> {
        let mut out = String::new();
        let mut table: Option<Table> = None;
        loop {
            let m = self.recv()?;
            let mut f = Fields(&m.body);
            match m.kind {
                b'T' => {
                    let n = f.i16()?;
                    let mut columns = Vec::new();
                    let mut numeric = Vec::new();
                    for _ in 0..n {
                        columns.push(f.cstr()?);
                        f.bytes(6)?; // table and attribute
                        // int8, int2, int4, oid, float4, float8, numeric
                        numeric.push(matches!(f.i32()?, 20 | 21 | 23 | 26 | 700 | 701 | 1700));
                        f.bytes(8)?; // size, modifier, format
                    }
                    table = Some(Table {
                        columns,
                        numeric,
                        rows: Vec::new(),
                    });
                }
                b'D' => {
                    let n = f.i16()?;
                    let mut row = Vec::new();
                    for _ in 0..n {
                        let len = f.i32()?;
                        row.push(if len < 0 {
                            None
                        } else {
                            let b = f.bytes(usize::try_from(len)?)?;
                            Some(String::from_utf8_lossy(b).into_owned())
                        });
                    }
                    table
                        .as_mut()
                        .ok_or("DataRow without RowDescription")?
                        .rows
                        .push(row);
                }
                b'C' => {
                    let tag = f.cstr()?;
                    let described = table.is_some();
                    if let Some(t) = table.take() {
                        render(&t, &mut out);
                    }
                    let read = tag.starts_with("SELECT ") || tag == "SHOW" || tag == "EXPLAIN";
                    if !(described && read) {
                        writeln!(out, "{tag}")?;
                    }
                }
                // As psql does, an error discards the result it ends.
                b'E' => {
                    table = None;
                    writeln!(out, "{}", notice_text(&m.body)?)?;
                }
                // A notice during a result shows before the result's table.
                b'N' => writeln!(out, "{}", notice_text(&m.body)?)?,
                b'I' => writeln!(out, "(empty query)")?,
                b's' => {
                    if let Some(t) = table.take() {
                        render(&t, &mut out);
                    }
                    writeln!(out, "(portal suspended)")?;
                }
                b'G' => {
                    // COPY FROM STDIN: scripts have no data to send.
                    let mut fail = Vec::new();
                    cstr(&mut fail, "script tests send no COPY data");
                    self.send(b'f', &fail)?;
                }
                b'd' => {
                    let line = String::from_utf8_lossy(&m.body);
                    out.push_str(&line);
                    if !line.ends_with('\n') {
                        out.push('\n');
                    }
                }
                b'Z' => {
                    if let Some(t) = table.take() {
                        render(&t, &mut out);
                    }
                    return Ok(out);
                }
                // ParseComplete, BindComplete, NoData, ParameterStatus,
                // CopyOutResponse, CopyDone, NotificationResponse.
                _ => {}
            }
        }
    }
}

/// An ErrorResponse or NoticeResponse: `ERROR 42P01: message`, then its
/// DETAIL and HINT lines. Notices without a SQLSTATE of their own
/// (00000) show none.
fn notice_text(body: &[u8]) -> Result<String, Box<dyn Error>> {
    let mut f = Fields(body);
    let mut fields = BTreeMap::new();
    loop {
        let kind = f.u8()?;
        if kind == 0 {
            break;
        }
        fields.insert(kind, f.cstr()?);
    }
    let get = |k: u8| fields.get(&k).map(String::as_str).unwrap_or("");
    let severity = fields.get(&b'V').or(fields.get(&b'S')).map(String::as_str);
    let mut s = severity.unwrap_or("ERROR").to_owned();
    if !matches!(get(b'C'), "" | "00000") {
        write!(s, " {}", get(b'C'))?;
    }
    write!(s, ": {}", get(b'M'))?;
    for (k, label) in [(b'D', "DETAIL"), (b'H', "HINT")] {
        if let Some(v) = fields.get(&k) {
            write!(s, "\n{label}: {v}")?;
        }
    }
    Ok(s)
}

/// Rows as psql aligns them (numbers to the right, NULL spelled out,
/// no trailing blanks), or EXPLAIN's plan as its lines.
fn render(t: &Table, out: &mut String) {
    if t.columns == ["QUERY PLAN"] {
        for row in &t.rows {
            for line in row[0].as_deref().unwrap_or("NULL").lines() {
                out.push_str(line.trim_end());
                out.push('\n');
            }
        }
        return;
    }
    let cell = |v: &Option<String>| match v {
        None => "NULL".to_owned(),
        Some(v) => v.replace('\n', "\\n"),
    };
    let rows: Vec<Vec<String>> = t
        .rows
        .iter()
        .map(|r| r.iter().map(cell).collect())
        .collect();
    // At least 2 wide, so that a rule is never `---`, the script separator.
    let mut widths: Vec<usize> = t.columns.iter().map(|c| c.chars().count().max(2)).collect();
    for r in &rows {
        for (w, v) in widths.iter_mut().zip(r) {
            *w = (*w).max(v.chars().count());
        }
    }
    let line = |cells: &[String], header: bool, out: &mut String| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .zip(&t.numeric)
            .map(|((c, &w), &num)| {
                if header {
                    let left = (w - c.chars().count()) / 2;
                    format!(" {:left$}{c:<rest$} ", "", rest = w - left)
                } else if num {
                    format!(" {c:>w$} ")
                } else {
                    format!(" {c:<w$} ")
                }
            })
            .collect();
        out.push_str(padded.join("|").trim_end());
        out.push('\n');
    };
    line(&t.columns, true, out);
    let rule: Vec<String> = widths.iter().map(|&w| "-".repeat(w + 2)).collect();
    out.push_str(&rule.join("+"));
    out.push('\n');
    for r in &rows {
        line(r, false, out);
    }
}
