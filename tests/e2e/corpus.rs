//! An external corpus, run differentially: sqllogictest files (SQLite's
//! `select1.test` … `select5.test`, DataFusion's `.slt` files) parsed with
//! the `sqllogictest` crate, every statement and query run in PostgreSQL 15
//! and in tablegate, and the two answers compared. The files' own expected
//! results are not used (SQLite's and DataFusion's semantics are not
//! PostgreSQL's): PostgreSQL is the reference.
//!
//! Per record:
//! - `skipif` / `onlyif` are honoured with this engine's labels
//!   (`postgresql`, and DataFusion's spelling `postgres`).
//! - Each record runs in PostgreSQL first (simple query protocol, text
//!   results). If PostgreSQL refuses it, the record is skipped and not sent
//!   to tablegate (counted as "skipped: PostgreSQL error").
//! - Otherwise it runs in tablegate, and the answers are compared after the
//!   record's sort mode (`rowsort`, `valuesort`, `nosort`). A difference is
//!   classed (see [`Class`]): wrong rows first, then errors, then values that
//!   are equal as numbers but rendered differently.
//! - Tables with names of fewer than 3 characters (`t1`, `t`) are renamed
//!   `slt_t1` in every statement, on both sides: tablegate's table names
//!   have 3 to 63 characters. Nothing else in the SQL is changed.
//!
//! What runs (tests/corpus/README.md has the details):
//! - by default, the CI subset listed in `tests/corpus/subset.txt`, with a
//!   minimum of passing records per file; the test fails below it, or when a
//!   wrong result (wrong rows, columns, row count or order) appears that is
//!   not listed in `tests/corpus/known.txt`;
//! - `TABLEGATE_CORPUS=all`: every committed DataFusion file and every
//!   SQLite `.test` file found (tests/corpus/run.sh), reporting only;
//! - `TABLEGATE_CORPUS_FILES=a,b:300`: those files (`:N`, the first N
//!   records), reporting only.
//!
//! SQLite's files are looked up in `TABLEGATE_CORPUS_SQLITE`, else in
//! `../shared/sqllogictest` beside the repository. Where they are missing,
//! their entries of the subset are reported as not found and skipped.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sqllogictest::{DefaultColumnType, Record, SortMode};
use tokio_postgres::{Client, SimpleQueryMessage};

use super::pgref::{PgRef, client};
use super::server::TestServer;

/// The labels this engine answers to in `skipif` / `onlyif`.
const LABELS: &[&str] = &["postgresql", "postgres"];

/// Per record, on either side (PostgreSQL also has `statement_timeout`).
const TIMEOUT_CI: Duration = Duration::from_secs(10);
const TIMEOUT_ALL: Duration = Duration::from_secs(30);

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

/// Where SQLite's `select*.test` files are, if anywhere.
fn sqlite_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("TABLEGATE_CORPUS_SQLITE") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/sqllogictest"),
    };
    dir.is_dir().then_some(dir)
}

/// A corpus file: its id (`sqlite/select1.test`, `datafusion/joins.slt`),
/// where it is, and how many records of it to run.
#[derive(Debug, Clone)]
struct CorpusFile {
    id: String,
    path: Option<PathBuf>,
    limit: Option<usize>,
    /// The minimum of passing records (the CI subset only).
    min_pass: Option<usize>,
}

fn resolve(id: &str) -> Option<PathBuf> {
    let path = match id.strip_prefix("sqlite/") {
        Some(name) => sqlite_dir()?.join(name),
        None => corpus_dir().join(id),
    };
    path.is_file().then_some(path)
}

/// `tests/corpus/subset.txt`: `file records|all min-passed` per line.
fn subset() -> Vec<CorpusFile> {
    let text = std::fs::read_to_string(corpus_dir().join("subset.txt")).unwrap();
    text.lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 3, "subset.txt: want `file records min`: {l}");
            CorpusFile {
                id: f[0].to_owned(),
                path: resolve(f[0]),
                limit: (f[1] != "all").then(|| f[1].parse().unwrap()),
                min_pass: Some(f[2].parse().unwrap()),
            }
        })
        .collect()
}

/// Every committed DataFusion file and every SQLite file found.
fn whole() -> Vec<CorpusFile> {
    let mut ids = Vec::new();
    for (prefix, dir) in [
        ("datafusion", Some(corpus_dir().join("datafusion"))),
        ("sqlite", sqlite_dir()),
    ] {
        let Some(dir) = dir else {
            println!("corpus: no {prefix} files (see tests/corpus/README.md)");
            continue;
        };
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.ends_with(".slt") || n.ends_with(".test"))
            .collect();
        names.sort();
        ids.extend(names.into_iter().map(|n| format!("{prefix}/{n}")));
    }
    ids.into_iter()
        .map(|id| CorpusFile {
            path: resolve(&id),
            id,
            limit: None,
            min_pass: None,
        })
        .collect()
}

