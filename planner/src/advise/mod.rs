//! The key-design advisor: from a workload and the table's own data, which
//! PartitionKey and RowKey to choose (`SELECT * FROM tablegate.advise(…)`).
//!
//! It follows the seeds' method. The candidates are every key-capable
//! column, alone and in every ordered pair, and the keys the seeds compute
//! ([`derived`]: compound, suffixed, bucketed, inverted). Each is modelled
//! on a sample of the table ([`crate::whatif::KeyModel`]), and every read
//! of the workload is planned against it and estimated with EXPLAIN's
//! estimator. A read's parameters (`$n`, as the statement log records
//! them) are drawn from the table's own rows: the value of the column each
//! one is compared with, in [`DRAWS`] rows spread over the sample.
//!
//! Designs are ranked by entities read per call, weighted by how often
//! each statement runs. A design is rejected when it cannot hold the data
//! (a key column with NULLs, keys that are not unique) or when it would
//! split a write that must be atomic across PartitionKeys ([`writes`]).
//! With rates, a design whose largest partition, append-only tail or whole
//! load is above the throttling targets ranks last. When the best design
//! leaves a frequent read scanning, the report names the design that would
//! serve it: the seeds' duplicate-row pattern.

use std::cmp::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tablegate_catalog::TableDef;
use tablegate_store::partition::Targets;
use tablegate_store::{CmpOp, Entity, Value};

use crate::error::Result;
use crate::expr::BExpr;
use crate::keys::AccessClass;
use crate::plan::{self, Route, SelectPlan};
use crate::whatif::{KeyModel, Sample};
use crate::{Planner, whatif};
use derived::{Computed, Conjuncts, Derived, Kind};

pub mod derived;
pub mod writes;

/// Entities a candidate is modelled on (a stride over the what-if sample).
pub const ADVISE_SAMPLE: usize = 20_000;
/// Parameter draws per statement.
pub const DRAWS: usize = 8;
/// Key-capable columns considered; more are narrowed to those the workload
/// filters on.
const MAX_COLUMNS: usize = 6;
/// Derived keys considered at most.
const MAX_DERIVED: usize = 8;

/// One statement of a workload.
#[derive(Debug, Clone)]
pub struct WorkloadStatement {
    /// Its SQL (`$n` parameters allowed).
    pub sql: String,
    /// How often it runs, relative to the others.
    pub weight: f64,
    /// Calls per second, when known (the statement log's calls over the
    /// time since it was first seen; `-- rate: N` in a workload file).
    pub rate: Option<f64>,
}

/// A candidate design and what the workload would cost under it.
#[derive(Debug, Clone)]
pub struct Design {
    /// PartitionKey column.
    pub partition_key: String,
    /// RowKey column (`None`: the RowKey is always '').
    pub row_key: Option<String>,
    /// The table is keyed this way today.
    pub current: bool,
    /// Why the design cannot hold the data, if it cannot.
    pub rejected: Option<String>,
    /// Entities read per call, weighted by the statements' weights.
    pub entities_per_call: f64,
    /// Minimum time per call at the throttling targets, weighted.
    pub min_time: Duration,
    /// PartitionKeys (in the sample) and the largest partition's entities.
    pub partitions: (u64, u64),
    /// Each modelled statement's class and entities read per call.
    pub per_statement: Vec<(AccessClass, f64)>,
    /// The newest rows all fall at the end (or start) of the key order.
    pub append_only: Option<&'static str>,
    /// How its derived keys are computed.
    pub derived: Vec<String>,
    /// What it would serve at the workload's rates (when every read's
    /// rate is known).
    pub load: Option<Load>,
    /// The SQL that creates a table keyed this way and copies the rows
    /// into it (`None` when a derived key has no SQL expression yet).
    pub apply: Option<String>,
}

/// Entities per second a design's busiest places would serve at the
/// workload's rates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Load {
    /// Its largest partition (its share of the reads and inserts).
    pub largest: f64,
    /// The server at the end of the key order, when inserts are
    /// append-only (it takes them all).
    pub tail: Option<f64>,
    /// The whole workload, reads and inserts.
    pub total: f64,
}

impl Load {
    /// Each place above 90% of its target, in words.
    fn overloads(&self, t: &Targets) -> Vec<String> {
        let over = |load: f64, target: u64| load > target as f64 * 0.9;
        let mut out = Vec::new();
        if over(self.largest, t.per_partition) {
            out.push(format!(
                "too hot: at the workload's rates its largest partition would serve {:.0} entities/s, against a target of {} per partition",
                self.largest, t.per_partition
            ));
        }
        if let Some(l) = self.tail
            && over(l, t.per_server)
        {
            out.push(format!(
                "too hot: at the workload's rates the server at the end of the key order would take all {l:.0} inserted entities/s, against a target of {} per server",
                t.per_server
            ));
        }
        if over(self.total, t.per_account) {
            out.push(format!(
                "too hot: at the workload's rates it would read and insert {:.0} entities/s in all, against the account's target of {}",
                self.total, t.per_account
            ));
        }
        out
    }
}

/// The advisor's answer.
#[derive(Debug, Clone)]
pub struct Report {
    /// The table.
    pub table: String,
    /// Its entities.
    pub total: u64,
    /// The workload, with why a statement was not modelled.
    pub statements: Vec<(WorkloadStatement, Option<String>)>,
    /// Designs, best first (rejected ones last).
    pub designs: Vec<Design>,
    /// Advice beyond the ranking (a second copy of the rows for a second
    /// dominant query).
    pub advice: Vec<String>,
    /// The reads every design was compared on (indices into `statements`).
    pub reads: Vec<usize>,
    /// The workload inserts into the table.
    pub inserts: bool,
    /// The throttling targets loads are judged against.
    pub targets: Targets,
}

impl Design {
    /// The table a design is applied as: `<table>_by_<partition key>`.
    pub fn applied_name(&self, table: &str) -> String {
        let mut name = format!("{table}_by_{}", self.partition_key);
        name.truncate(63);
        name
    }

