//! The workload: every statement the server ran, by its normalized text
//! and access class, with calls, time, rows, entities scanned and
//! throttled retries — what `pg_stat_statements` keeps for PostgreSQL, and
//! what a key design is judged against (the seeds' method starts from the
//! list of queries an application runs and how often).
//!
//! - **Normalized text** ([`normalize`]): constants become `$n` (numbered
//!   after the statement's own parameters), comments go, whitespace runs
//!   become one space; so `WHERE id = 7` and `WHERE id = 8` are one entry.
//!   Texts are cut at [`MAX_TEXT`] bytes.
//! - **Bounded**: at most [`MAX_STATEMENTS`] entries; when full, the 5%
//!   called least are forgotten, as `pg_stat_statements` deallocates.
//! - **Persisted**: the server writes changed entries to the system table
//!   [`STATEMENTS_TABLE`] every few seconds and on shutdown, and loads them
//!   when it starts ([`StatementLog::load`], [`StatementLog::flush`]).
//! - **Resettable**: `SELECT tablegate_statements_reset()`.
//!
//! `tablegate.statements` shows it. The log is process-wide, like the
//! counters in [`crate::telemetry`]: one process serves one store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use parking_lot::Mutex;
use tablegate_planner::Actuals;
use tablegate_store::{
    DateTime, EntityWrite, IfMatch, KeyBox, Operation, PageRequest, Query, StoreError, TableStore,
    Value,
};

use crate::telemetry::StatementClass;

/// Most statements kept.
pub const MAX_STATEMENTS: usize = 5000;
/// Longest normalized text kept, in bytes.
pub const MAX_TEXT: usize = 4096;
/// The system table the log persists in.
pub const STATEMENTS_TABLE: &str = "tgsys_statements";
const PARTITION: &str = "statements";
/// Most operations in one entity-group transaction.
const BATCH: usize = 100;

/// One statement's totals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatementStats {
    /// Times it ran.
    pub calls: u64,
    /// Of those, failed.
    pub errors: u64,
    /// Total wall time.
    pub total: Duration,
    /// Longest single run.
    pub max: Duration,
    /// Rows returned or written.
    pub rows: u64,
    /// Entities the store read for it.
    pub scanned: u64,
    /// Throttled retries it made.
    pub retries: u64,
    /// First run (microseconds since the epoch).
    pub first_seen: i64,
    /// Latest run.
    pub last_seen: i64,
}

/// One entry of a snapshot.
#[derive(Debug, Clone, PartialEq)]
pub struct StatementEntry {
    /// The normalized text.
    pub query: Arc<str>,
    /// The access class (`point`, `full-scan`, `analytics`, `write`, …).
    pub class: &'static str,
    /// Its totals.
    pub stats: StatementStats,
}

#[derive(Debug, Default)]
struct Entry {
    stats: StatementStats,
    /// Changed since the last flush.
    dirty: bool,
    /// Has a row in the system table.
    stored: bool,
}

type Key = (Arc<str>, &'static str);

#[derive(Debug, Default)]
struct State {
    entries: HashMap<Key, Entry>,
    /// Forgotten since the last flush: their rows go.
    evicted: Vec<Key>,
}

/// The process's statement log.
#[derive(Debug, Default)]
pub struct StatementLog {
    state: Mutex<State>,
    /// Reset since the last flush: every stored row goes.
    reset: AtomicBool,
}

static LOG: LazyLock<StatementLog> = LazyLock::new(StatementLog::default);

/// The process's statement log.
pub fn statements() -> &'static StatementLog {
    &LOG
}

/// The tag a statement's store traffic is counted under by the key
/// visualizer ([`tablegate_store::api::statement_scope`]): a hash of its
/// normalized text, never 0.
pub fn tag(normalized: &str) -> u64 {
    xxhash_rust::xxh3::xxh3_64(normalized.as_bytes()).max(1)
}

pub(crate) fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