/// `TABLEGATE_CORPUS_FILES=sqlite/select1.test:300,datafusion/joins.slt`.
fn listed(list: &str) -> Vec<CorpusFile> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (id, limit) = match s.rsplit_once(':') {
                Some((id, n)) if n.parse::<usize>().is_ok() => (id, n.parse().ok()),
                _ => (s, None),
            };
            CorpusFile {
                id: id.to_owned(),
                path: resolve(id),
                limit,
                min_pass: None,
            }
        })
        .collect()
}

/// `tests/corpus/known.txt`: `record-id class` per line; the wrong results
/// the CI subset tolerates.
fn known() -> HashSet<(String, String)> {
    let text = std::fs::read_to_string(corpus_dir().join("known.txt")).unwrap();
    text.lines()
        .map(|l| l.split('#').next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (id, class) = l.split_once(char::is_whitespace).unwrap();
            (id.to_owned(), class.trim().to_owned())
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Renaming short table names.

/// A token of SQL text: an identifier (bare or double-quoted) or anything
/// else (string literals and comments are never identifiers).
#[derive(Debug, PartialEq)]
enum Tok<'a> {
    Ident(&'a str),
    Quoted(&'a str),
    Other(&'a str),
}

fn tokens(sql: &str) -> Vec<Tok<'_>> {
    let b = sql.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let c = b[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'$') {
                i += 1;
            }
            out.push(Tok::Ident(&sql[start..i]));
        } else if c == b'"' || c == b'\'' {
            i += 1;
            loop {
                match b.get(i) {
                    None => break,
                    Some(&q) if q == c => {
                        if b.get(i + 1) == Some(&c) {
                            i += 2;
                        } else {
                            i += 1;
                            break;
                        }
                    }
                    Some(_) => i += 1,
                }
            }
            let text = &sql[start..i];
            out.push(if c == b'"' {
                Tok::Quoted(text)
            } else {
                Tok::Other(text)
            });
        } else if c == b'-' && b.get(i + 1) == Some(&b'-') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            out.push(Tok::Other(&sql[start..i]));
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.') {
                i += 1;
            }
            out.push(Tok::Other(&sql[start..i]));
        } else {
            // One character (UTF-8 aware).
            let len = sql[i..].chars().next().unwrap().len_utf8();
            i += len;
            out.push(Tok::Other(&sql[start..i]));
        }
    }
    out
}

/// The tables (and views) with names too short for tablegate, renamed
/// `slt_<name>` in every statement of a file, on both sides.
#[derive(Debug, Default)]
struct Renamer {
    short: HashSet<String>,
}

impl Renamer {
    /// Notes the table a CREATE TABLE / VIEW names, if its name is short.
    fn learn(&mut self, sql: &str) {
        let words: Vec<String> = tokens(sql)
            .into_iter()
            .filter_map(|t| match t {
                Tok::Ident(s) => Some(s.to_ascii_lowercase()),
                Tok::Quoted(s) => Some(s.trim_matches('"').to_owned()),
                Tok::Other(s) if s.trim().is_empty() => None,
                Tok::Other(s) => Some(s.to_owned()),
            })
            .collect();
        let mut w = words.iter().map(String::as_str).peekable();
        if w.next() != Some("create") {
            return;
        }
        let mut next = w.next();
        if next == Some("or") {
            w.next();
            next = w.next();
        }
        while matches!(
            next,
            Some("temp" | "temporary" | "external" | "unlogged" | "global" | "local")
        ) {
            next = w.next();
        }
        if !matches!(next, Some("table" | "view")) {
            return;
        }
        let mut name = w.next();
        if name == Some("if") {
            w.next();
            w.next();
            name = w.next();
        }
        if let Some(n) = name
            && n.chars().count() < 3
            && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && w.peek() != Some(&".")
        {
            self.short.insert(n.to_owned());
        }
    }