    /// `CREATE TABLE` keyed by this design and `INSERT … SELECT` of the
    /// rows of `real` (the derived keys computed in SQL).
    fn apply_sql(&self, real: &TableDef, derived: &[Derived]) -> Option<String> {
        let keys: Vec<&String> = std::iter::once(&self.partition_key)
            .chain(self.row_key.as_ref())
            .collect();
        let mut columns = Vec::new();
        let mut select = Vec::new();
        for c in real.visible() {
            let not_null = c.not_null || keys.contains(&&c.name);
            columns.push(format!(
                "{} {}{}",
                c.name,
                c.ty.pg_name(),
                if not_null { " NOT NULL" } else { "" }
            ));
            select.push(c.name.clone());
        }
        for k in &keys {
            if let Some(d) = derived.iter().find(|d| &&d.name == k) {
                columns.push(format!("{} text NOT NULL", d.name));
                select.push(format!("{} AS {}", d.sql(real)?, d.name));
            }
        }
        let new = self.applied_name(&real.name);
        let keys: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
        Some(format!(
            "CREATE TABLE {new} ({}, PRIMARY KEY ({}));\nINSERT INTO {new} SELECT {} FROM {}",
            columns.join(", "),
            keys.join(", "),
            select.join(", "),
            real.name
        ))
    }

    fn name(&self) -> String {
        match &self.row_key {
            Some(rk) => format!("({}, {rk})", self.partition_key),
            None => format!("({})", self.partition_key),
        }
    }

    /// Whether some place would run above its target.
    fn hot(&self, t: &Targets) -> bool {
        self.load.is_some_and(|l| !l.overloads(t).is_empty())
    }

    /// Ranking: usable designs first, then those whose largest partition
    /// stays under its target, then the fewest entities per call; among
    /// equals, append-only designs after the others when the workload
    /// inserts (otherwise the insert order only says how the data was
    /// loaded), then the smaller largest partition (the seeds' many small
    /// partitions).
    fn rank_key(&self, inserts: bool, t: &Targets) -> (bool, bool, u64, bool, u64, bool, u64) {
        (
            self.rejected.is_some(),
            self.hot(t),
            (self.entities_per_call * 100.0).round() as u64,
            inserts && self.append_only.is_some(),
            self.partitions.1,
            self.append_only.is_some(),
            self.min_time.as_micros() as u64,
        )
    }

    /// One line on why the design ranks where it does, in the seeds' terms.
    pub fn reason(&self, statements: usize, inserts: bool, t: &Targets) -> String {
        if let Some(r) = &self.rejected {
            return format!("rejected: {r}");
        }
        let mut parts: Vec<String> = Vec::new();
        let mut classes: Vec<(AccessClass, usize)> = Vec::new();
        for (c, _) in &self.per_statement {
            match classes.iter_mut().find(|(k, _)| k == c) {
                Some((_, n)) => *n += 1,
                None => classes.push((*c, 1)),
            }
        }
        classes.sort_by_key(|(c, _)| class_order(*c));
        parts.extend(
            classes
                .iter()
                .map(|(c, n)| format!("{} {n} of {statements}", c.name())),
        );
        if let Some(a) = self.append_only {
            let end = if a == "append-only" { "end" } else { "start" };
            parts.push(if inserts {
                format!(
                    "{a}: the newest rows all go to the {end} of the key order, one range partition and one server at a time (at most {} entities/s); prefix the key with a hash bucket",
                    t.per_server
                )
            } else {
                format!(
                    "the rows were written in key order: if new rows keep arriving that way, they all go to the {end} of the key order, one hot partition at a time ({a})"
                )
            });
        }
        if let Some(l) = self.load {
            parts.extend(l.overloads(t));
        }
        if self.partitions.1 > crate::explain::LARGE_PARTITION {
            parts.push(format!(
                "its largest partition holds {} entities",
                self.partitions.1
            ));
        }
        parts.extend(self.derived.iter().cloned());
        parts.join("; ")
    }
}

fn class_order(c: AccessClass) -> u8 {
    match c {
        AccessClass::Empty => 0,
        AccessClass::Point => 1,
        AccessClass::RowRange => 2,
        AccessClass::PartitionRange => 3,
        AccessClass::FullScan => 4,
    }
}

/// Splits a workload: statements end with `;` (outside quotes); a comment
/// `-- weight: N` (to the end of its line) or `/* weight: N */` before a
/// statement sets how often it runs (1 when absent); `-- rate: N` says it
/// runs N times a second (and weighs N). Other comments are dropped.
pub fn parse_workload(text: &str) -> Vec<WorkloadStatement> {
    fn number(comment: &str, key: &str) -> Option<f64> {
        let w = comment.trim().strip_prefix(key)?;
        w.trim_start_matches([':', '=', ' '])
            .trim()
            .trim_end_matches("/s")
            .parse::<f64>()
            .ok()
            .filter(|n| n.is_finite())
    }
    let mut out = Vec::new();
    let (mut sql, mut weight, mut rate) = (String::new(), 1.0, None);
    let mut push = |sql: &mut String, weight: &mut f64, rate: &mut Option<f64>| {
        if !sql.trim().is_empty() {
            out.push(WorkloadStatement {
                sql: sql.trim().to_owned(),
                weight: *weight,
                rate: rate.take(),
            });
        }
        sql.clear();
        *weight = 1.0;
        *rate = None;
    };
    let mut rest = text;
    let mut quoted = false;
    while let Some(ch) = rest.chars().next() {
        if !quoted && (rest.starts_with("--") || rest.starts_with("/*")) {
            let (body, after) = if rest.starts_with("--") {
                let end = rest.find('\n').unwrap_or(rest.len());
                (&rest[2..end], &rest[end..])
            } else {
                let end = rest[2..].find("*/").map_or(rest.len(), |e| e + 4);
                (&rest[2..end.saturating_sub(2).max(2)], &rest[end..])
            };
            if let Some(w) = number(body, "weight") {
                weight = w.max(0.0);
            } else if let Some(r) = number(body, "rate") {
                weight = r.max(0.0);
                rate = Some(weight);
            }
            rest = after;
            continue;
        }
        match ch {
            '\'' => {
                quoted = !quoted;
                sql.push(ch);
            }
            ';' if !quoted => push(&mut sql, &mut weight, &mut rate),
            _ => sql.push(ch),
        }
        rest = &rest[ch.len_utf8()..];
    }
    push(&mut sql, &mut weight, &mut rate);
    out
}