impl StatementLog {
    /// Adds one run of `query` (normalized) of `class`.
    pub fn record(
        &self,
        query: &Arc<str>,
        class: StatementClass,
        failed: bool,
        elapsed: Duration,
        a: &Actuals,
    ) {
        let now = now_micros();
        let mut state = self.state.lock();
        let key = (query.clone(), class.name());
        if !state.entries.contains_key(&key) && state.entries.len() >= MAX_STATEMENTS {
            evict(&mut state);
        }
        let e = state.entries.entry(key).or_default();
        let s = &mut e.stats;
        if s.calls == 0 {
            s.first_seen = now;
        }
        s.calls += 1;
        s.errors += u64::from(failed);
        s.total += elapsed;
        s.max = s.max.max(elapsed);
        s.rows += a.returned;
        s.scanned += a.scanned;
        s.retries += u64::from(a.retries);
        s.last_seen = now;
        e.dirty = true;
    }

    /// Every entry, the most total time first.
    pub fn snapshot(&self) -> Vec<StatementEntry> {
        let state = self.state.lock();
        let mut out: Vec<StatementEntry> = state
            .entries
            .iter()
            .map(|((query, class), e)| StatementEntry {
                query: query.clone(),
                class,
                stats: e.stats.clone(),
            })
            .collect();
        out.sort_by(|a, b| {
            b.stats
                .total
                .cmp(&a.stats.total)
                .then_with(|| a.query.cmp(&b.query))
        });
        out
    }

    /// Forgets every entry (and, at the next flush, their rows); returns
    /// how many there were.
    pub fn reset(&self) -> usize {
        let mut state = self.state.lock();
        let n = state.entries.len();
        state.entries.clear();
        state.evicted.clear();
        self.reset.store(true, Ordering::SeqCst);
        n
    }

    /// Replaces the log with what `system` holds (the server's start).
    pub async fn load(&self, system: &dyn TableStore) -> Result<usize, StoreError> {
        let mut loaded = HashMap::new();
        let query = Query::spans(vec![KeyBox::partition(PARTITION)]);
        let mut page = PageRequest::default();
        loop {
            let p = match system.query(STATEMENTS_TABLE, &query, &page).await {
                Ok(p) => p,
                Err(StoreError::TableNotFound { .. }) => break,
                Err(e) => return Err(e),
            };
            for e in p.entities {
                if let Some((key, stats)) = from_row(&e.properties) {
                    loaded.insert(
                        key,
                        Entry {
                            stats,
                            dirty: false,
                            stored: true,
                        },
                    );
                }
            }
            match p.continuation {
                Some(c) => page.continuation = Some(c),
                None => break,
            }
        }
        let n = loaded.len();
        let mut state = self.state.lock();
        state.entries = loaded;
        state.evicted.clear();
        self.reset.store(false, Ordering::SeqCst);
        Ok(n)
    }

    /// Writes what changed since the last flush to `system`: a reset's
    /// deletions, forgotten entries' deletions, changed entries.
    pub async fn flush(&self, system: &dyn TableStore) -> Result<(), StoreError> {
        let (reset, evicted, changed) = {
            let mut state = self.state.lock();
            let reset = self.reset.swap(false, Ordering::SeqCst);
            let evicted = std::mem::take(&mut state.evicted);
            let changed: Vec<(Key, StatementStats)> = state
                .entries
                .iter_mut()
                .filter(|(_, e)| e.dirty)
                .map(|(k, e)| {
                    e.dirty = false;
                    e.stored = true;
                    (k.clone(), e.stats.clone())
                })
                .collect();
            (reset, evicted, changed)
        };
        if !reset && evicted.is_empty() && changed.is_empty() {
            return Ok(());
        }
        match system.create_table(STATEMENTS_TABLE).await {
            Ok(_) | Err(StoreError::TableExists { .. }) => {}
            Err(e) => return Err(e),
        }
        let mut deletes: Vec<String> = evicted.iter().map(row_key).collect();
        if reset {
            deletes.extend(stored_keys(system).await?);
        }
        // A row rewritten below is not deleted (one operation per entity
        // in a transaction).
        let rewritten: std::collections::HashSet<String> =
            changed.iter().map(|(k, _)| row_key(k)).collect();
        deletes.sort_unstable();
        deletes.dedup();
        let mut ops: Vec<Operation> = deletes
            .into_iter()
            .filter(|rk| !rewritten.contains(rk))
            .map(|rk| Operation::Delete {
                partition_key: PARTITION.to_owned(),
                row_key: rk,
                if_match: IfMatch::Any,
            })
            .collect();
        ops.extend(
            changed
                .iter()
                .map(|(key, stats)| Operation::InsertOrReplace(to_row(key, stats))),
        );
        for chunk in ops.chunks(BATCH) {
            system
                .execute(STATEMENTS_TABLE, Arc::from(chunk.to_vec()))
                .await?;
        }
        Ok(())
    }
}