    fn apply(&self, sql: &str) -> String {
        if self.short.is_empty() {
            return sql.to_owned();
        }
        let mut out = String::with_capacity(sql.len() + 16);
        for t in tokens(sql) {
            match t {
                Tok::Ident(s) if self.short.contains(&s.to_ascii_lowercase()) => {
                    write!(out, "slt_{}", s.to_ascii_lowercase()).unwrap();
                }
                Tok::Quoted(s) if self.short.contains(s.trim_matches('"')) => {
                    write!(out, "\"slt_{}\"", s.trim_matches('"')).unwrap();
                }
                Tok::Ident(s) | Tok::Quoted(s) | Tok::Other(s) => out.push_str(s),
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------
// Answers and their comparison.

/// What one side answered: the last result set's columns and rows in text
/// (NULL as `NULL`, the empty string as `(empty)`), and the last command's
/// row count.
#[derive(Debug, Clone, Default, PartialEq)]
struct Answer {
    columns: usize,
    /// Column names (empty when the answer has no rows description).
    names: Vec<String>,
    rows: Vec<Vec<String>>,
    affected: Option<u64>,
}

#[derive(Debug, Clone, PartialEq)]
enum Failure {
    Db {
        code: String,
        message: String,
    },
    Timeout,
    /// Not a server error: the connection broke.
    Lost(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Db { code, message } => write!(f, "ERROR {code}: {message}"),
            Failure::Timeout => write!(f, "timeout"),
            Failure::Lost(e) => write!(f, "connection lost: {e}"),
        }
    }
}

fn render(v: Option<&str>) -> String {
    match v {
        None => "NULL".to_owned(),
        Some("") => "(empty)".to_owned(),
        Some(s) => s.to_owned(),
    }
}

async fn run_sql(c: &Client, sql: &str, timeout: Duration) -> Result<Answer, Failure> {
    let msgs = match tokio::time::timeout(timeout, c.simple_query(sql)).await {
        Err(_) => {
            let _ = c.cancel_token().cancel_query(tokio_postgres::NoTls).await;
            return Err(Failure::Timeout);
        }
        Ok(Err(e)) => {
            return Err(match e.as_db_error() {
                Some(d) => Failure::Db {
                    code: d.code().code().to_owned(),
                    message: d.message().to_owned(),
                },
                None => Failure::Lost(e.to_string()),
            });
        }
        Ok(Ok(m)) => m,
    };
    let mut a = Answer::default();
    for m in msgs {
        match m {
            SimpleQueryMessage::RowDescription(cols) => {
                a.columns = cols.len();
                a.names = cols.iter().map(|c| c.name().to_owned()).collect();
                a.rows.clear();
            }
            SimpleQueryMessage::Row(r) => {
                a.columns = r.len();
                a.rows
                    .push((0..r.len()).map(|i| render(r.get(i))).collect());
            }
            SimpleQueryMessage::CommandComplete(n) => a.affected = Some(n),
            _ => {}
        }
    }
    Ok(a)
}

/// The class of a difference, most severe first.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Class {
    /// Different rows or values (beyond float rounding) or row counts.
    WrongRows,
    WrongColumns,
    /// A statement's row count (INSERT/UPDATE/DELETE n) differs.
    WrongCount,
    /// Same rows, and the ORDER BY keys come out in a different order.
    WrongOrder,
    /// Same rows in another order under a non-positional ORDER BY: the
    /// runner cannot tell ties from a wrong order.
    OrderUnverified,
    Timeout,
    /// tablegate refused what PostgreSQL ran: SQLSTATE and the message's
    /// first words.
    Error(String),
    Lost,
    /// Equal as numbers (relative 1e-9), rendered differently: a numeric
    /// column answered as a float, or digits of float rounding.
    NumericText,
}

impl Class {
    fn name(&self) -> String {
        match self {
            Class::WrongRows => "wrong-rows".into(),
            Class::WrongColumns => "wrong-columns".into(),
            Class::WrongCount => "wrong-count".into(),
            Class::WrongOrder => "wrong-order".into(),
            Class::OrderUnverified => "order-unverified".into(),
            Class::Timeout => "timeout".into(),
            Class::Error(e) => format!("error {e}"),
            Class::Lost => "connection-lost".into(),
            Class::NumericText => "numeric-text".into(),
        }
    }

    /// A wrong result, as opposed to a refusal or a rendering.
    fn is_wrong_result(&self) -> bool {
        matches!(
            self,
            Class::WrongRows | Class::WrongColumns | Class::WrongCount | Class::WrongOrder
        )
    }
}

/// An error's class: the SQLSTATE and the message's first words, with
/// quoted names and numbers blanked so that one cause is one class.
fn error_class(f: &Failure) -> Class {
    match f {
        Failure::Timeout => Class::Timeout,
        Failure::Lost(_) => Class::Lost,
        Failure::Db { code, message } => {
            let mut m = String::new();
            for t in tokens(message) {
                match t {
                    Tok::Quoted(_) => m.push_str("\"…\""),
                    Tok::Other(s) if s.starts_with('\'') => m.push_str("'…'"),
                    Tok::Other(s) if s.starts_with(|c: char| c.is_ascii_digit()) => m.push('N'),
                    Tok::Ident(s) | Tok::Other(s) => m.push_str(s),
                }
            }
            let words: Vec<&str> = m
                .split(|c: char| c.is_whitespace() || c == ':' || c == '(')
                .filter(|w| !w.is_empty())
                .take(6)
                .collect();
            Class::Error(format!("{code} {}", words.join(" ")))
        }
    }
}

/// A value as a number for the loose comparison: equal floats print alike.
fn loose(v: &str) -> String {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && v.bytes().any(|b| b.is_ascii_digit()) => {
            if x == x.trunc() && x.abs() < 1e15 {
                format!("{}", x as i64)
            } else {
                format!("{x:.9e}")
            }
        }
        _ => v.to_owned(),
    }
}

fn sorted(mode: SortMode, rows: &[Vec<String>]) -> Vec<Vec<String>> {
    match mode {
        SortMode::NoSort => rows.to_vec(),
        SortMode::RowSort => {
            let mut r = rows.to_vec();
            r.sort();
            r
        }
        SortMode::ValueSort => {
            let mut v: Vec<String> = rows.iter().flatten().cloned().collect();
            v.sort();
            v.into_iter().map(|x| vec![x]).collect()
        }
    }
}

fn loosen(rows: &[Vec<String>]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| r.iter().map(|v| loose(v)).collect())
        .collect()
}