/// What a parameter is compared with: a column, and which side of a range.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Side {
    Equal,
    Low,
    High,
    Prefix,
}

fn params_of(e: &BExpr, out: &mut Vec<(usize, String, Side)>) {
    let col = |e: &BExpr| match e {
        BExpr::Column(c) => Some(c.name.clone()),
        _ => None,
    };
    match e {
        BExpr::And(v) | BExpr::Or(v) => v.iter().for_each(|x| params_of(x, out)),
        BExpr::Not(x) => params_of(x, out),
        BExpr::Cmp(a, op, b) => {
            let (c, p, op) = match (col(a), &**b, col(b), &**a) {
                (Some(c), BExpr::Param(n, _), _, _) => (c, *n, *op),
                (_, _, Some(c), BExpr::Param(n, _)) => (c, *n, flip(*op)),
                _ => return,
            };
            let side = match op {
                CmpOp::Gt | CmpOp::Ge => Side::Low,
                CmpOp::Lt | CmpOp::Le => Side::High,
                _ => Side::Equal,
            };
            out.push((p, c, side));
        }
        BExpr::InList { expr, list, .. } => {
            if let Some(c) = col(expr) {
                for x in list {
                    if let BExpr::Param(n, _) = x {
                        out.push((*n, c.clone(), Side::Equal));
                    }
                }
            }
        }
        BExpr::Between {
            expr, low, high, ..
        } => {
            if let Some(c) = col(expr) {
                if let BExpr::Param(n, _) = &**low {
                    out.push((*n, c.clone(), Side::Low));
                }
                if let BExpr::Param(n, _) = &**high {
                    out.push((*n, c, Side::High));
                }
            }
        }
        BExpr::Like { expr, pattern, .. } => {
            if let (Some(c), BExpr::Param(n, _)) = (col(expr), &**pattern) {
                out.push((*n, c, Side::Prefix));
            }
        }
        _ => {}
    }
}

fn flip(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Gt => CmpOp::Lt,
        CmpOp::Ge => CmpOp::Le,
        CmpOp::Lt => CmpOp::Gt,
        CmpOp::Le => CmpOp::Ge,
        o => o,
    }
}

fn value_cmp(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Int32(x), Value::Int32(y)) => x.cmp(y),
        (Value::Int64(x), Value::Int64(y)) => x.cmp(y),
        (Value::Double(x), Value::Double(y)) => x.total_cmp(y),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::DateTime(x), Value::DateTime(y)) => x.cmp(y),
        _ => Ordering::Equal,
    }
}

/// Parameter values for draw `d`: each parameter takes the value of its
/// column in a row of the sample (a range's two ends from two rows, in
/// order). `None` when a parameter is not compared with a column.
fn draw(
    plan: &SelectPlan,
    real: &TableDef,
    rows: &[Entity],
    d: usize,
) -> Option<Vec<Option<Value>>> {
    let n = plan.param_types.len();
    if n == 0 {
        return Some(Vec::new());
    }
    if rows.is_empty() {
        return None;
    }
    let mut uses = Vec::new();
    if let Some(p) = &plan.predicate {
        params_of(p, &mut uses);
    }
    let row = |k: usize| &rows[(d * rows.len() / DRAWS + k * rows.len() / 2) % rows.len()];
    let mut out = vec![None; n];
    for (p, col, side) in &uses {
        let c = real.resolve(col).ok()?;
        let v = real.value_of(row(0), &c);
        let v = match side {
            Side::High => {
                let other = real.value_of(row(1), &c);
                // The larger of the two rows' values ends the range.
                match (&v, &other) {
                    (Some(a), Some(b)) if value_cmp(b, a) == Ordering::Less => v,
                    _ => other,
                }
            }
            Side::Low => {
                let other = real.value_of(row(1), &c);
                match (&v, &other) {
                    (Some(a), Some(b)) if value_cmp(b, a) == Ordering::Less => other,
                    _ => v,
                }
            }
            Side::Prefix => v.map(|v| match v {
                Value::String(s) => Value::String(format!("{s}%")),
                v => v,
            }),
            Side::Equal => v,
        };
        if let Some(slot) = out.get_mut(*p) {
            *slot = v;
        }
    }
    // A parameter not compared with a column (a LIMIT, a computed
    // comparison) cannot be drawn from the data.
    let mut drawn = vec![false; n];
    for (p, ..) in &uses {
        if let Some(x) = drawn.get_mut(*p) {
            *x = true;
        }
    }
    drawn.iter().all(|&x| x).then_some(out)
}

/// Whether the newest tenth of the rows (by Timestamp, their last write)
/// all fall in the last (or first) tenth of the model's key order.
fn insert_pattern(model_rows: &[(usize, i64)]) -> Option<&'static str> {
    let n = model_rows.len();
    if n < 100 {
        return None;
    }
    let mut by_time: Vec<(i64, usize)> = model_rows.iter().map(|&(i, t)| (t, i)).collect();
    by_time.sort_unstable();
    let newest = &by_time[n - n / 10..];
    let tail = newest.iter().filter(|(_, i)| *i >= n - n / 10).count();
    let head = newest.iter().filter(|(_, i)| *i < n / 10).count();
    if tail * 10 >= newest.len() * 8 {
        Some("append-only")
    } else if head * 10 >= newest.len() * 8 {
        Some("prepend-only")
    } else {
        None
    }
}

