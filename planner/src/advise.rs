//! The key-design advisor: from a workload and the table's own data, which
//! PartitionKey and RowKey to choose (`SELECT * FROM tablegate.advise(…)`).
//!
//! It follows the seeds' method. Every key-capable column, alone and in
//! every ordered pair, is a candidate design; each is modelled on a sample
//! of the table ([`crate::whatif::KeyModel`]), and every statement of the
//! workload that reads the table is planned against it and estimated with
//! EXPLAIN's estimator. A statement's parameters (`$n`, as the statement
//! log records them) are drawn from the table's own rows: the value of the
//! column each one is compared with, in [`DRAWS`] rows spread over the
//! sample. Designs are then ranked by entities read per call, weighted by
//! how often each statement runs; a design is rejected when it cannot hold
//! the data (a key column with NULLs, keys that are not unique), and
//! flagged when its insert order is append-only (the newest rows all land
//! at the end of the key order: one hot partition at a time). When the
//! best design leaves a frequent statement scanning, the report names the
//! design that would serve it: the seeds' duplicate-row pattern.

use std::cmp::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tablegate_catalog::TableDef;
use tablegate_store::{CmpOp, Entity, Value};

use crate::error::Result;
use crate::expr::BExpr;
use crate::keys::AccessClass;
use crate::plan::{self, Route, SelectPlan};
use crate::whatif::{KeyModel, Sample};
use crate::{Planner, whatif};

/// Entities a candidate is modelled on (a stride over the what-if sample).
pub const ADVISE_SAMPLE: usize = 20_000;
/// Parameter draws per statement.
pub const DRAWS: usize = 8;
/// Key-capable columns considered; more are narrowed to those the workload
/// filters on.
const MAX_COLUMNS: usize = 6;

/// One statement of a workload.
#[derive(Debug, Clone)]
pub struct WorkloadStatement {
    /// Its SQL (`$n` parameters allowed).
    pub sql: String,
    /// How often it runs, relative to the others.
    pub weight: f64,
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
}

impl Design {
    fn name(&self) -> String {
        match &self.row_key {
            Some(rk) => format!("({}, {rk})", self.partition_key),
            None => format!("({})", self.partition_key),
        }
    }

    /// Ranking: usable designs first, then the fewest entities per call,
    /// then append-only designs after their equals.
    fn rank_key(&self) -> (bool, u64, bool, u64) {
        (
            self.rejected.is_some(),
            (self.entities_per_call * 100.0).round() as u64,
            self.append_only.is_some(),
            self.min_time.as_micros() as u64,
        )
    }