/// The top-level ORDER BY of a query, if any: `Some(Some(columns))` when
/// every key is a column position (`ORDER BY 1, 3 DESC`), `Some(None)` when
/// some key is an expression.
fn order_by(sql: &str) -> Option<Option<Vec<usize>>> {
    let toks: Vec<Tok> = tokens(sql);
    let mut depth = 0i32;
    let mut at = None;
    for (i, t) in toks.iter().enumerate() {
        match t {
            Tok::Other("(") => depth += 1,
            Tok::Other(")") => depth -= 1,
            Tok::Ident(s) if depth == 0 && s.eq_ignore_ascii_case("order") => {
                let by = toks[i + 1..]
                    .iter()
                    .find(|t| !matches!(t, Tok::Other(s) if s.trim().is_empty()));
                if matches!(by, Some(Tok::Ident(b)) if b.eq_ignore_ascii_case("by")) {
                    at = Some(i);
                }
            }
            _ => {}
        }
    }
    let at = at?;
    let mut keys: Vec<Option<usize>> = Vec::new();
    let mut key = String::new();
    let mut depth = 0i32;
    let after_by = toks[at + 1..]
        .iter()
        .skip_while(|t| !matches!(t, Tok::Ident(b) if b.eq_ignore_ascii_case("by")))
        .skip(1);
    for t in after_by {
        match t {
            Tok::Ident(s)
                if depth == 0
                    && ["limit", "offset", "fetch", "for"]
                        .iter()
                        .any(|k| s.eq_ignore_ascii_case(k)) =>
            {
                break;
            }
            Tok::Other(",") if depth == 0 => keys.push(position(&std::mem::take(&mut key))),
            Tok::Other(";") if depth == 0 => break,
            Tok::Other(s) => {
                if *s == "(" {
                    depth += 1;
                } else if *s == ")" {
                    depth -= 1;
                }
                key.push_str(s);
            }
            Tok::Ident(s) | Tok::Quoted(s) => key.push_str(s),
        }
    }
    keys.push(position(&key));
    Some(keys.into_iter().collect())
}

/// An ORDER BY key's column position (`2 DESC NULLS FIRST` is 2).
fn position(key: &str) -> Option<usize> {
    let mut words: Vec<&str> = key.split_whitespace().collect();
    while words.last().is_some_and(|w| {
        ["asc", "desc", "nulls", "first", "last"]
            .iter()
            .any(|k| w.eq_ignore_ascii_case(k))
    }) {
        words.pop();
    }
    match words.as_slice() {
        [n] => n.parse().ok(),
        _ => None,
    }
}

/// An EXPLAIN statement.
fn is_explain(sql: &str) -> bool {
    sql.trim_start()
        .get(..7)
        .is_some_and(|w| w.eq_ignore_ascii_case("explain"))
}

/// tablegate's answer without the `timestamp` system columns that `*`
/// includes (SPEC: "timestamp (timestamptz, part of `*`)") when
/// PostgreSQL's answer has fewer columns and none of that name.
fn without_system_timestamp(pg: &Answer, mut tg: Answer) -> Answer {
    let extra: Vec<usize> = tg
        .names
        .iter()
        .enumerate()
        .filter(|(_, n)| *n == "timestamp")
        .map(|(i, _)| i)
        .collect();
    if extra.is_empty()
        || pg.names.iter().any(|n| n == "timestamp")
        || pg.columns + extra.len() != tg.columns
    {
        return tg;
    }
    let keep = |row: &Vec<String>| -> Vec<String> {
        row.iter()
            .enumerate()
            .filter(|(i, _)| !extra.contains(i))
            .map(|(_, v)| v.clone())
            .collect()
    };
    tg.rows = tg.rows.iter().map(keep).collect();
    tg.names = keep(&tg.names);
    tg.columns = pg.columns;
    tg
}