/// A read of the workload, ready to plan under any design.
struct Read {
    /// Index into the report's statements.
    stmt: usize,
    /// Its text.
    sql: String,
    /// Rewritten for the derived keys.
    query: sqlparser::ast::Query,
    /// Its table access (the engine's statements are modelled by it).
    access: sqlparser::ast::Query,
    /// Parameters the rewrite added.
    computed: Vec<Computed>,
    /// Parameters the statement has itself.
    own_params: usize,
}

/// What a read constrains, from its plan against the table as it is.
struct Facts {
    conj: Conjuncts,
    params: usize,
    descending: Vec<String>,
}

impl Facts {
    fn of(catalog: &tablegate_catalog::Catalog, q: &sqlparser::ast::Query, sql: &str) -> Facts {
        let bound = match plan::plan_query(catalog, q, sql) {
            Ok(plan::Routed::Bound(s)) => Some(s),
            _ => match plan::plan_query(catalog, &access_query(q), sql) {
                Ok(plan::Routed::Bound(s)) => Some(s),
                _ => None,
            },
        };
        Facts {
            conj: Conjuncts::of(bound.as_ref().and_then(|s| s.predicate.as_ref())),
            params: bound.map_or(0, |s| s.param_types.len()),
            descending: derived::descending(q),
        }
    }

    /// Whether the read pins `key` to one value (a bucket: any constraint
    /// on its column, since every bucket can be read).
    fn fixes(&self, key: &str, derived: &[Derived]) -> bool {
        match derived.iter().find(|d| d.name == key).map(|d| &d.kind) {
            Some(Kind::Compound(a, b)) => self.conj.eq(a).is_some() && self.conj.eq(b).is_some(),
            Some(Kind::Bucket(c)) => self.conj.columns().any(|x| x == c),
            Some(Kind::Inverted(c)) => self.conj.eq(c).is_some(),
            None => self.conj.eq(key).is_some(),
        }
    }

    /// Whether a RowKey `key` would narrow the read (its leading column is
    /// constrained, or it is the inverted column the read orders by).
    fn narrows(&self, key: &str, derived: &[Derived]) -> bool {
        let lead = match derived.iter().find(|d| d.name == key).map(|d| &d.kind) {
            Some(Kind::Inverted(c)) if self.descending.contains(c) => return true,
            Some(Kind::Compound(a, _) | Kind::Bucket(a) | Kind::Inverted(a)) => a.as_str(),
            None => key,
        };
        self.conj.columns().any(|x| x == lead)
    }
}

/// The derived keys worth modelling for this workload: compound keys of
/// two columns a read fixes together, inverted columns a read orders by
/// descending and, when the workload inserts, buckets of columns whose
/// order follows the insert order.
fn derive(
    real: &TableDef,
    columns: &[String],
    facts: &[Facts],
    sample: &Sample,
    inserts: bool,
) -> Vec<Derived> {
    let mut out: Vec<Derived> = Vec::new();
    let mut push = |d: Derived| {
        if !out.contains(&d) && out.len() < MAX_DERIVED {
            out.push(d);
        }
    };
    for f in facts {
        for (i, a) in columns.iter().enumerate() {
            for b in &columns[i + 1..] {
                if f.conj.eq(a).is_some() && f.conj.eq(b).is_some() {
                    push(Derived::compound(a, b));
                }
            }
        }
    }
    for f in facts {
        for c in &f.descending {
            if columns.contains(c) && real.resolve(c).is_ok_and(|r| derived::invertible(r.ty)) {
                push(Derived::inverted(c));
            }
        }
    }
    // The table's own identity as one key: any column can lead it.
    if let (false, Some(rk)) = (real.keyless(), &real.row_key) {
        push(Derived::compound(&real.partition_key, rk));
    }
    for c in columns.iter().filter(|_| inserts) {
        let Ok(col) = real.resolve(c) else { continue };
        let mut keyed: Vec<(String, i64)> = sample
            .entities
            .iter()
            .filter_map(|e| Some((col.ty.encode_key(&real.value_of(e, &col)?)?, e.timestamp.0)))
            .collect();
        keyed.sort_unstable();
        let order: Vec<(usize, i64)> = keyed
            .iter()
            .enumerate()
            .map(|(i, (_, t))| (i, *t))
            .collect();
        if insert_pattern(&order).is_some() {
            push(Derived::bucket(c));
        }
    }
    out
}

/// RowKeys made unique by a suffix (the seeds' `AGE:055__1234`): for a
/// usable design (p, t) and a column c that a read fixing p constrains,
/// the design (p, c__t), unique because (p, t) is, and ordered by c.
fn suffixes(
    usable: &[(String, String)],
    columns: &[String],
    facts: &[Facts],
    derived: &[Derived],
) -> (Vec<Derived>, Vec<Vec<String>>) {
    let mut keys = Vec::new();
    let mut designs = Vec::new();
    for (p, t) in usable {
        if derived.iter().any(|d| &d.name == t) {
            continue;
        }
        let fixed_by = |c: &str| {
            facts
                .iter()
                .any(|f| f.fixes(p, derived) && f.conj.columns().any(|x| x == c))
        };
        let in_pk = |c: &str| match derived.iter().find(|d| &d.name == p) {
            Some(d) => d.sources().contains(&c),
            None => p == c,
        };
        for c in columns {
            if c == t || in_pk(c) || !fixed_by(c) || designs.len() >= MAX_DERIVED {
                continue;
            }
            let d = Derived::compound(c, t);
            designs.push(vec![p.clone(), d.name.clone()]);
            if !keys.contains(&d) {
                keys.push(d);
            }
        }
    }
    (keys, designs)
}