/// Forgets the 5% of entries called least (the oldest first among equals).
fn evict(state: &mut State) {
    let mut by_use: Vec<(u64, i64, Key)> = state
        .entries
        .iter()
        .map(|(k, e)| (e.stats.calls, e.stats.last_seen, k.clone()))
        .collect();
    by_use.sort_unstable_by_key(|a| (a.0, a.1));
    let n = (MAX_STATEMENTS / 20).max(1);
    for (_, _, k) in by_use.into_iter().take(n) {
        if state.entries.remove(&k).is_some_and(|e| e.stored) {
            state.evicted.push(k);
        }
    }
}

/// The RowKey of an entry: a hash of its class and text.
fn row_key(key: &Key) -> String {
    let mut bytes = Vec::with_capacity(key.0.len() + key.1.len() + 1);
    bytes.extend_from_slice(key.1.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(key.0.as_bytes());
    format!("{:032x}", xxhash_rust::xxh3::xxh3_128(&bytes))
}

async fn stored_keys(system: &dyn TableStore) -> Result<Vec<String>, StoreError> {
    let query = Query::spans(vec![KeyBox::partition(PARTITION)]);
    let mut page = PageRequest::default();
    let mut keys = Vec::new();
    loop {
        let p = system.query(STATEMENTS_TABLE, &query, &page).await?;
        keys.extend(p.entities.into_iter().map(|e| e.row_key));
        match p.continuation {
            Some(c) => page.continuation = Some(c),
            None => return Ok(keys),
        }
    }
}

fn to_row(key: &Key, s: &StatementStats) -> EntityWrite {
    let int = |n: u64| Value::Int64(i64::try_from(n).unwrap_or(i64::MAX));
    EntityWrite::new(PARTITION, row_key(key))
        .with("query", Value::String(key.0.to_string()))
        .with("class", Value::String(key.1.to_owned()))
        .with("calls", int(s.calls))
        .with("errors", int(s.errors))
        .with("total_us", int(s.total.as_micros() as u64))
        .with("max_us", int(s.max.as_micros() as u64))
        .with("rows", int(s.rows))
        .with("scanned", int(s.scanned))
        .with("retries", int(s.retries))
        .with("first_seen", Value::DateTime(DateTime(s.first_seen)))
        .with("last_seen", Value::DateTime(DateTime(s.last_seen)))
}

fn from_row(p: &std::collections::BTreeMap<String, Value>) -> Option<(Key, StatementStats)> {
    let int = |name: &str| match p.get(name) {
        Some(Value::Int64(n)) => Some(u64::try_from(*n).unwrap_or(0)),
        _ => None,
    };
    let time = |name: &str| match p.get(name) {
        Some(Value::DateTime(t)) => Some(t.0),
        _ => None,
    };
    let (Some(Value::String(query)), Some(Value::String(class))) = (p.get("query"), p.get("class"))
    else {
        return None;
    };
    let class = crate::telemetry::CLASSES
        .iter()
        .map(|c| c.name())
        .find(|c| c == class)?;
    Some((
        (Arc::from(query.as_str()), class),
        StatementStats {
            calls: int("calls")?,
            errors: int("errors")?,
            total: Duration::from_micros(int("total_us")?),
            max: Duration::from_micros(int("max_us")?),
            rows: int("rows")?,
            scanned: int("scanned")?,
            retries: int("retries")?,
            first_seen: time("first_seen")?,
            last_seen: time("last_seen")?,
        },
    ))
}

/// `sql` with its constants replaced by `$n` (numbered after the highest
/// parameter it names), comments removed and whitespace runs made one
/// space, cut at [`MAX_TEXT`] bytes: one text for every run of a query
/// shape, as `pg_stat_statements` shows it.
pub fn normalize(sql: &str) -> String {
    let chars: Vec<char> = sql.chars().collect();
    let mut next = max_param(&chars) + 1;
    let mut out = String::with_capacity(sql.len().min(MAX_TEXT));
    let mut space = false;
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == '$';
    let mut i = 0;
    let placeholder = |out: &mut String, next: &mut usize| {
        out.push('$');
        out.push_str(&next.to_string());
        *next += 1;
    };
    while i < chars.len() && out.len() < MAX_TEXT {
        let c = chars[i];
        let at = |k: usize| chars.get(k).copied();
        // Whitespace and comments: one space between tokens.
        if c.is_whitespace() {
            space = true;
            i += 1;
            continue;
        }
        if c == '-' && at(i + 1) == Some('-') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
            space = true;
            continue;
        }
        if c == '/' && at(i + 1) == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == Some('*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == Some('/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            space = true;
            continue;
        }
        if space && !out.is_empty() {
            out.push(' ');
        }
        space = false;
        let prev_ident = out.chars().last().is_some_and(ident);
        match c {
            // A string constant; an E, B, X or N prefix goes with it.
            '\'' => {
                let mut chars_out = out.chars().rev();
                if let (Some(p), before) = (chars_out.next(), chars_out.next())
                    && "eEbBxXnN".contains(p)
                    && !before.is_some_and(ident)
                {
                    out.pop();
                }
                i += 1;
                while i < chars.len() {
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 2;
                        continue;
                    }
                    if chars[i] == '\'' {
                        if at(i + 1) == Some('\'') {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
                placeholder(&mut out, &mut next);
            }
            // A quoted identifier, kept as written.
            '"' => {
                out.push('"');
                i += 1;
                while i < chars.len() {
                    out.push(chars[i]);
                    if chars[i] == '"' {
                        if at(i + 1) == Some('"') {
                            out.push('"');
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
                i += 1;
            }
            // A parameter, kept; or a dollar-quoted string, replaced.
            '$' if !prev_ident => {
                if at(i + 1).is_some_and(|d| d.is_ascii_digit()) {
                    out.push('$');
                    i += 1;
                    while i < chars.len() && chars[i].is_ascii_digit() {
                        out.push(chars[i]);
                        i += 1;
                    }
                    continue;
                }
                let tag_end = (i + 1..chars.len())
                    .find(|&k| !(chars[k].is_alphanumeric() || chars[k] == '_'));
                match tag_end {
                    Some(k) if chars[k] == '$' => {
                        let tag: String = chars[i..=k].iter().collect();
                        let body = k + 1;
                        let close = (body..chars.len()).find(|&j| {
                            chars[j..]
                                .iter()
                                .take(tag.chars().count())
                                .copied()
                                .eq(tag.chars())
                        });
                        i = close.map_or(chars.len(), |j| j + tag.chars().count());
                        placeholder(&mut out, &mut next);
                    }
                    _ => {
                        out.push('$');
                        i += 1;
                    }
                }
            }
            // A number: digits, a fraction, an exponent.
            d if (d.is_ascii_digit()
                || (d == '.' && at(i + 1).is_some_and(|n| n.is_ascii_digit())))
                && !prev_ident =>
            {
                while i < chars.len()
                    && (chars[i].is_ascii_alphanumeric() || chars[i] == '.' || chars[i] == '_')
                {
                    let exp = matches!(chars[i], 'e' | 'E');
                    i += 1;
                    if exp && matches!(at(i), Some('+' | '-')) {
                        i += 1;
                    }
                }
                placeholder(&mut out, &mut next);
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    if out.len() > MAX_TEXT {
        let mut cut = MAX_TEXT;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

/// The highest `$n` parameter `chars` names outside strings (0 if none).
fn max_param(chars: &[char]) -> usize {
    let mut max = 0;
    let mut i = 0;
    let mut quote: Option<char> = None;
    while i < chars.len() {
        let c = chars[i];
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '$' && (i == 0 || !chars[i - 1].is_alphanumeric()) => {
                let digits: String = chars[i + 1..]
                    .iter()
                    .take_while(|d| d.is_ascii_digit())
                    .collect();
                if let Ok(n) = digits.parse::<usize>() {
                    max = max.max(n);
                }
            }
            None => {}
        }
        i += 1;
    }
    max
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constants_become_parameters() {
        let n = normalize;
        assert_eq!(
            n("SELECT * FROM t WHERE id = 7 AND name = 'it''s'"),
            "SELECT * FROM t WHERE id = $1 AND name = $2"
        );
        assert_eq!(
            n("select  a1, -1.5e-3\n  from t2 -- why\n where x in (1, 2)"),
            "select a1, -$1 from t2 where x in ($2, $3)"
        );
        // After the statement's own parameters.
        assert_eq!(
            n("SELECT $2 + 10 FROM t WHERE k = $1"),
            "SELECT $2 + $3 FROM t WHERE k = $1"
        );
        assert_eq!(
            n(
                "SELECT E'a\\'b', x'ff', DATE '2020-01-01', $$x$$, $q$y$q$ /* c /* n */ */ FROM \"T 1\""
            ),
            "SELECT $1, $2, DATE $3, $4, $5 FROM \"T 1\""
        );
        assert_eq!(
            n("SELECT t.col1::int8 FROM t"),
            "SELECT t.col1::int8 FROM t"
        );
        assert_eq!(n("  "), "");
        let long = format!("SELECT '{}', {}", "x".repeat(10), "a, ".repeat(3000));
        assert!(n(&long).len() <= MAX_TEXT);
    }

    #[test]
    fn the_log_is_bounded_and_persists_its_rows_faithfully() {
        let log = StatementLog::default();
        let a = Actuals {
            scanned: 10,
            returned: 2,
            ..Actuals::default()
        };
        let q: Arc<str> = Arc::from("SELECT $1");
        log.record(
            &q,
            StatementClass::Analytics,
            false,
            Duration::from_millis(3),
            &a,
        );
        log.record(
            &q,
            StatementClass::Analytics,
            true,
            Duration::from_millis(5),
            &a,
        );
        let snap = log.snapshot();
        assert_eq!(snap.len(), 1);
        let s = &snap[0].stats;
        assert_eq!((s.calls, s.errors, s.rows, s.scanned), (2, 1, 4, 20));
        assert_eq!(
            (s.total, s.max),
            (Duration::from_millis(8), Duration::from_millis(5))
        );
        let key = (q.clone(), "analytics");
        let row = to_row(&key, s);
        let props = row
            .properties
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
        assert_eq!(from_row(&props), Some((key, s.clone())));

        for i in 0..MAX_STATEMENTS + 1 {
            let q: Arc<str> = Arc::from(format!("SELECT {i}"));
            log.record(&q, StatementClass::Write, false, Duration::ZERO, &a);
        }
        let snap = log.snapshot();
        assert!(snap.len() <= MAX_STATEMENTS, "{}", snap.len());
        // The statement called twice outlived those called once.
        assert!(snap.iter().any(|e| *e.query == *"SELECT $1"));
        assert_eq!(log.reset(), snap.len());
        assert!(log.snapshot().is_empty());
    }
}