/// Compares tablegate's answer with PostgreSQL's after the record's sort
/// mode; `None` when they agree.
fn compare(sql: &str, mode: SortMode, pg: &Answer, tg: &Answer) -> Option<Class> {
    if pg.columns != tg.columns {
        return Some(Class::WrongColumns);
    }
    if sorted(mode, &pg.rows) == sorted(mode, &tg.rows) {
        return None;
    }
    let (lp, lt) = (loosen(&pg.rows), loosen(&tg.rows));
    if sorted(mode, &lp) == sorted(mode, &lt) {
        return Some(Class::NumericText);
    }
    let (rp, rt) = (
        sorted(SortMode::RowSort, &lp),
        sorted(SortMode::RowSort, &lt),
    );
    if mode != SortMode::NoSort || rp != rt {
        return Some(Class::WrongRows);
    }
    // The same rows in another order.
    let strict_same = sorted(SortMode::RowSort, &pg.rows) == sorted(SortMode::RowSort, &tg.rows);
    let ties_only = || (!strict_same).then_some(Class::NumericText);
    match order_by(sql) {
        // No ORDER BY: no order is promised.
        None => ties_only(),
        Some(Some(keys)) if keys.iter().all(|k| (1..=pg.columns).contains(k)) => {
            let project = |rows: &[Vec<String>]| -> Vec<Vec<String>> {
                rows.iter()
                    .map(|r| keys.iter().map(|&k| r[k - 1].clone()).collect())
                    .collect()
            };
            if project(&lp) == project(&lt) {
                ties_only()
            } else {
                Some(Class::WrongOrder)
            }
        }
        Some(_) => Some(Class::OrderUnverified),
    }
}

// ---------------------------------------------------------------------------
// Running files.

/// A difference found.
#[derive(Debug, Clone)]
struct Diff {
    id: String,
    class: Class,
    sql: String,
    pg: String,
    tg: String,
}

#[derive(Debug, Default)]
struct FileReport {
    id: String,
    found: bool,
    /// Statements and queries in the part of the file that ran.
    records: usize,
    passed: usize,
    skipped_condition: usize,
    skipped_pg: usize,
    /// EXPLAIN records (plans differ by design).
    skipped_explain: usize,
    /// PostgreSQL's SQLSTATEs of the skipped records.
    pg_errors: BTreeMap<String, usize>,
    /// Not run: tablegate's connection was lost.
    not_run: usize,
    diffs: Vec<Diff>,
    elapsed: Duration,
}

fn show_answer(r: &Result<Answer, Failure>) -> String {
    match r {
        Err(f) => f.to_string(),
        Ok(a) if a.columns == 0 => format!("ok ({})", a.affected.unwrap_or(0)),
        Ok(a) => {
            let mut s = format!("{} rows:", a.rows.len());
            for (i, r) in a.rows.iter().enumerate() {
                if i == 20 {
                    write!(s, " …").unwrap();
                    break;
                }
                write!(s, " [{}]", r.join(", ")).unwrap();
            }
            s
        }
    }
}

fn skip(conditions: &[sqllogictest::Condition]) -> bool {
    conditions.iter().any(|c| match c {
        sqllogictest::Condition::OnlyIf { label } => !LABELS.contains(&label.as_str()),
        sqllogictest::Condition::SkipIf { label } => LABELS.contains(&label.as_str()),
    })
}