/// Designs with a derived key: each derived PartitionKey some read fixes,
/// alone and with each RowKey that narrows such a read; each column
/// PartitionKey with each derived RowKey that narrows a read it fixes.
fn derived_designs(columns: &[String], derived: &[Derived], facts: &[Facts]) -> Vec<Vec<String>> {
    let names: Vec<&str> = derived.iter().map(|d| d.name.as_str()).collect();
    let sources = |k: &str| -> Vec<String> {
        match derived.iter().find(|d| d.name == k) {
            Some(d) => d.sources().iter().map(|s| (*s).to_owned()).collect(),
            None => vec![k.to_owned()],
        }
    };
    let mut out = Vec::new();
    let pks = names
        .iter()
        .copied()
        .chain(columns.iter().map(String::as_str));
    for pk in pks {
        let derived_pk = names.contains(&pk);
        let bucket = derived
            .iter()
            .any(|d| d.name == pk && matches!(d.kind, Kind::Bucket(_)));
        let serving: Vec<&Facts> = facts.iter().filter(|f| f.fixes(pk, derived)).collect();
        if serving.is_empty() {
            continue;
        }
        if derived
            .iter()
            .any(|d| d.name == pk && matches!(d.kind, Kind::Inverted(_)))
        {
            continue;
        }
        if derived_pk {
            out.push(vec![pk.to_owned()]);
        }
        let pk_sources = sources(pk);
        for rk in names
            .iter()
            .copied()
            .chain(columns.iter().map(String::as_str))
        {
            if rk == pk || (!derived_pk && !names.contains(&rk)) {
                continue;
            }
            // A RowKey repeating the PartitionKey's columns adds nothing,
            // except a bucket's own column (the bucketed design's order).
            let overlap = sources(rk).iter().any(|s| pk_sources.contains(s));
            if overlap && !(bucket && sources(rk)[0] == pk_sources[0]) {
                continue;
            }
            if serving.iter().any(|f| f.narrows(rk, derived)) {
                out.push(vec![pk.to_owned(), rk.to_owned()]);
            }
        }
    }
    out
}