    /// One line on why the design ranks where it does, in the seeds' terms.
    pub fn reason(&self, statements: usize) -> String {
        if let Some(r) = &self.rejected {
            return format!("rejected: {r}");
        }
        let mut classes: Vec<(AccessClass, usize)> = Vec::new();
        for (c, _) in &self.per_statement {
            match classes.iter_mut().find(|(k, _)| k == c) {
                Some((_, n)) => *n += 1,
                None => classes.push((*c, 1)),
            }
        }
        classes.sort_by_key(|(c, _)| class_order(*c));
        let mut parts: Vec<String> = classes
            .iter()
            .map(|(c, n)| format!("{} {n} of {statements}", c.name()))
            .collect();
        if let Some(a) = self.append_only {
            parts.push(format!(
                "{a}: the newest rows all go to the {} of the key order, one hot partition at a time (at most 2,000 entities/s); prefix the key with a hash bucket or invert it",
                if a == "append-only" { "end" } else { "start" }
            ));
        }
        if self.partitions.1 > crate::explain::LARGE_PARTITION {
            parts.push(format!(
                "its largest partition holds {} entities",
                self.partitions.1
            ));
        }
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
/// statement sets how often it runs (1 when absent). Other comments are
/// dropped.
pub fn parse_workload(text: &str) -> Vec<WorkloadStatement> {
    fn weight_of(comment: &str) -> Option<f64> {
        let w = comment.trim().strip_prefix("weight")?;
        w.trim_start_matches([':', '=', ' '])
            .trim()
            .parse::<f64>()
            .ok()
    }
    let mut out = Vec::new();
    let (mut sql, mut weight) = (String::new(), 1.0);
    let mut push = |sql: &mut String, weight: &mut f64| {
        if !sql.trim().is_empty() {
            out.push(WorkloadStatement {
                sql: sql.trim().to_owned(),
                weight: *weight,
            });
        }
        sql.clear();
        *weight = 1.0;
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
            if let Some(w) = weight_of(body) {
                weight = w.max(0.0);
            }
            rest = after;
            continue;
        }
        match ch {
            '\'' => {
                quoted = !quoted;
                sql.push(ch);
            }
            ';' if !quoted => push(&mut sql, &mut weight),
            _ => sql.push(ch),
        }
        rest = &rest[ch.len_utf8()..];
    }
    push(&mut sql, &mut weight);
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
        let servers = self.store.partitioned().map_or(1, |p| p.config().servers);
        // The workload's statements that read this table natively under
        // some design; parsed once.
        let mut statements = Vec::new();
        let mut parsed = Vec::new();
        for w in workload {
            let why = match Planner::parse(&w.sql) {
                Ok(mut v) if v.len() == 1 => match v.remove(0) {
                    sqlparser::ast::Statement::Query(q) => match whatif::single_table(&q) {
                        Ok(t) if t == real.name.to_ascii_lowercase() => {
                            let access = access_query(&q);
                            parsed.push((statements.len(), q, access, w.sql.clone()));
                            None
                        }
                        Ok(_) => Some("reads another table".to_owned()),
                        Err(_) => Some("not a SELECT from one table".to_owned()),
                    },
                    _ => Some("not a SELECT: writes are not modelled yet".to_owned()),
                },
                Ok(_) => Some("several statements".to_owned()),
                Err(e) => Some(format!("does not parse: {e}")),
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
                        || parsed.iter().any(|(.., sql)| sql.contains(c.as_str()))
                })
                .cloned()
                .collect();
            columns = filtered.into_iter().take(MAX_COLUMNS).collect();
        }
        let mut candidates: Vec<Vec<String>> = Vec::new();
        for pk in &columns {
            candidates.push(vec![pk.clone()]);
            for rk in &columns {
                if rk != pk {
                    candidates.push(vec![pk.clone(), rk.clone()]);
                }
            }
        }
        let page = crate::exec::ExecOptions::default().page_size;
        let total = sample.total;
        let real2 = real.clone();
        let catalog = self.catalog.clone();
        let (designs, statements) = tokio::task::spawn_blocking(move || {
            let real = real2;
            let mut designs = Vec::new();
            let mut statements = statements;
            for keys in candidates {
                let Ok(def) = real.rekeyed(&keys) else {
                    continue;
                };
                let def = Arc::new(def);
                let model = KeyModel::build(&real, def.clone(), &sample, ranges, servers);
                let mut design = Design {
                    partition_key: keys[0].clone(),
                    row_key: keys.get(1).cloned(),
                    current: real.partition_key == keys[0]
                        && real.row_key.as_ref() == keys.get(1)
                        && !real.keyless(),
                    rejected: None,
                    entities_per_call: 0.0,
                    min_time: Duration::ZERO,
                    partitions: model.partitions(),
                    per_statement: Vec::new(),
                    append_only: insert_pattern(&model.order_and_time()),
                };
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
                }
                let shadow = catalog.what_if((*def).clone());
                let mut results = Vec::with_capacity(parsed.len());
                for (i, q, access, sql) in &parsed {
                    // A statement the engine would run (ORDER BY other than
                    // the keys', aggregates) still reads the table as its
                    // WHERE clause says: model that access.
                    let planned = match plan::plan_query(&shadow, q, sql) {
                        Ok(plan::Routed::Bound(s)) if s.route == Route::Native => Ok(s),
                        _ => match plan::plan_query(&shadow, access, sql) {
                            Ok(plan::Routed::Bound(s)) if s.route == Route::Native => Ok(s),
                            Ok(_) => Err("its WHERE clause needs the analytics engine".to_owned()),
                            Err(e) => Err(e.to_string()),
                        },
                    };
                    let plan = match planned {
                        Ok(s) => Arc::new(s),
                        Err(why) => {
                            statements[*i].1.get_or_insert(why);
                            results.push(None);
                            continue;
                        }
                    };
                    let draws = if plan.param_types.is_empty() { 1 } else { DRAWS };
                    let (mut scanned, mut secs, mut n, mut class) = (0.0, 0.0, 0, None);
                    for d in 0..draws {
                        let Some(params) = draw(&plan, &real, &sample.entities, d) else {
                            break;
                        };
                        let Ok(b) = plan.bind(&params) else {
                            continue;
                        };
                        let est = model.estimate(&b, page);
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
                        Some(class) => results.push(Some((
                            class,
                            scanned / f64::from(n),
                            secs / f64::from(n),
                        ))),
                        None => {
                            statements[*i].1.get_or_insert_with(|| {
                                "its parameters are not all compared with columns".to_owned()
                            });
                            results.push(None);
                        }
                    }
                }
                designs.push((design, results));
            }
            // Designs are compared on the statements every one of them
            // models; the others are listed as not modelled.
            let common: Vec<usize> = (0..parsed.len())
                .filter(|&j| designs.iter().all(|(_, r)| r[j].is_some()))
                .collect();
            for (j, (i, ..)) in parsed.iter().enumerate() {
                if !common.contains(&j) {
                    statements[*i]
                        .1
                        .get_or_insert_with(|| "not modelled under every design".to_owned());
                }
            }
            let mut designs: Vec<Design> = designs
                .into_iter()
                .map(|(mut design, results)| {
                    let (mut weight, mut cost, mut time) = (0.0, 0.0, 0.0);
                    for &j in &common {
                        let Some((class, per_call, secs)) = results[j] else {
                            continue;
                        };
                        let w = statements[parsed[j].0].0.weight;
                        design.per_statement.push((class, per_call));
                        weight += w;
                        cost += w * per_call;
                        time += w * secs;
                    }
                    if weight > 0.0 {
                        design.entities_per_call = cost / weight;
                        design.min_time = Duration::from_secs_f64(time / weight);
                    }
                    design
                })
                .collect();
            designs.sort_by_key(Design::rank_key);
            (designs, statements)
        })
        .await
        .map_err(|e| {
            crate::error::PlanError::Store(tablegate_store::StoreError::Engine(e.to_string()))
        })?;
        let advice = second_copy(&designs, &statements);
        Ok(Report {
            table: real.name.clone(),
            total,
            statements,
            designs,
            advice,
        })
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
/// frequent statement reading many entities, the usable design that serves
/// it best, if it reads at least ten times fewer.
fn second_copy(
    designs: &[Design],
    statements: &[(WorkloadStatement, Option<String>)],
) -> Vec<String> {
    let usable: Vec<&Design> = designs.iter().filter(|d| d.rejected.is_none()).collect();
    let Some(best) = usable.first() else {
        return Vec::new();
    };
    let modelled: Vec<&WorkloadStatement> = statements
        .iter()
        .filter(|(_, why)| why.is_none())
        .map(|(w, _)| w)
        .collect();
    if modelled.len() != best.per_statement.len() {
        return Vec::new();
    }
    let total: f64 = modelled.iter().map(|w| w.weight).sum();
    let mut out = Vec::new();
    for (i, w) in modelled.iter().enumerate() {
        let (class, cost) = best.per_statement[i];
        if w.weight < total * 0.1 || class_order(class) < 3 || cost < 10.0 {
            continue;
        }
        let alt = usable
            .iter()
            .filter(|d| d.per_statement.len() == modelled.len())
            .min_by(|a, b| a.per_statement[i].1.total_cmp(&b.per_statement[i].1));
        if let Some(alt) = alt
            && alt.per_statement[i].1 * 10.0 <= cost
        {
            out.push(format!(
                "{} reads {:.0} entities per call under {} ({}); a second copy of each row keyed by {} (the seeds' duplicate-row pattern, written in the same entity-group transaction) makes it {} reading {:.0}",
                w.sql,
                cost,
                best.name(),
                class.name(),
                alt.name(),
                alt.per_statement[i].0.name(),
                alt.per_statement[i].1
            ));
        }
    }
    out
}

impl Report {
    /// The report as rows: rank, keys, verdict, the numbers, the reason.
    pub fn rows(&self) -> Vec<ReportRow> {
        let modelled = self.statements.iter().filter(|(_, w)| w.is_none()).count();
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
                let mut reason = d.reason(modelled);
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