async fn run_file(
    pg: &PgRef,
    admin: &Client,
    n: usize,
    f: &CorpusFile,
    timeout: Duration,
) -> FileReport {
    let started = Instant::now();
    let mut rep = FileReport {
        id: f.id.clone(),
        ..FileReport::default()
    };
    let Some(path) = &f.path else {
        return rep;
    };
    rep.found = true;
    let text = std::fs::read_to_string(path).unwrap();
    let records = sqllogictest::parse_with_name::<DefaultColumnType>(&text, f.id.as_str())
        .unwrap_or_else(|e| panic!("{}: {e}", f.id));

    let db = format!("corpus_{n}");
    // One statement per message: neither may run in a transaction block.
    for sql in [
        format!("DROP DATABASE IF EXISTS {db}"),
        format!("CREATE DATABASE {db}"),
    ] {
        admin.batch_execute(&sql).await.unwrap();
    }
    let p = client(&format!(
        "host=127.0.0.1 port={} user=postgres dbname={db}",
        pg.port()
    ))
    .await;
    p.batch_execute(&format!(
        "SET TimeZone = 'UTC'; SET statement_timeout = '{}s'",
        timeout.as_secs()
    ))
    .await
    .unwrap();
    let server = TestServer::demo(&["--throttle", "off", "--runners", "1"]);
    let mut t = client(&server.conn_str()).await;
    let mut renamer = Renamer::default();
    let mut lost = false;

    for rec in records {
        let (loc, conditions, sql, mode) = match rec {
            Record::Statement {
                loc,
                conditions,
                sql,
                ..
            } => (loc, conditions, sql, None),
            Record::Query {
                loc,
                conditions,
                sql,
                expected,
                ..
            } => {
                let mode = match expected {
                    sqllogictest::QueryExpect::Results { sort_mode, .. } => {
                        sort_mode.unwrap_or(SortMode::NoSort)
                    }
                    sqllogictest::QueryExpect::Error(_) => SortMode::NoSort,
                };
                (loc, conditions, sql, Some(mode))
            }
            _ => continue,
        };
        if f.limit.is_some_and(|l| rep.records >= l) {
            break;
        }
        rep.records += 1;
        if skip(&conditions) {
            rep.skipped_condition += 1;
            continue;
        }
        if lost {
            rep.not_run += 1;
            continue;
        }
        let id = format!("{}:{}", f.id, loc.line());
        renamer.learn(&sql);
        let sql = renamer.apply(&sql);
        let want = run_sql(&p, &sql, timeout + Duration::from_secs(5)).await;
        let want = match want {
            Ok(a) => a,
            Err(e) => {
                rep.skipped_pg += 1;
                let code = match e {
                    Failure::Db { code, .. } => code,
                    other => other.to_string(),
                };
                *rep.pg_errors.entry(code).or_default() += 1;
                continue;
            }
        };
        if is_explain(&sql) {
            // Plans differ by design: neither side's is the reference.
            rep.skipped_explain += 1;
            continue;
        }
        let got = run_sql(&t, &sql, timeout)
            .await
            .map(|g| without_system_timestamp(&want, g));
        let class = match (&got, mode) {
            (Err(e), _) => Some(error_class(e)),
            (Ok(g), None) => (g.affected != want.affected).then_some(Class::WrongCount),
            (Ok(g), Some(mode)) => compare(&sql, mode, &want, g),
        };
        match class {
            None => rep.passed += 1,
            Some(class) => {
                if matches!(class, Class::Timeout | Class::Lost) {
                    // A query may still run on the old connection.
                    match tokio_postgres::connect(&server.conn_str(), tokio_postgres::NoTls).await {
                        Ok((c, conn)) => {
                            tokio::spawn(conn);
                            t = c;
                        }
                        Err(_) => lost = true,
                    }
                }
                rep.diffs.push(Diff {
                    id,
                    class,
                    sql,
                    pg: show_answer(&Ok(want)),
                    tg: show_answer(&got),
                });
            }
        }
    }
    drop(p);
    drop(t);
    drop(server);
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"))
        .await
        .unwrap();
    rep.elapsed = started.elapsed();
    rep
}

/// Prints the per-file and per-class tables; returns the text.
fn summary(reports: &[FileReport]) -> String {
    let mut s = String::new();
    writeln!(
        s,
        "\n{:<34} {:>7} {:>7} {:>8} {:>7} {:>8} {:>7} {:>8} {:>8}",
        "file",
        "records",
        "passed",
        "skip-if",
        "skip-pg",
        "explain",
        "differ",
        "not-run",
        "seconds"
    )
    .unwrap();
    let mut tot = [0usize; 7];
    for r in reports {
        if !r.found {
            writeln!(s, "{:<34} not found", r.id).unwrap();
            continue;
        }
        let row = [
            r.records,
            r.passed,
            r.skipped_condition,
            r.skipped_pg,
            r.skipped_explain,
            r.diffs.len(),
            r.not_run,
        ];
        for (t, v) in tot.iter_mut().zip(row) {
            *t += v;
        }
        writeln!(
            s,
            "{:<34} {:>7} {:>7} {:>8} {:>7} {:>8} {:>7} {:>8} {:>8.1}",
            r.id,
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            row[5],
            row[6],
            r.elapsed.as_secs_f64()
        )
        .unwrap();
    }
    writeln!(
        s,
        "{:<34} {:>7} {:>7} {:>8} {:>7} {:>8} {:>7} {:>8}",
        "total", tot[0], tot[1], tot[2], tot[3], tot[4], tot[5], tot[6]
    )
    .unwrap();

    let mut pg: BTreeMap<&str, usize> = BTreeMap::new();
    for r in reports {
        for (k, v) in &r.pg_errors {
            *pg.entry(k).or_default() += v;
        }
    }
    if !pg.is_empty() {
        let list: Vec<String> = pg.iter().map(|(k, v)| format!("{k} {v}")).collect();
        writeln!(s, "\nskipped, PostgreSQL's SQLSTATE: {}", list.join(", ")).unwrap();
    }

    let mut classes: BTreeMap<Class, Vec<&Diff>> = BTreeMap::new();
    for d in reports.iter().flat_map(|r| &r.diffs) {
        classes.entry(d.class.clone()).or_default().push(d);
    }
    writeln!(s, "\ndifferences by class, most severe first:").unwrap();
    for (class, ds) in &classes {
        let ex = ds[0];
        writeln!(s, "{:>6}  {}", ds.len(), class.name()).unwrap();
        writeln!(
            s,
            "        e.g. {}: {}\n        postgres:  {}\n        tablegate: {}",
            ex.id,
            one_line(&ex.sql, 300),
            one_line(&ex.pg, 300),
            one_line(&ex.tg, 300)
        )
        .unwrap();
    }
    s
}