impl Planner {
    /// Ranks key designs for `table` under `workload`.
    pub async fn advise(&self, table: &str, workload: Vec<WorkloadStatement>) -> Result<Report> {
        let real = self.catalog.table(table)?;
        let full = whatif::sample(&self.store, &real.name, whatif::SAMPLE).await?;
        let stride = full.entities.len().div_ceil(ADVISE_SAMPLE).max(1);
        let sample = Sample {
            total: full.total,
            entities: full.entities.into_iter().step_by(stride).collect(),
        };
        let ranges = self.store.layout(&real.name)?.len();
        let partitioned = self.store.partitioned();
        let servers = partitioned.map_or(1, |p| p.config().servers);
        let targets = partitioned
            .and_then(|p| p.config().targets.clone())
            .unwrap_or_default();
        let name = real.name.to_ascii_lowercase();
        // Every statement parsed once; the writes that must be atomic
        // together; the reads of this table.
        let parsed: Vec<(
            WorkloadStatement,
            std::result::Result<sqlparser::ast::Statement, String>,
        )> = workload
            .into_iter()
            .map(|w| {
                let s = match Planner::parse(&w.sql) {
                    Ok(mut v) if v.len() == 1 => Ok(v.remove(0)),
                    Ok(_) => Err("several statements".to_owned()),
                    Err(e) => Err(format!("does not parse: {e}")),
                };
                (w, s)
            })
            .collect();
        let visible: Vec<String> = real.visible().map(|c| c.name.clone()).collect();
        let borrowed: Vec<writes::Statement<'_>> =
            parsed.iter().map(|(w, s)| (w, s.as_ref().ok())).collect();
        let (units, used) = writes::units(&borrowed, &name, &visible);
        let writes::Inserts {
            any: inserts,
            load: insert_load,
        } = writes::inserts(&borrowed, &name);
        let mut statements = Vec::new();
        let mut queries = Vec::new();
        for (i, (w, s)) in parsed.into_iter().enumerate() {
            let why = match s {
                _ if used.contains(&i) => None,
                Ok(sqlparser::ast::Statement::Query(q)) => match whatif::single_table(&q) {
                    Ok(t) if t == name => {
                        queries.push((statements.len(), q, w.sql.clone()));
                        None
                    }
                    Ok(_) => Some("reads another table".to_owned()),
                    Err(_) => Some("not a SELECT from one table".to_owned()),
                },
                Ok(_) => Some("not a read or write of this table".to_owned()),
                Err(why) => Some(why),
            };
            statements.push((w, why));
        }
        let mut columns: Vec<String> = real
            .visible()
            .filter(|c| c.ty.key_capable())
            .map(|c| c.name.clone())
            .collect();
        if columns.len() > MAX_COLUMNS {
            let filtered: Vec<String> = columns
                .iter()
                .filter(|c| {
                    **c == real.partition_key
                        || real.row_key.as_ref() == Some(*c)
                        || queries.iter().any(|(.., sql)| sql.contains(c.as_str()))
                })
                .cloned()
                .collect();
            columns = filtered.into_iter().take(MAX_COLUMNS).collect();
        }
        let facts: Vec<Facts> = queries
            .iter()
            .map(|(_, q, sql)| Facts::of(&self.catalog, q, sql))
            .collect();
        let derived = derive(&real, &columns, &facts, &sample, inserts);
        let mut candidates: Vec<Vec<String>> = Vec::new();
        for pk in &columns {
            candidates.push(vec![pk.clone()]);
            for rk in &columns {
                if rk != pk {
                    candidates.push(vec![pk.clone(), rk.clone()]);
                }
            }
        }
        candidates.extend(derived_designs(&columns, &derived, &facts));
        let page = crate::exec::ExecOptions::default().page_size;
        let total = sample.total;
        let catalog = self.catalog.clone();
        let current = (
            real.partition_key.clone(),
            real.row_key.clone(),
            real.keyless(),
        );
        let real2 = real.clone();
        let ranking = targets.clone();
        let (designs, statements, reads) = tokio::task::spawn_blocking(move || {
            let real = real2;
            let env = |derived: Vec<Derived>| Env {
                reads: queries
                    .iter()
                    .zip(&facts)
                    .map(|((stmt, q, sql), f)| {
                        let (query, computed) = derived::rewrite(q, &f.conj, &derived, f.params);
                        Read {
                            stmt: *stmt,
                            access: access_query(&query),
                            query,
                            sql: sql.clone(),
                            computed,
                            own_params: f.params,
                        }
                    })
                    .collect(),
                aug: derived::augment(&real, &sample, &derived),
                derived,
                units: &units,
                ranges,
                servers,
                page,
            };
            let mut statements = statements;
            let mut designs = Vec::new();
            let first = env(derived.clone());
            for keys in candidates {
                if let Some(d) = first.model(&catalog, &keys, &current, &mut statements) {
                    designs.push(d);
                }
            }
            // Then RowKeys made unique by a suffix, from the usable designs,
            // cheapest first.
            let cost = |r: &[Modelled]| -> f64 {
                r.iter()
                    .zip(&first.reads)
                    .map(|(m, read)| match m {
                        Some((_, per_call, _)) => statements[read.stmt].0.weight * per_call,
                        None => f64::INFINITY,
                    })
                    .sum()
            };
            let mut usable: Vec<(f64, String, String)> = designs
                .iter()
                .filter(|(d, _)| d.rejected.is_none())
                .filter_map(|(d, r)| Some((cost(r), d.partition_key.clone(), d.row_key.clone()?)))
                .collect();
            usable.sort_by(|a, b| a.0.total_cmp(&b.0));
            let usable: Vec<(String, String)> =
                usable.into_iter().map(|(_, p, t)| (p, t)).collect();
            let (more, second) = suffixes(&usable, &columns, &facts, &derived);
            let mut all_derived = derived.clone();
            if !second.is_empty() {
                all_derived.extend(more);
                let then = env(all_derived.clone());
                for keys in second {
                    if let Some(d) = then.model(&catalog, &keys, &current, &mut statements) {
                        designs.push(d);
                    }
                }
            }
            let reads = first.reads;
            // Designs are compared on the statements every one of them
            // models; the others are listed as not modelled.
            let common: Vec<usize> = (0..reads.len())
                .filter(|&j| designs.iter().all(|(_, r)| r[j].is_some()))
                .collect();
            for (j, r) in reads.iter().enumerate() {
                if !common.contains(&j) {
                    statements[r.stmt]
                        .1
                        .get_or_insert_with(|| "not modelled under every design".to_owned());
                }
            }
            let rated = common
                .iter()
                .all(|&j| statements[reads[j].stmt].0.rate.is_some());
            let mut designs: Vec<Design> = designs
                .into_iter()
                .map(|(mut design, results)| {
                    let (mut weight, mut cost, mut time, mut load) = (0.0, 0.0, 0.0, 0.0);
                    for &j in &common {
                        let Some((class, per_call, secs)) = results[j] else {
                            continue;
                        };
                        let w = &statements[reads[j].stmt].0;
                        design.per_statement.push((class, per_call));
                        weight += w.weight;
                        cost += w.weight * per_call;
                        time += w.weight * secs;
                        load += w.rate.unwrap_or(0.0) * per_call;
                    }
                    if weight > 0.0 {
                        design.entities_per_call = cost / weight;
                        design.min_time = Duration::from_secs_f64(time / weight);
                    }
                    // Calls spread over the rows: the largest partition
                    // takes its share of the reads and inserts. Append-only
                    // inserts all go to the range partition at the end of
                    // the key order: one server takes them all.
                    if let Some(il) = insert_load
                        && rated
                        && total > 0
                        && (!common.is_empty() || il > 0.0)
                    {
                        let share = design.partitions.1 as f64 / total as f64;
                        design.load = Some(Load {
                            largest: (load + il) * share,
                            tail: design.append_only.map(|_| il),
                            total: load + il,
                        });
                    }
                    design
                })
                .collect();
            designs.sort_by_key(|d| d.rank_key(inserts, &ranking));
            // A rejected design is listed when it would have competed: it
            // reads less than three times what the recommended one reads
            // (or it is the table's design today).
            let best = designs
                .iter()
                .find(|d| d.rejected.is_none())
                .map(|d| d.entities_per_call.max(1.0));
            designs.retain(|d| {
                d.rejected.is_none()
                    || d.current
                    || best.is_none_or(|b| d.entities_per_call < b * 3.0)
            });
            for d in &mut designs {
                d.apply = d.apply_sql(&real, &all_derived);
            }
            let reads: Vec<usize> = common.iter().map(|&j| reads[j].stmt).collect();
            (designs, statements, reads)
        })
        .await
        .map_err(|e| {
            crate::error::PlanError::Store(tablegate_store::StoreError::Engine(e.to_string()))
        })?;
        let advice = second_copy(&designs, &statements, &reads);
        Ok(Report {
            table: real.name.clone(),
            total,
            statements,
            designs,
            advice,
            reads,
            inserts,
            targets,
        })
    }
}

/// What every design is modelled with.
struct Env<'a> {
    /// The table with the derived columns, and its sample with their
    /// values.
    aug: (TableDef, Sample),
    derived: Vec<Derived>,
    /// The workload's reads, rewritten for the derived keys.
    reads: Vec<Read>,
    units: &'a [writes::Unit],
    ranges: usize,
    servers: usize,
    page: usize,
}

type Modelled = Option<(AccessClass, f64, f64)>;

impl Env<'_> {
    /// One design: its model, verdict and each read's cost (`None`: not
    /// modelled under it).
    fn model(
        &self,
        catalog: &tablegate_catalog::Catalog,
        keys: &[String],
        current: &(String, Option<String>, bool),
        statements: &mut [(WorkloadStatement, Option<String>)],
    ) -> Option<(Design, Vec<Modelled>)> {
        let (real, sample) = (&self.aug.0, &self.aug.1);
        let def = Arc::new(real.rekeyed(keys).ok()?);
        let model = KeyModel::build(real, def.clone(), sample, self.ranges, self.servers);
        let mut design = Design {
            partition_key: keys[0].clone(),
            row_key: keys.get(1).cloned(),
            current: current.0 == keys[0] && current.1.as_ref() == keys.get(1) && !current.2,
            rejected: None,
            entities_per_call: 0.0,
            min_time: Duration::ZERO,
            partitions: model.partitions(),
            per_statement: Vec::new(),
            append_only: insert_pattern(&model.order_and_time()),
            derived: keys
                .iter()
                .filter_map(|k| self.derived.iter().find(|d| &d.name == k))
                .map(Derived::describe)
                .collect(),
            load: None,
            apply: None,
        };
        let split: Vec<&writes::Unit> = self
            .units
            .iter()
            .filter(|u| !u.atomic_under(&keys[0], &self.derived))
            .collect();
        if model.unkeyable > 0 {
            let nulls: Vec<String> = keys
                .iter()
                .filter_map(|k| {
                    let c = real.resolve(k).ok()?;
                    let n = sample
                        .entities
                        .iter()
                        .filter(|e| real.value_of(e, &c).is_none())
                        .count();
                    (n > 0).then(|| format!("{k} is NULL in {n}"))
                })
                .collect();
            design.rejected = Some(format!(
                "{} rows of the sample; a key column needs a value in every row",
                if nulls.is_empty() {
                    format!("{} keys cannot be stored in", model.unkeyable)
                } else {
                    nulls.join(" and ")
                }
            ));
        } else if model.duplicates > 0 {
            design.rejected = Some(format!(
                "not unique: {} rows of the sample share their key with another; add a column to the RowKey (a compound key, e.g. 'a__b')",
                model.duplicates
            ));
        } else if let Some(u) = split.first() {
            let head: String = u.sql.chars().take(60).collect();
            design.rejected = Some(format!(
                "{} of {} atomic writes would span PartitionKeys (e.g. {head}{}): an entity-group transaction holds one PartitionKey, so they would stop being atomic",
                split.len(),
                self.units.len(),
                if head.len() < u.sql.len() { "…" } else { "" }
            ));
        }
        let shadow = catalog.what_if((*def).clone());
        let mut results = Vec::with_capacity(self.reads.len());
        for r in &self.reads {
            // A statement the engine would run (ORDER BY other than the
            // keys', aggregates) still reads the table as its WHERE clause
            // says: model that access.
            let planned = match plan::plan_query(&shadow, &r.query, &r.sql) {
                Ok(plan::Routed::Bound(s)) if s.route == Route::Native => Ok(s),
                _ => match plan::plan_query(&shadow, &r.access, &r.sql) {
                    Ok(plan::Routed::Bound(s)) if s.route == Route::Native => Ok(s),
                    Ok(_) => Err("its WHERE clause needs the analytics engine".to_owned()),
                    Err(e) => Err(e.to_string()),
                },
            };
            let plan = match planned {
                Ok(s) => Arc::new(s),
                Err(why) => {
                    statements[r.stmt].1.get_or_insert(why);
                    results.push(None);
                    continue;
                }
            };
            let draws = if r.own_params == 0 { 1 } else { DRAWS };
            let (mut scanned, mut secs, mut n, mut class) = (0.0, 0.0, 0, None);
            for d in 0..draws {
                let Some(mut params) = draw(&plan, real, &sample.entities, d) else {
                    break;
                };
                for c in &r.computed {
                    let v = c.value(real, &self.derived, &params);
                    if let Some(slot) = params.get_mut(c.param) {
                        *slot = v;
                    }
                }
                let Ok(b) = plan.bind(&params) else {
                    continue;
                };
                let est = model.estimate(&b, self.page);
                scanned += est.scanned as f64;
                secs += est.min_time.as_secs_f64();
                n += 1;
                // The statement's class: the worst any draw gave.
                let c = b.access.class;
                if class.is_none_or(|k| class_order(c) > class_order(k)) {
                    class = Some(c);
                }
            }
            match class {
                Some(class) => {
                    results.push(Some((class, scanned / f64::from(n), secs / f64::from(n))))
                }
                None => {
                    statements[r.stmt].1.get_or_insert_with(|| {
                        "its parameters are not all compared with columns".to_owned()
                    });
                    results.push(None);
                }
            }
        }
        Some((design, results))
    }
}

/// The table access of a SELECT: the same FROM and WHERE, every column,
/// nothing after the scan (grouping, ordering, DISTINCT, LIMIT).
fn access_query(q: &sqlparser::ast::Query) -> sqlparser::ast::Query {
    use sqlparser::ast::{GroupByExpr, SelectItem, SetExpr, WildcardAdditionalOptions};
    let mut a = q.clone();
    a.with = None;
    a.order_by = None;
    a.limit_clause = None;
    a.fetch = None;
    if let SetExpr::Select(s) = &mut *a.body {
        s.projection = vec![SelectItem::Wildcard(WildcardAdditionalOptions::default())];
        s.distinct = None;
        s.group_by = GroupByExpr::Expressions(vec![], vec![]);
        s.having = None;
        s.named_window = vec![];
        s.qualify = None;
    }
    a
}