fn one_line(s: &str, max: usize) -> String {
    let s: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if s.chars().count() > max {
        format!("{}…", s.chars().take(max).collect::<String>())
    } else {
        s
    }
}

/// `TABLEGATE_CORPUS_OUT`: every difference, tab-separated.
fn write_tsv(path: &str, reports: &[FileReport]) {
    let mut s = String::from("record\tclass\tsql\tpostgres\ttablegate\n");
    for d in reports.iter().flat_map(|r| &r.diffs) {
        writeln!(
            s,
            "{}\t{}\t{}\t{}\t{}",
            d.id,
            d.class.name(),
            one_line(&d.sql, 4000),
            one_line(&d.pg, 4000),
            one_line(&d.tg, 4000)
        )
        .unwrap();
    }
    std::fs::write(path, s).unwrap();
}

#[tokio::test]
async fn sqllogictest_against_postgresql() {
    let (files, ci) = match (
        std::env::var("TABLEGATE_CORPUS").as_deref(),
        std::env::var("TABLEGATE_CORPUS_FILES"),
    ) {
        (_, Ok(list)) => (listed(&list), false),
        (Ok("all"), _) => (whole(), false),
        _ => (subset(), true),
    };
    let timeout = match std::env::var("TABLEGATE_CORPUS_TIMEOUT") {
        Ok(s) => Duration::from_secs(s.parse().expect("TABLEGATE_CORPUS_TIMEOUT: seconds")),
        Err(_) if ci => TIMEOUT_CI,
        Err(_) => TIMEOUT_ALL,
    };
    let started = Instant::now();
    let pg = PgRef::start();
    let admin = client(&pg.conn_str()).await;
    let mut reports = Vec::new();
    for (n, f) in files.iter().enumerate() {
        let r = run_file(&pg, &admin, n, f, timeout).await;
        println!(
            "corpus: {} — {} records, {} agree, {} differ ({:.1} s)",
            r.id,
            r.records,
            r.passed,
            r.diffs.len(),
            r.elapsed.as_secs_f64()
        );
        reports.push(r);
    }
    let text = summary(&reports);
    println!("{text}");
    println!("corpus: {:.1} s in all", started.elapsed().as_secs_f64());
    if let Ok(path) = std::env::var("TABLEGATE_CORPUS_OUT") {
        write_tsv(&path, &reports);
        println!("corpus: differences written to {path}");
    }
    if !ci {
        return;
    }

    // The CI subset's gates.
    let known = known();
    let mut problems = Vec::new();
    for (f, r) in files.iter().zip(&reports) {
        if !r.found {
            println!(
                "corpus: {} not found, not checked (SQLite's files: tests/corpus/README.md)",
                f.id
            );
            continue;
        }
        if let Some(min) = f.min_pass
            && r.passed < min
        {
            problems.push(format!(
                "{}: {} records agree, the threshold in subset.txt is {min}",
                f.id, r.passed
            ));
        }
        for d in &r.diffs {
            if d.class.is_wrong_result() && !known.contains(&(d.id.clone(), d.class.name())) {
                problems.push(format!(
                    "{} {}: a wrong result not in known.txt\n  {}\n  postgres:  {}\n  tablegate: {}",
                    d.id,
                    d.class.name(),
                    one_line(&d.sql, 500),
                    one_line(&d.pg, 500),
                    one_line(&d.tg, 500)
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// ---------------------------------------------------------------------------
// The runner's own checks (no servers).

fn ans(cols: usize, rows: &[&[&str]]) -> Answer {
    Answer {
        columns: cols,
        names: Vec::new(),
        rows: rows
            .iter()
            .map(|r| r.iter().map(|v| (*v).to_owned()).collect())
            .collect(),
        affected: Some(rows.len() as u64),
    }
}

#[test]
fn compare_classes_differences() {
    let pg = ans(2, &[&["1", "a"], &["2", "b"]]);
    let swapped = ans(2, &[&["2", "b"], &["1", "a"]]);
    let q = "SELECT x, y FROM t";
    assert_eq!(compare(q, SortMode::RowSort, &pg, &pg), None);
    assert_eq!(compare(q, SortMode::RowSort, &pg, &swapped), None);
    // No ORDER BY: no order promised.
    assert_eq!(compare(q, SortMode::NoSort, &pg, &swapped), None);
    assert_eq!(
        compare(
            "SELECT x, y FROM t ORDER BY 1",
            SortMode::NoSort,
            &pg,
            &swapped
        ),
        Some(Class::WrongOrder)
    );
    assert_eq!(
        compare(
            "SELECT x, y FROM t ORDER BY x+1",
            SortMode::NoSort,
            &pg,
            &swapped
        ),
        Some(Class::OrderUnverified)
    );
    // Ties of the ORDER BY key may come in any order.
    let tied = ans(2, &[&["1", "a"], &["1", "b"]]);
    let tied2 = ans(2, &[&["1", "b"], &["1", "a"]]);
    assert_eq!(
        compare(
            "SELECT x, y FROM t ORDER BY 1 DESC",
            SortMode::NoSort,
            &tied,
            &tied2
        ),
        None
    );
    let wrong = ans(2, &[&["1", "a"], &["3", "b"]]);
    assert_eq!(
        compare(q, SortMode::RowSort, &pg, &wrong),
        Some(Class::WrongRows)
    );
    assert_eq!(
        compare(q, SortMode::RowSort, &pg, &ans(2, &[&["1", "a"]])),
        Some(Class::WrongRows)
    );
    assert_eq!(
        compare(q, SortMode::RowSort, &pg, &ans(1, &[&["1"], &["2"]])),
        Some(Class::WrongColumns)
    );
    let numeric = ans(1, &[&["150.5000000000000000"], &["2"]]);
    let float = ans(1, &[&["150.5"], &["2"]]);
    assert_eq!(
        compare(q, SortMode::ValueSort, &numeric, &float),
        Some(Class::NumericText)
    );
    let off = ans(1, &[&["150.6"], &["2"]]);
    assert_eq!(
        compare(q, SortMode::ValueSort, &numeric, &off),
        Some(Class::WrongRows)
    );
    // NULL and the empty string are different values.
    let null = ans(1, &[&["NULL"]]);
    let empty = ans(1, &[&["(empty)"]]);
    assert_eq!(
        compare(q, SortMode::NoSort, &null, &empty),
        Some(Class::WrongRows)
    );
}

#[test]
fn order_by_keys() {
    assert_eq!(order_by("SELECT a FROM t"), None);
    assert_eq!(
        order_by("SELECT a, b FROM t ORDER BY 2 DESC, 1"),
        Some(Some(vec![2, 1]))
    );
    assert_eq!(
        order_by("SELECT a FROM t\n ORDER BY 1\n LIMIT 3"),
        Some(Some(vec![1]))
    );
    assert_eq!(order_by("SELECT a FROM t ORDER BY a"), Some(None));
    // An ORDER BY inside a subquery is not the query's.
    assert_eq!(
        order_by("SELECT (SELECT a FROM t ORDER BY 1 LIMIT 1)"),
        None
    );
}

#[test]
fn short_table_names_are_renamed_outside_literals() {
    let mut r = Renamer::default();
    r.learn("CREATE TABLE t1(a INTEGER, b INTEGER)");
    r.learn("create table if not exists T (x int)");
    r.learn("CREATE TABLE long_enough (x int)");
    assert_eq!(
        r.apply("SELECT t1.a, 't1', \"t1\" FROM t1, T AS x WHERE x.x = 't'"),
        "SELECT slt_t1.a, 't1', \"slt_t1\" FROM slt_t1, slt_t AS x WHERE x.x = 't'"
    );
    assert_eq!(
        r.apply("INSERT INTO t1 VALUES(1,'it''s t1') -- t1"),
        "INSERT INTO slt_t1 VALUES(1,'it''s t1') -- t1"
    );
    assert_eq!(
        r.apply("SELECT a1, t10 FROM long_enough"),
        "SELECT a1, t10 FROM long_enough"
    );
}

#[test]
fn error_classes_group_by_sqlstate_and_words() {
    let f = Failure::Db {
        code: "42P01".into(),
        message: "table \"slt_t1\" has 12 rows".into(),
    };
    assert_eq!(error_class(&f).name(), "error 42P01 table \"…\" has N rows");
}