/// The seeds' duplicate-row pattern: when the best design leaves a
/// frequent read scanning many entities, the usable design that serves it
/// best, if it reads at least ten times fewer; one with the same
/// PartitionKey first, since only then can both copies be written in one
/// entity-group transaction. `reads` are the statements each design's
/// `per_statement` holds, in order.
fn second_copy(
    designs: &[Design],
    statements: &[(WorkloadStatement, Option<String>)],
    reads: &[usize],
) -> Vec<String> {
    let usable: Vec<&Design> = designs.iter().filter(|d| d.rejected.is_none()).collect();
    let Some(best) = usable.first() else {
        return Vec::new();
    };
    if reads.len() != best.per_statement.len() {
        return Vec::new();
    }
    let total: f64 = reads.iter().map(|&i| statements[i].0.weight).sum();
    let mut out = Vec::new();
    for (i, &stmt) in reads.iter().enumerate() {
        let w = &statements[stmt].0;
        let (class, cost) = best.per_statement[i];
        if w.weight < total * 0.1 || class_order(class) < 2 || cost < 10.0 {
            continue;
        }
        let serving = |same: bool| {
            usable
                .iter()
                .filter(|d| d.per_statement.len() == reads.len())
                .filter(|d| !same || d.partition_key == best.partition_key)
                .filter(|d| d.per_statement[i].1 * 10.0 <= cost)
                .min_by(|a, b| a.per_statement[i].1.total_cmp(&b.per_statement[i].1))
        };
        let Some(alt) = serving(true).or_else(|| serving(false)) else {
            continue;
        };
        let how = if alt.partition_key == best.partition_key {
            "the seeds' duplicate-row pattern: both copies share the PartitionKey, so one entity-group transaction writes them atomically"
        } else {
            "a second table or index keyed another way: its PartitionKey differs, so the two copies cannot be written in one transaction (the seeds' eventually consistent index-table pattern)"
        };
        out.push(format!(
            "{} reads {:.0} entities per call under {} ({}); a second copy of each row keyed by {} makes it {} reading {:.0} ({how})",
            w.sql,
            cost,
            best.name(),
            class.name(),
            alt.name(),
            alt.per_statement[i].0.name(),
            alt.per_statement[i].1
        ));
    }
    out
}

impl Report {
    /// The report as rows: rank, keys, verdict, the numbers, the reason.
    pub fn rows(&self) -> Vec<ReportRow> {
        let modelled = self.reads.len();
        let mut rank = 0;
        self.designs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let verdict = if d.rejected.is_some() {
                    "rejected"
                } else {
                    rank += 1;
                    if rank == 1 { "recommended" } else { "usable" }
                };
                let mut reason = d.reason(modelled, self.inserts, &self.targets);
                if i == 0 && d.rejected.is_none() {
                    for a in &self.advice {
                        reason.push_str("; ");
                        reason.push_str(a);
                    }
                    for (w, why) in &self.statements {
                        if let Some(why) = why {
                            let head: String = w.sql.chars().take(60).collect();
                            let cut = if head.len() < w.sql.len() { "…" } else { "" };
                            reason.push_str(&format!("; not modelled: {head}{cut} ({why})"));
                        }
                    }
                }
                ReportRow {
                    rank: (d.rejected.is_none()).then_some(rank),
                    partition_key: d.partition_key.clone(),
                    row_key: d.row_key.clone(),
                    current: d.current,
                    verdict,
                    entities_per_call: (d.entities_per_call * 10.0).round() / 10.0,
                    min_ms: (d.min_time.as_secs_f64() * 1e5).round() / 100.0,
                    partitions: d.partitions.0,
                    largest_partition: d.partitions.1,
                    largest_partition_load: d.load.map(|l| l.largest.round()),
                    apply_sql: d.apply.clone(),
                    entities_per_statement: d
                        .per_statement
                        .iter()
                        .map(|(_, n)| (n * 10.0).round() / 10.0)
                        .collect(),
                    reason,
                }
            })
            .collect()
    }
}

/// One row of `tablegate.advise(…)`.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportRow {
    /// 1 for the recommended design; `None` for rejected ones.
    pub rank: Option<usize>,
    /// PartitionKey column.
    pub partition_key: String,
    /// RowKey column.
    pub row_key: Option<String>,
    /// The table's design today.
    pub current: bool,
    /// recommended, usable or rejected.
    pub verdict: &'static str,
    /// Entities read per call, weighted.
    pub entities_per_call: f64,
    /// Minimum milliseconds per call at the throttling targets, weighted.
    pub min_ms: f64,
    /// PartitionKeys in the sample.
    pub partitions: u64,
    /// Entities of the largest partition.
    pub largest_partition: u64,
    /// Entities per second its largest partition would serve at the
    /// workload's rates (when known).
    pub largest_partition_load: Option<f64>,
    /// The SQL that creates a table keyed this way and copies the rows.
    pub apply_sql: Option<String>,
    /// Entities each modelled read reads per call (the reads in workload
    /// order).
    pub entities_per_statement: Vec<f64>,
    /// Why, in the seeds' terms.
    pub reason: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workload_files_split_on_semicolons_with_weights() {
        let w = parse_workload(
            "-- weight: 10\nSELECT a FROM t WHERE b = 'x;y';\nSELECT 1; -- one\n/* weight 2.5 */ SELECT c\n FROM t /* cut */",
        );
        let got: Vec<(&str, f64)> = w.iter().map(|s| (s.sql.as_str(), s.weight)).collect();
        assert_eq!(
            got,
            [
                ("SELECT a FROM t WHERE b = 'x;y'", 10.0),
                ("SELECT 1", 1.0),
                ("SELECT c\n FROM t", 2.5)
            ]
        );
    }

    #[test]
    fn an_insert_order_at_the_end_of_the_keys_is_append_only() {
        // (index in key order, time): time follows the key order.
        let rows: Vec<(usize, i64)> = (0..1000).map(|i| (i, i as i64)).collect();
        assert_eq!(insert_pattern(&rows), Some("append-only"));
        let rows: Vec<(usize, i64)> = (0..1000).map(|i| (i, -(i as i64))).collect();
        assert_eq!(insert_pattern(&rows), Some("prepend-only"));
        let rows: Vec<(usize, i64)> = (0..1000).map(|i| (i, ((i * 7919) % 1000) as i64)).collect();
        assert_eq!(insert_pattern(&rows), None);
    }
}
