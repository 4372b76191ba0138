//! A store [`Query`] as what the Table service understands: an OData
//! `$filter` and `$select` ([`translate`]), and the OData literal of every
//! EDM value ([`literal`]).
//!
//! The filter sent is only ever *broader* than the query, never narrower:
//! every entity the service returns is re-checked with [`Query::selects`],
//! so one let through wrongly costs a little bandwidth, while one wrongly
//! left out would be a wrong answer. Hence:
//! - predicates with no OData form (IS NULL, ILIKE, NaN, ...) are dropped
//!   from a conjunction, and a disjunction or negation holding one is
//!   dropped whole;
//! - a numeric comparison is sent once, in the literal's own EDM type
//!   (`x eq 5`, `x eq 5L`, `x eq 5.0`), and is exact. The service compares
//!   a property only with a constant of its own EDM type, and so does SQL
//!   here: the planner gives every constant in a residual filter the EDM
//!   type of the column it is compared with, with the same SQL meaning
//!   (`x > 2.5` on an Int32 column is `x > 2`), and a property stored with
//!   another EDM type than its column's reads as NULL (the catalog's
//!   `value_of` filters by type), so it satisfies no comparison in SQL
//!   either. [`Query::selects`] itself still compares across numeric types
//!   (Int64 2 matches an Int32 property 2), so "never narrower than
//!   `Query::selects`" holds under that precondition: a numeric literal
//!   compared with a property has the EDM type of the property's value
//!   whenever that value should count. The comparison must not also be
//!   sent in the other numeric types: Azurite (3.37) fails with HTTP 500
//!   (`otherValue.startsWith is not a function`) when an Int64 literal
//!   meets an Int32 property, which broke every numeric filter;
//! - the service keeps DateTimes to 100 ns, the store to the microsecond
//!   (truncating), so `t = v` is sent as `t ge v and t lt v+1µs`;
//! - over the 15-comparison limit ([`MAX_COMPARISONS`]) residual conjuncts
//!   are dropped, then the key spans are replaced by their bounding box.
//!
//! Negation needs care: SQL's `NOT (x = 5)` is unknown for an entity
//! without `x`, OData's `not (x eq 5)` is true. A negation is sent only
//! around an *exact* translation, one that agrees with SQL wherever SQL's
//! answer is known (true or false) and may say anything where it is
//! unknown. Its negation then errs only where SQL is unknown, which the
//! local re-check rejects anyway. A *broadened* translation (something
//! dropped, LIKE as a prefix range) is never negated: that would narrow it.
//!
//! Known gaps in the service's semantics, not modelled: the ordering of a
//! stored NaN (PostgreSQL puts it above every number, so `x > 1.0` selects
//! it, the service may not), and string order for characters above U+FFFF
//! against U+E000..=U+FFFF (code points here, possibly UTF-16 units there).
//!
//! Internally: [`Filter`] → `Tr` (an `OExpr` tree and whether it is
//! exact) → `Plan` (spans, residual, the limit) → text. Tests evaluate the
//! tree with the service's semantics against random entities.

use std::cmp::Ordering;
use std::fmt::Write as _;
use std::ops::Bound;

use tablegate_store::entity::guid_text;

use crate::conn::Service;
use tablegate_store::{CmpOp, DateTime, Field, Filter, KeyBox, KeyInterval, Query, Value};

/// The most comparisons the service accepts in one $filter.
pub const MAX_COMPARISONS: usize = 15;

/// What is sent to the service for one query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ODataQuery {
    /// The `$filter` expression, `None` = no filter (whole table).
    pub filter: Option<String>,
    /// Comparisons in `filter`.
    pub comparisons: usize,
    /// How much of the query the filter carries.
    pub coverage: Coverage,
    /// `$select` list (comma-separated property names), `None` = all properties.
    pub select: Option<String>,
}

/// How much of a query its `$filter` carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Coverage {
    /// Key spans and the residual filter are both in `filter` exactly (the
    /// local re-check is only a safety net).
    Exact,
    /// Key spans are exact, part or all of the residual is finished locally
    /// (untranslatable predicates, or a negation: see the module docs).
    ResidualLocal,
    /// The 15-comparison limit was exceeded: a broader filter was sent (the
    /// spans with only the residual conjuncts that fit, or the bounding box
    /// of the spans, or nothing), keys and residual are finished locally.
    Broadened,
}

/// Translates a query. `query.spans` is never empty here (the caller
/// short-circuits empty queries); if every box is empty anyway, the filter
/// asks for nothing (`PartitionKey lt ''`).
pub fn translate(query: &Query, service: Service) -> ODataQuery {
    let plan = plan(query, service);
    ODataQuery {
        filter: plan.filter.as_ref().map(OExpr::text),
        comparisons: plan.filter.as_ref().map_or(0, OExpr::comparisons),
        coverage: plan.coverage,
        select: select_list(query),
    }
}

/// An OData literal for a value: 'text' (single quotes doubled), 42
/// (Int32), 42L (Int64), 1.5 / 2.0 (Double: plain digits, always with a '.' or
/// an exponent so it parses as Edm.Double), true/false,
/// datetime'2026-11-24T08:00:00.123456Z', guid'xxxxxxxx-xxxx-...', X'00ff'
/// (binary). `None` for values that have no OData literal: Double NaN and
/// ±infinity, and DateTimes outside the EDM range.
pub fn literal(v: &Value) -> Option<String> {
    Some(match v {
        Value::String(s) => quote(s),
        Value::Int32(i) => i.to_string(),
        Value::Int64(i) => format!("{i}L"),
        Value::Double(d) => double_literal(*d)?,
        Value::Boolean(b) => b.to_string(),
        Value::DateTime(t) if t.in_range() => format!("datetime'{t}'"),
        Value::DateTime(_) => return None,
        Value::Guid(g) => format!("guid'{}'", guid_text(g)),
        Value::Binary(b) => {
            let mut s = String::with_capacity(2 * b.len() + 3);
            s.push_str("X'");
            for byte in b {
                let _ = write!(s, "{byte:02x}");
            }
            s.push('\'');
            s
        }
    })
}

fn quote(s: &str) -> String {
    format!("'{}'", crate::http::quote(s))
}

fn double_literal(d: f64) -> Option<String> {
    if !d.is_finite() {
        return None;
    }
    // Display writes plain decimal digits, never an exponent, and reads
    // back as the same double: Azurite's lexer does not know `1E+20`. A
    // '.' keeps it an Edm.Double ("2.0").
    let s = format!("{d}");
    Some(if s.contains('.') { s } else { format!("{s}.0") })
}

/// A `$filter` expression as a tree; rendered once, evaluated in tests.
/// `And`/`Or` are built flat (no `And` directly inside an `And`).
#[derive(Debug, Clone, PartialEq)]
enum OExpr {
    /// `field op literal`; `text` is `literal(value)`, which exists.
    Cmp {
        field: Field,
        op: CmpOp,
        value: Value,
        text: String,
    },
    And(Vec<OExpr>),
    Or(Vec<OExpr>),
    Not(Box<OExpr>),
}

impl OExpr {
    /// `field op value`, `None` when the value has no literal.
    fn cmp(field: &Field, op: CmpOp, value: Value) -> Option<OExpr> {
        Some(OExpr::Cmp {
            field: field.clone(),
            op,
            text: literal(&value)?,
            value,
        })
    }

    /// `field op 'text'` (every string has a literal).
    fn string(field: &Field, op: CmpOp, s: &str) -> OExpr {
        OExpr::Cmp {
            field: field.clone(),
            op,
            value: Value::String(s.to_owned()),
            text: quote(s),
        }
    }

    fn comparisons(&self) -> usize {
        match self {
            OExpr::Cmp { .. } => 1,
            OExpr::And(cs) | OExpr::Or(cs) => cs.iter().map(OExpr::comparisons).sum(),
            OExpr::Not(c) => c.comparisons(),
        }
    }

    fn text(&self) -> String {
        let mut out = String::new();
        self.render(&mut out);
        out
    }

    fn render(&self, out: &mut String) {
        match self {
            OExpr::Cmp {
                field, op, text, ..
            } => {
                let _ = write!(out, "{} {} {text}", field_name(field), op_name(*op));
            }
            OExpr::And(cs) | OExpr::Or(cs) => {
                let sep = if matches!(self, OExpr::And(_)) {
                    " and "
                } else {
                    " or "
                };
                for (i, c) in cs.iter().enumerate() {
                    if i > 0 {
                        out.push_str(sep);
                    }
                    // `and` binds tighter than `or`, but every compound
                    // child gets parentheses: clearer, and never wrong.
                    if matches!(c, OExpr::And(_) | OExpr::Or(_)) {
                        out.push('(');
                        c.render(out);
                        out.push(')');
                    } else {
                        c.render(out);
                    }
                }
            }
            OExpr::Not(c) => {
                out.push_str("not (");
                c.render(out);
                out.push(')');
            }
        }
    }
}

/// The conjunction of `parts`, flattened; `None` (true) when empty.
fn all_of(parts: Vec<OExpr>) -> Option<OExpr> {
    let mut flat = Vec::with_capacity(parts.len());
    for p in parts {
        match p {
            OExpr::And(cs) => flat.extend(cs),
            p => flat.push(p),
        }
    }
    match flat.len() {
        0 => None,
        1 => flat.pop(),
        _ => Some(OExpr::And(flat)),
    }
}

/// The disjunction of `parts`, flattened; `None` (false) when empty.
fn any_of(parts: Vec<OExpr>) -> Option<OExpr> {
    let mut flat = Vec::with_capacity(parts.len());
    for p in parts {
        match p {
            OExpr::Or(cs) => flat.extend(cs),
            p => flat.push(p),
        }
    }
    match flat.len() {
        0 => None,
        1 => flat.pop(),
        _ => Some(OExpr::Or(flat)),
    }
}

/// Nothing: no key is below the empty string.
fn never() -> OExpr {
    OExpr::string(&Field::PartitionKey, CmpOp::Lt, "")
}

fn field_name(f: &Field) -> &str {
    match f {
        Field::PartitionKey => "PartitionKey",
        Field::RowKey => "RowKey",
        Field::Timestamp => "Timestamp",
        // Never sent: the service cannot filter on it (`compare` drops it
        // and the local re-check compares the tags).
        Field::ETag => "ETag",
        Field::Property(p) => p,
    }
}

fn op_name(op: CmpOp) -> &'static str {
    match op {
        CmpOp::Eq => "eq",
        CmpOp::Ne => "ne",
        CmpOp::Lt => "lt",
        CmpOp::Le => "le",
        CmpOp::Gt => "gt",
        CmpOp::Ge => "ge",
    }
}

fn holds(op: CmpOp, o: Ordering) -> bool {
    match op {
        CmpOp::Eq => o == Ordering::Equal,
        CmpOp::Ne => o != Ordering::Equal,
        CmpOp::Lt => o == Ordering::Less,
        CmpOp::Le => o != Ordering::Greater,
        CmpOp::Gt => o == Ordering::Greater,
        CmpOp::Ge => o != Ordering::Less,
    }
}

/// A name that can stand bare in a `$filter` or `$select`: what the store
/// accepts as a property name (letters, digits, `_`), so nothing in it can
/// change the expression's meaning.
fn identifier(name: &str) -> bool {
    name.starts_with(|c: char| c.is_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_alphanumeric() || c == '_')
}

fn system_name(name: &str) -> bool {
    ["PartitionKey", "RowKey", "Timestamp"]
        .iter()
        .any(|s| s.eq_ignore_ascii_case(name))
}

/// A residual predicate, translated.
#[derive(Debug)]
enum Tr {
    /// Nothing to send. `exact` when the predicate really always holds;
    /// not exact when something untranslatable was dropped.
    True { exact: bool },
    /// Never holds where SQL's answer is known (so it never selects).
    False,
    /// `exact`: agrees with SQL wherever SQL's answer is known; otherwise
    /// only broader (true wherever SQL is true).
    Expr { expr: OExpr, exact: bool },
}

/// An untranslatable predicate: no constraint, not exact.
const DROPPED: Tr = Tr::True { exact: false };

fn exact(e: Option<OExpr>) -> Tr {
    match e {
        Some(expr) => Tr::Expr { expr, exact: true },
        None => DROPPED,
    }
}

fn translate_filter(f: &Filter, service: Service) -> Tr {
    // Cosmos DB answers no condition on Timestamp (an empty result, no
    // error): finished locally there.
    if let Filter::Compare { field, .. } | Filter::In { field, .. } | Filter::Like { field, .. } = f
        && service == Service::Cosmos
        && *field == Field::Timestamp
    {
        return DROPPED;
    }
    match f {
        Filter::True => Tr::True { exact: true },
        Filter::False => Tr::False,
        Filter::And(fs) => conjunction(fs.iter().map(|f| translate_filter(f, service))),
        Filter::Or(fs) => disjunction(fs.iter().map(|f| translate_filter(f, service))),
        Filter::Not(inner) => match translate_filter(inner, service) {
            Tr::True { exact: true } => Tr::False,
            Tr::False => Tr::True { exact: true },
            Tr::Expr { expr, exact: true } => Tr::Expr {
                expr: OExpr::Not(Box::new(expr)),
                exact: true,
            },
            // Negating something broadened would narrow it.
            Tr::True { exact: false } | Tr::Expr { exact: false, .. } => DROPPED,
        },
        Filter::Compare { field, op, value } => compare(field, *op, value),
        // `f IN (a, b)` is `f = a OR f = b`, unknowns included.
        Filter::In { field, values } => {
            disjunction(values.iter().map(|v| compare(field, CmpOp::Eq, v)))
        }
        // The service cannot test for a missing property.
        Filter::IsNull(_) | Filter::IsNullAs(..) => DROPPED,
        Filter::Like {
            field,
            pattern,
            escape,
            case_insensitive,
        } => like(field, pattern, *escape, *case_insensitive),
    }
}

fn negates(f: &Filter) -> bool {
    match f {
        Filter::Not(_) => true,
        Filter::And(fs) | Filter::Or(fs) => fs.iter().any(negates),
        _ => false,
    }
}

/// AND: a dropped child only broadens; a false child makes it false.
fn conjunction(parts: impl Iterator<Item = Tr>) -> Tr {
    let mut exprs = Vec::new();
    let mut all_exact = true;
    for p in parts {
        match p {
            Tr::False => return Tr::False,
            Tr::True { exact } => all_exact &= exact,
            Tr::Expr { expr, exact } => {
                exprs.push(expr);
                all_exact &= exact;
            }
        }
    }
    match all_of(exprs) {
        None => Tr::True { exact: all_exact },
        Some(expr) => Tr::Expr {
            expr,
            exact: all_exact,
        },
    }
}

/// OR: a false child can be left out; a dropped child drops the whole OR
/// (anything could satisfy it), unless a child always holds.
fn disjunction(parts: impl Iterator<Item = Tr>) -> Tr {
    let mut exprs = Vec::new();
    let mut all_exact = true;
    let mut dropped = false;
    for p in parts {
        match p {
            Tr::False => {}
            Tr::True { exact: true } => return Tr::True { exact: true },
            Tr::True { exact: false } => dropped = true,
            Tr::Expr { expr, exact } => {
                exprs.push(expr);
                all_exact &= exact;
            }
        }
    }
    if dropped {
        return DROPPED;
    }
    match any_of(exprs) {
        None => Tr::False,
        Some(expr) => Tr::Expr {
            expr,
            exact: all_exact,
        },
    }
}

/// `field op value` with SQL's meaning, in the service's type-strict terms.
fn compare(field: &Field, op: CmpOp, value: &Value) -> Tr {
    let property = match field {
        Field::Property(p) if !identifier(p) || system_name(p) => return DROPPED,
        Field::Property(_) => true,
        _ => false,
    };
    let key = matches!(field, Field::PartitionKey | Field::RowKey);
    match value {
        Value::String(s) if key || property => match ordered(field, op, s) {
            (expr, false) => exact(expr),
            (Some(expr), true) => Tr::Expr { expr, exact: false },
            (None, true) => DROPPED,
        },
        Value::DateTime(t) if !key => datetime(field, op, *t),
        Value::Int32(_) | Value::Int64(_) | Value::Double(_) if property => {
            numeric(field, op, value)
        }
        Value::Boolean(b) if property => boolean(field, op, *b),
        // Equality is all we trust the service with for these: its order
        // of GUIDs and byte strings is not documented.
        Value::Guid(_) | Value::Binary(_) if property && matches!(op, CmpOp::Eq | CmpOp::Ne) => {
            exact(OExpr::cmp(field, op, value.clone()))
        }
        // SQL never matches these (a key is a String, the Timestamp a
        // DateTime): nothing is lost by dropping them.
        _ => DROPPED,
    }
}

/// The service keeps 100 ns ticks and the store truncates to microseconds,
/// so a stored `a` is read as `t = floor(a)`: `t <= v` is `a < v+1µs`,
/// `t > v` is `a >= v+1µs` and `t = v` is `v <= a < v+1µs`.
fn datetime(field: &Field, op: CmpOp, t: DateTime) -> Tr {
    // Azurite compares DateTimes as JavaScript Dates (milliseconds), the
    // service in 100 ns ticks and the store reads microseconds: bounds go
    // out on whole milliseconds, widened outwards, and the local re-check
    // restores exactness (so the result is not exact, and never negated).
    let floor = |us: i64| Value::DateTime(DateTime(us.div_euclid(1000).saturating_mul(1000)));
    let ceil = |us: i64| {
        Value::DateTime(DateTime(
            (-us.saturating_neg().div_euclid(1000)).saturating_mul(1000),
        ))
    };
    let lo = |us: i64| OExpr::cmp(field, CmpOp::Ge, floor(us));
    let hi = |us: i64| OExpr::cmp(field, CmpOp::Lt, ceil(us));
    let next = t.0.saturating_add(1);
    // A `None` below is a DateTime outside the EDM range: dropped.
    let e = match op {
        CmpOp::Lt => hi(t.0),
        CmpOp::Ge => lo(t.0),
        CmpOp::Le => hi(next),
        CmpOp::Gt => lo(next),
        CmpOp::Eq => lo(t.0).zip(hi(next)).and_then(|(a, b)| all_of(vec![a, b])),
        CmpOp::Ne => hi(t.0).zip(lo(next)).and_then(|(a, b)| any_of(vec![a, b])),
    };
    match e {
        Some(expr) => Tr::Expr { expr, exact: false },
        None => DROPPED,
    }
}

/// Booleans as equalities (the service's ordering of booleans is not
/// documented): the set of booleans that satisfy the comparison.
fn boolean(field: &Field, op: CmpOp, b: bool) -> Tr {
    let parts: Vec<OExpr> = [false, true]
        .into_iter()
        .filter(|x| holds(op, x.cmp(&b)))
        .filter_map(|x| OExpr::cmp(field, CmpOp::Eq, Value::Boolean(x)))
        .collect();
    match any_of(parts) {
        None => Tr::False,
        Some(expr) => Tr::Expr { expr, exact: true },
    }
}

/// A number in its own EDM type only (`x ge 2`, `x ge 2L`, `x ge 2.0`; see
/// the module docs), exact. NaN and ±infinity have no literal: dropped.
fn numeric(field: &Field, op: CmpOp, value: &Value) -> Tr {
    exact(OExpr::cmp(field, op, value.clone()))
}

/// Case-sensitive LIKE as the range of its literal prefix (broader unless
/// there is no wildcard at all, when it is an equality).
fn like(field: &Field, pattern: &str, escape: Option<char>, case_insensitive: bool) -> Tr {
    let usable = match field {
        Field::PartitionKey | Field::RowKey => true,
        Field::Property(p) => identifier(p) && !system_name(p),
        Field::Timestamp | Field::ETag => false,
    };
    if case_insensitive || !usable {
        return DROPPED;
    }
    let mut prefix = String::new();
    let mut wildcard = false;
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            // A trailing escape matches itself, as in `filter::like`.
            prefix.push(chars.next().unwrap_or(c));
        } else if c == '%' || c == '_' {
            wildcard = true;
            break;
        } else {
            prefix.push(c);
        }
    }
    if !wildcard {
        return exact(Some(OExpr::string(field, CmpOp::Eq, &prefix)));
    }
    // Every string starting with the prefix is at or above it in either
    // order; the top is the code-point successor, which `ordered` widens
    // where UTF-16 order differs.
    let mut parts = vec![OExpr::string(field, CmpOp::Ge, &prefix)];
    if let Bound::Excluded(hi) = KeyInterval::prefix(&prefix).hi {
        parts.extend(ordered(field, CmpOp::Lt, &hi).0);
    }
    match all_of(parts) {
        Some(expr) => Tr::Expr { expr, exact: false },
        None => DROPPED,
    }
}

/// A translated query before rendering.
#[derive(Debug)]
struct Plan {
    filter: Option<OExpr>,
    coverage: Coverage,
}

fn plan(query: &Query, service: Service) -> Plan {
    let mut boxes: Vec<&KeyBox> = Vec::new();
    for b in &query.spans {
        if !b.pk.is_empty() && !b.rk.is_empty() && !boxes.contains(&b) {
            boxes.push(b);
        }
    }
    let nothing = Plan {
        filter: Some(never()),
        coverage: Coverage::Exact,
    };
    if boxes.is_empty() {
        return nothing;
    }
    let (residual, exact) = match query.filter.as_ref().map(|f| translate_filter(f, service)) {
        None => (None, true),
        Some(Tr::False) => return nothing,
        Some(Tr::True { exact }) => (None, exact),
        Some(Tr::Expr { expr, exact }) => (Some(expr), exact),
    };
    // Under a negation "exact" holds only where SQL's answer is known (see
    // the module docs): without one, the service is false wherever SQL is
    // unknown too, so it returns exactly what the query selects.
    let residual_exact = exact && !query.filter.as_ref().is_some_and(negates);
    let spans = span_filter(&boxes);
    let whole = all_of(spans.iter().chain(&residual).cloned().collect());
    if whole.as_ref().map_or(0, OExpr::comparisons) <= MAX_COMPARISONS {
        return Plan {
            filter: whole,
            coverage: if residual_exact {
                Coverage::Exact
            } else {
                Coverage::ResidualLocal
            },
        };
    }
    // Over the limit: keep the spans if they fit, else their bounding box
    // (at most 4 comparisons); then as many residual conjuncts as fit.
    let base = if spans.as_ref().map_or(0, OExpr::comparisons) <= MAX_COMPARISONS {
        spans
    } else {
        bounding_box(&boxes)
    };
    Plan {
        filter: fit(base, residual),
        coverage: Coverage::Broadened,
    }
}

/// `base` and, in order, every top-level conjunct of `residual` that still
/// fits in the limit. Dropping conjuncts only broadens.
fn fit(base: Option<OExpr>, residual: Option<OExpr>) -> Option<OExpr> {
    let mut budget = MAX_COMPARISONS.saturating_sub(base.as_ref().map_or(0, OExpr::comparisons));
    let mut parts: Vec<OExpr> = base.into_iter().collect();
    let conjuncts = match residual {
        Some(OExpr::And(cs)) => cs,
        Some(e) => vec![e],
        None => Vec::new(),
    };
    for c in conjuncts {
        let n = c.comparisons();
        if n <= budget {
            budget -= n;
            parts.push(c);
        }
    }
    all_of(parts)
}

/// The union of the (non-empty) boxes; `None` when one of them is the
/// whole table.
fn span_filter(boxes: &[&KeyBox]) -> Option<OExpr> {
    let mut alternatives = Vec::with_capacity(boxes.len());
    for b in boxes {
        let mut parts = interval(&Field::PartitionKey, &b.pk);
        parts.extend(interval(&Field::RowKey, &b.rk));
        alternatives.push(all_of(parts)?);
    }
    any_of(alternatives)
}

/// The comparisons bounding one key interval (none when unbounded).
fn interval(field: &Field, iv: &KeyInterval) -> Vec<OExpr> {
    if let Some(k) = iv.as_point() {
        return vec![OExpr::string(field, CmpOp::Eq, k)];
    }
    let mut parts = Vec::new();
    match &iv.lo {
        Bound::Included(k) => parts.extend(ordered(field, CmpOp::Ge, k).0),
        Bound::Excluded(k) => parts.extend(ordered(field, CmpOp::Gt, k).0),
        Bound::Unbounded => {}
    }
    match &iv.hi {
        Bound::Included(k) => parts.extend(ordered(field, CmpOp::Le, k).0),
        Bound::Excluded(k) => parts.extend(ordered(field, CmpOp::Lt, k).0),
        Bound::Unbounded => {}
    }
    parts
}

/// `field op 's'` as a condition the service can be trusted with, and
/// whether it was widened. The service orders strings by UTF-16 code
/// units, SQL and the embedded engine by code points; the two disagree
/// only where a character at or above U+E000 meets a supplementary one
/// (whose UTF-16 form starts with a surrogate, below U+E000). So an
/// ordering bound holding such a character is widened to its longest
/// prefix below U+E000, on which both orders agree; the local re-check
/// restores the exact bound. `None`: nothing is left to bound by.
fn ordered(field: &Field, op: CmpOp, s: &str) -> (Option<OExpr>, bool) {
    let split = s.char_indices().find(|(_, c)| *c >= '\u{E000}');
    let (Some((i, _)), CmpOp::Lt | CmpOp::Le | CmpOp::Gt | CmpOp::Ge) = (split, op) else {
        return (Some(OExpr::string(field, op, s)), false);
    };
    let prefix = &s[..i];
    let widened = match op {
        CmpOp::Gt | CmpOp::Ge => {
            (!prefix.is_empty()).then(|| OExpr::string(field, CmpOp::Ge, prefix))
        }
        _ => utf16_successor(prefix).map(|hi| OExpr::string(field, CmpOp::Lt, &hi)),
    };
    (widened, true)
}

/// The least string above every string that starts with `prefix` (all of
/// whose characters are below U+E000) in UTF-16 order: its last character
/// plus one, U+D7FF's being U+E000 (past the surrogates). `None` for the
/// empty prefix.
fn utf16_successor(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    let last = chars.pop()?;
    chars.push(match last {
        '\u{D7FF}' => '\u{E000}',
        c => char::from_u32(c as u32 + 1)?,
    });
    Some(chars.into_iter().collect())
}

/// The smallest PartitionKey interval times RowKey interval holding every
/// box: at most 4 comparisons, and usually far narrower than the
/// PartitionKey range alone (many rows of one partition keep it).
fn bounding_box(boxes: &[&KeyBox]) -> Option<OExpr> {
    let pk = hull(boxes.iter().map(|b| &b.pk));
    let rk = hull(boxes.iter().map(|b| &b.rk));
    let mut parts = interval(&Field::PartitionKey, &pk);
    parts.extend(interval(&Field::RowKey, &rk));
    all_of(parts)
}

fn hull<'a>(intervals: impl Iterator<Item = &'a KeyInterval>) -> KeyInterval {
    intervals
        .fold(None, |h: Option<KeyInterval>, iv| {
            Some(h.map_or_else(|| iv.clone(), |h| h.hull(iv)))
        })
        .unwrap_or_else(KeyInterval::all)
}

/// `$select`: keys and Timestamp, the projection, then every property the
/// residual filter reads (the local re-check evaluates all of it). `None`
/// (all properties) without a projection, or if a name could not be sent
/// safely (never the case for names the store accepts).
fn select_list(query: &Query) -> Option<String> {
    let projection = query.projection.as_ref()?;
    let mut names: Vec<String> = Vec::new();
    let mut read = Vec::new();
    if let Some(f) = &query.filter {
        f.properties(&mut read);
    }
    for name in projection.iter().chain(&read) {
        if system_name(name) {
            continue; // always listed first
        }
        if !identifier(name) {
            return None;
        }
        if !names.contains(name) {
            names.push(name.clone());
        }
    }
    let mut out = String::from("PartitionKey,RowKey,Timestamp");
    for n in &names {
        out.push(',');
        out.push_str(n);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use proptest::prelude::*;
    use tablegate_store::Entity;

    // ---- The service's semantics, for the tree and for the text ----

    /// Evaluates a filter tree as the Table service does: a comparison with
    /// a missing property or a constant of another EDM type is false, `not`
    /// is plain negation.
    fn eval(x: &OExpr, e: &Entity) -> bool {
        match x {
            OExpr::Cmp {
                field, op, value, ..
            } => {
                let v = match field {
                    Field::PartitionKey => Value::String(e.partition_key.clone()),
                    Field::RowKey => Value::String(e.row_key.clone()),
                    Field::Timestamp => Value::DateTime(e.timestamp),
                    Field::ETag => Value::String(e.etag().0),
                    Field::Property(p) => match e.properties.get(p) {
                        Some(v) => v.clone(),
                        None => return false,
                    },
                };
                v.edm_type() == value.edm_type() && v.sql_cmp(value).is_some_and(|o| holds(*op, o))
            }
            OExpr::And(cs) => cs.iter().all(|c| eval(c, e)),
            OExpr::Or(cs) => cs.iter().any(|c| eval(c, e)),
            OExpr::Not(c) => !eval(c, e),
        }
    }

    /// Parses rendered filter text back into a tree, with OData's
    /// precedence (`not` > `and` > `or`), so tests check that the text says
    /// what the tree says.
    #[derive(Debug)]
    struct Parser<'a> {
        rest: &'a str,
    }

    impl Parser<'_> {
        fn parse(s: &str) -> OExpr {
            let mut p = Parser { rest: s };
            let e = p.or();
            assert!(p.rest.is_empty(), "trailing text {:?} in {s:?}", p.rest);
            e
        }

        fn eat(&mut self, t: &str) -> bool {
            match self.rest.strip_prefix(t) {
                Some(r) => {
                    self.rest = r;
                    true
                }
                None => false,
            }
        }

        fn or(&mut self) -> OExpr {
            let mut parts = vec![self.and()];
            while self.eat(" or ") {
                parts.push(self.and());
            }
            if parts.len() == 1 {
                parts.pop().unwrap()
            } else {
                OExpr::Or(parts)
            }
        }

        fn and(&mut self) -> OExpr {
            let mut parts = vec![self.unary()];
            while self.eat(" and ") {
                parts.push(self.unary());
            }
            if parts.len() == 1 {
                parts.pop().unwrap()
            } else {
                OExpr::And(parts)
            }
        }

        fn unary(&mut self) -> OExpr {
            if self.eat("not (") {
                let e = self.or();
                assert!(self.eat(")"), "unclosed not at {:?}", self.rest);
                OExpr::Not(Box::new(e))
            } else if self.eat("(") {
                let e = self.or();
                assert!(self.eat(")"), "unclosed ( at {:?}", self.rest);
                e
            } else {
                self.comparison()
            }
        }

        fn take_while(&mut self, f: impl Fn(char) -> bool) -> &str {
            let end = self.rest.find(|c| !f(c)).unwrap_or(self.rest.len());
            let (t, r) = self.rest.split_at(end);
            self.rest = r;
            t
        }

        fn comparison(&mut self) -> OExpr {
            let name = self
                .take_while(|c| c.is_alphanumeric() || c == '_')
                .to_owned();
            let field = match name.as_str() {
                "PartitionKey" => Field::PartitionKey,
                "RowKey" => Field::RowKey,
                "Timestamp" => Field::Timestamp,
                _ => Field::prop(name),
            };
            assert!(self.eat(" "));
            let op = match self.take_while(|c| c.is_ascii_lowercase()) {
                "eq" => CmpOp::Eq,
                "ne" => CmpOp::Ne,
                "lt" => CmpOp::Lt,
                "le" => CmpOp::Le,
                "gt" => CmpOp::Gt,
                "ge" => CmpOp::Ge,
                other => panic!("operator {other:?}"),
            };
            assert!(self.eat(" "));
            let value = self.literal();
            OExpr::cmp(&field, op, value).expect("a parsed literal")
        }

        fn quoted(&mut self) -> String {
            let mut s = String::new();
            loop {
                let i = self.rest.find('\'').expect("closing quote");
                s.push_str(&self.rest[..i]);
                self.rest = &self.rest[i + 1..];
                if !self.eat("'") {
                    return s;
                }
                s.push('\'');
            }
        }

        fn literal(&mut self) -> Value {
            if self.eat("'") {
                return Value::String(self.quoted());
            }
            if self.eat("datetime'") {
                let t = self.quoted();
                return Value::DateTime(crate::edm::parse_datetime(&t).expect("datetime"));
            }
            if self.eat("guid'") {
                let g = self.quoted();
                return Value::Guid(*uuid::Uuid::parse_str(&g).expect("guid").as_bytes());
            }
            if self.eat("X'") {
                let h = self.quoted();
                let bytes = (0..h.len())
                    .step_by(2)
                    .map(|i| u8::from_str_radix(&h[i..i + 2], 16).expect("hex"))
                    .collect();
                return Value::Binary(bytes);
            }
            if self.eat("true") {
                return Value::Boolean(true);
            }
            if self.eat("false") {
                return Value::Boolean(false);
            }
            let n = self
                .take_while(|c| c.is_ascii_digit() || "+-.E".contains(c))
                .to_owned();
            if self.eat("L") {
                Value::Int64(n.parse().expect("Int64"))
            } else if n.contains(['.', 'E']) {
                Value::Double(n.parse().expect("Double"))
            } else {
                Value::Int32(n.parse().expect("Int32"))
            }
        }
    }

    // ---- Helpers ----

    fn p(name: &str) -> Field {
        Field::prop(name)
    }

    fn cmp(f: Field, op: CmpOp, v: Value) -> Filter {
        Filter::cmp(f, op, v)
    }

    fn s(v: &str) -> Value {
        Value::String(v.into())
    }

    fn partition(pk: &str) -> Query {
        Query::spans(vec![KeyBox::partition(pk)])
    }

    /// Translates, checks the text parses back to the tree, and returns the
    /// result.
    fn tr(q: &Query) -> ODataQuery {
        let o = translate(q, Service::Storage);
        let tree = plan(q, Service::Storage).filter;
        assert_eq!(o.filter.as_deref().map(Parser::parse), tree, "{o:?}");
        assert!(o.comparisons <= MAX_COMPARISONS, "{o:?}");
        o
    }

    fn filter_of(q: &Query) -> String {
        tr(q).filter.expect("a filter")
    }

    /// The filter text of `f` within partition `p`.
    fn residual_text(f: Filter) -> String {
        filter_of(&partition("p").with_filter(f))
    }

    fn dt(s: &str) -> DateTime {
        crate::edm::parse_datetime(s).unwrap()
    }

    // ---- Literals ----

    #[test]
    fn literals_of_every_type() {
        let lit = |v: Value| literal(&v);
        assert_eq!(lit(s("O'Brien's")).as_deref(), Some("'O''Brien''s'"));
        assert_eq!(lit(s("")).as_deref(), Some("''"));
        assert_eq!(lit(Value::Int32(42)).as_deref(), Some("42"));
        assert_eq!(lit(Value::Int32(-7)).as_deref(), Some("-7"));
        assert_eq!(lit(Value::Int64(42)).as_deref(), Some("42L"));
        assert_eq!(
            lit(Value::Int64(i64::MIN)).as_deref(),
            Some("-9223372036854775808L")
        );
        assert_eq!(lit(Value::Double(2.0)).as_deref(), Some("2.0"));
        assert_eq!(lit(Value::Double(1.5)).as_deref(), Some("1.5"));
        assert_eq!(lit(Value::Double(-0.0)).as_deref(), Some("-0.0"));
        let big = lit(Value::Double(1e300)).unwrap();
        assert!(big.starts_with("1000") && big.ends_with(".0") && !big.contains('E'));
        assert_eq!(big.parse::<f64>().unwrap(), 1e300);
        assert_eq!(lit(Value::Double(1.5e-7)).as_deref(), Some("0.00000015"));
        assert_eq!(
            lit(Value::Double(9_007_199_254_740_992.0)).as_deref(),
            Some("9007199254740992.0")
        );
        assert_eq!(lit(Value::Double(f64::NAN)), None);
        assert_eq!(lit(Value::Double(f64::INFINITY)), None);
        assert_eq!(lit(Value::Double(f64::NEG_INFINITY)), None);
        assert_eq!(lit(Value::Boolean(true)).as_deref(), Some("true"));
        assert_eq!(lit(Value::Boolean(false)).as_deref(), Some("false"));
        assert_eq!(
            lit(Value::DateTime(dt("2026-11-24T08:00:00.123456Z"))).as_deref(),
            Some("datetime'2026-11-24T08:00:00.123456Z'")
        );
        assert_eq!(lit(Value::DateTime(DateTime(DateTime::MAX.0 + 1))), None);
        let g = *uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef).as_bytes();
        assert_eq!(
            lit(Value::Guid(g)).as_deref(),
            Some("guid'01234567-89ab-cdef-0123-456789abcdef'")
        );
        assert_eq!(
            lit(Value::Binary(vec![0x00, 0xff, 0x1a])).as_deref(),
            Some("X'00ff1a'")
        );
        assert_eq!(lit(Value::Binary(Vec::new())).as_deref(), Some("X''"));
        // Every double literal reads back as the same double.
        for d in [
            0.1,
            -2.5e-300,
            1e16,
            123_456_789.125,
            f64::MAX,
            f64::MIN_POSITIVE,
        ] {
            let text = lit(Value::Double(d)).unwrap();
            assert!(text.contains(['.', 'E']), "{text}");
            assert_eq!(text.parse::<f64>().unwrap(), d, "{text}");
        }
    }

    // ---- Key spans ----

    #[test]
    fn points_partitions_and_ranges() {
        let o = tr(&Query::spans(vec![KeyBox::point("p", "r")]));
        assert_eq!(
            o,
            ODataQuery {
                filter: Some("PartitionKey eq 'p' and RowKey eq 'r'".into()),
                comparisons: 2,
                coverage: Coverage::Exact,
                select: None,
            }
        );
        let o = tr(&partition("it's"));
        assert_eq!(o.filter.as_deref(), Some("PartitionKey eq 'it''s'"));
        assert_eq!(o.comparisons, 1);

        let rows = KeyBox {
            pk: KeyInterval::point("p"),
            rk: KeyInterval::new(Bound::Included("a".into()), Bound::Excluded("c".into())),
        };
        let o = tr(&Query::spans(vec![rows]));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey eq 'p' and RowKey ge 'a' and RowKey lt 'c'")
        );
        assert_eq!(o.comparisons, 3);

        let parts = KeyBox {
            pk: KeyInterval::new(Bound::Excluded("a".into()), Bound::Included("m".into())),
            rk: KeyInterval::new(Bound::Unbounded, Bound::Included("z".into())),
        };
        assert_eq!(
            filter_of(&Query::spans(vec![parts])),
            "PartitionKey gt 'a' and PartitionKey le 'm' and RowKey le 'z'"
        );
        let open = KeyBox {
            pk: KeyInterval::new(Bound::Included("k".into()), Bound::Unbounded),
            rk: KeyInterval::all(),
        };
        assert_eq!(filter_of(&Query::spans(vec![open])), "PartitionKey ge 'k'");
    }

    #[test]
    fn several_boxes_are_a_union() {
        let q = Query::spans(vec![
            KeyBox::point("a", "x"),
            KeyBox::point("b", "y"),
            KeyBox::partition("c"),
            KeyBox::point("a", "x"), // duplicate: sent once
        ]);
        let o = tr(&q);
        assert_eq!(
            o.filter.as_deref(),
            Some(
                "(PartitionKey eq 'a' and RowKey eq 'x') or (PartitionKey eq 'b' and RowKey eq 'y') or PartitionKey eq 'c'"
            )
        );
        assert_eq!(o.comparisons, 5);
        assert_eq!(o.coverage, Coverage::Exact);
        // With a residual, the union is parenthesized.
        let o =
            tr(
                &Query::spans(vec![KeyBox::partition("a"), KeyBox::partition("b")])
                    .with_filter(cmp(p("s"), CmpOp::Eq, s("v"))),
            );
        assert_eq!(
            o.filter.as_deref(),
            Some("(PartitionKey eq 'a' or PartitionKey eq 'b') and s eq 'v'")
        );
    }

    #[test]
    fn whole_table_and_empty_boxes() {
        let o = tr(&Query::full_scan());
        assert_eq!(
            (o.filter, o.comparisons, o.coverage),
            (None, 0, Coverage::Exact)
        );
        // One unbounded box makes the spans "true".
        let o = tr(&Query::spans(vec![KeyBox::partition("a"), KeyBox::all()]));
        assert_eq!(o.filter, None);
        let empty = KeyBox {
            pk: KeyInterval::new(Bound::Included("b".into()), Bound::Excluded("b".into())),
            rk: KeyInterval::all(),
        };
        // Empty boxes are skipped...
        assert_eq!(
            filter_of(&Query::spans(vec![empty.clone(), KeyBox::partition("a")])),
            "PartitionKey eq 'a'"
        );
        // ...and with nothing left the filter asks for nothing.
        let o = tr(&Query::spans(vec![empty]));
        assert_eq!(o.filter.as_deref(), Some("PartitionKey lt ''"));
        assert_eq!(o.coverage, Coverage::Exact);
    }

    // ---- Residual comparisons ----

    #[test]
    fn numbers_are_compared_in_their_own_type_only() {
        // The planner types the constant as the column; one comparison.
        let o = tr(&partition("p").with_filter(cmp(p("age"), CmpOp::Eq, Value::Int32(30))));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey eq 'p' and age eq 30")
        );
        assert_eq!((o.comparisons, o.coverage), (2, Coverage::Exact));
        // An Int64 literal gives only `L` comparisons: no Int32 or Double
        // ones, which Azurite answers with HTTP 500 next to an Int64 one.
        let o = tr(&partition("p").with_filter(cmp(p("n"), CmpOp::Ge, Value::Int64(2))));
        assert_eq!(o.filter.as_deref(), Some("PartitionKey eq 'p' and n ge 2L"));
        assert_eq!((o.comparisons, o.coverage), (2, Coverage::Exact));
        let o = tr(&partition("p").with_filter(Filter::In {
            field: p("n"),
            values: vec![Value::Int64(1), Value::Int64(3_000_000_000)],
        }));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey eq 'p' and (n eq 1L or n eq 3000000000L)")
        );
        assert_eq!((o.comparisons, o.coverage), (3, Coverage::Exact));
        assert_eq!(
            residual_text(cmp(p("n"), CmpOp::Lt, Value::Int64(9_007_199_254_740_993))),
            "PartitionKey eq 'p' and n lt 9007199254740993L"
        );
        // Doubles always with a '.' or an exponent.
        let o = tr(&partition("p").with_filter(cmp(p("x"), CmpOp::Ge, Value::Double(2.0))));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey eq 'p' and x ge 2.0")
        );
        assert_eq!((o.comparisons, o.coverage), (2, Coverage::Exact));
        assert_eq!(
            residual_text(cmp(p("x"), CmpOp::Gt, Value::Double(-2.5))),
            "PartitionKey eq 'p' and x gt -2.5"
        );
        assert_eq!(
            residual_text(cmp(p("x"), CmpOp::Ne, Value::Double(1e300))),
            format!(
                "PartitionKey eq 'p' and x ne {}",
                literal(&Value::Double(1e300)).unwrap()
            )
        );
        // The service then skips a property of another type, as SQL does
        // (it reads as NULL there), though `Query::selects` would not.
        let e = |v: Value| Entity {
            partition_key: "p".into(),
            row_key: "r".into(),
            timestamp: DateTime(0),
            etag: None,
            properties: BTreeMap::from([("n".to_owned(), v)]),
        };
        let q = partition("p").with_filter(cmp(p("n"), CmpOp::Ge, Value::Int64(2)));
        let tree = plan(&q, Service::Storage).filter.unwrap();
        assert!(eval(&tree, &e(Value::Int64(2))));
        assert!(!eval(&tree, &e(Value::Int32(2))));
        assert!(q.selects(&e(Value::Int32(2))));
        assert_eq!(sql(q.filter.as_ref().unwrap(), &e(Value::Int32(2))), None);
        // NaN and infinity have no literal: dropped.
        for d in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            let o = tr(&partition("p").with_filter(cmp(p("x"), CmpOp::Lt, Value::Double(d))));
            assert_eq!(o.filter.as_deref(), Some("PartitionKey eq 'p'"));
            assert_eq!(o.coverage, Coverage::ResidualLocal);
        }
    }

    /// A bound the service compares in UTF-16 order keeps every key SQL's
    /// code-point order selects (checked on every string of up to three
    /// characters from an alphabet around the places the orders differ),
    /// and bounds without such characters go out as they are.
    #[test]
    fn ordering_bounds_hold_in_the_services_utf16_order() {
        let alphabet = [
            'a',
            'z',
            '\u{D7FF}',
            '\u{E000}',
            '\u{FFFD}',
            '\u{FFFF}',
            '😀',
            '\u{10FFFF}',
        ];
        let mut strings = vec![String::new()];
        for _ in 0..3 {
            let longer: Vec<String> = strings
                .iter()
                .filter(|s| s.chars().count() == strings.last().unwrap().chars().count())
                .flat_map(|s| alphabet.iter().map(move |c| format!("{s}{c}")))
                .collect();
            strings.extend(longer);
        }
        let utf16 = |a: &str, b: &str| a.encode_utf16().cmp(b.encode_utf16());
        let holds_utf16 = |e: &OExpr, k: &str| match e {
            OExpr::Cmp {
                op,
                value: Value::String(b),
                ..
            } => holds(*op, utf16(k, b)),
            other => panic!("{other:?}"),
        };
        let mut widened = 0;
        for bound in &strings {
            for op in [CmpOp::Lt, CmpOp::Le, CmpOp::Gt, CmpOp::Ge] {
                let (expr, wide) = ordered(&Field::RowKey, op, bound);
                widened += usize::from(wide);
                for k in &strings {
                    if holds(op, k.as_str().cmp(bound.as_str())) {
                        assert!(
                            expr.as_ref().is_none_or(|e| holds_utf16(e, k)),
                            "{k:?} {op:?} {bound:?} lost by {expr:?}"
                        );
                    }
                }
            }
        }
        assert!(widened > 0);
        assert_eq!(
            ordered(&Field::RowKey, CmpOp::Lt, "abc"),
            (Some(OExpr::string(&Field::RowKey, CmpOp::Lt, "abc")), false)
        );
        assert_eq!(
            residual_text(cmp(Field::RowKey, CmpOp::Gt, s("a\u{FFFD}"))),
            "PartitionKey eq 'p' and RowKey ge 'a'"
        );
        assert_eq!(
            residual_text(cmp(Field::RowKey, CmpOp::Le, s("ab😀"))),
            "PartitionKey eq 'p' and RowKey lt 'ac'"
        );
    }

    #[test]
    fn strings_booleans_guids_binaries() {
        assert_eq!(
            residual_text(cmp(p("name"), CmpOp::Ge, s("O'Brien"))),
            "PartitionKey eq 'p' and name ge 'O''Brien'"
        );
        assert_eq!(
            residual_text(cmp(Field::RowKey, CmpOp::Lt, s("m"))),
            "PartitionKey eq 'p' and RowKey lt 'm'"
        );
        let b = |op, v| residual_text(cmp(p("b"), op, Value::Boolean(v)));
        assert_eq!(b(CmpOp::Eq, true), "PartitionKey eq 'p' and b eq true");
        assert_eq!(b(CmpOp::Ne, true), "PartitionKey eq 'p' and b eq false");
        assert_eq!(b(CmpOp::Gt, false), "PartitionKey eq 'p' and b eq true");
        assert_eq!(
            b(CmpOp::Le, true),
            "PartitionKey eq 'p' and (b eq false or b eq true)"
        );
        // Nothing is below false: the query selects nothing.
        let o = tr(&partition("p").with_filter(cmp(p("b"), CmpOp::Lt, Value::Boolean(false))));
        assert_eq!(o.filter.as_deref(), Some("PartitionKey lt ''"));
        assert_eq!(o.coverage, Coverage::Exact);

        let g = Value::Guid([0xab; 16]);
        assert_eq!(
            residual_text(cmp(p("g"), CmpOp::Eq, g.clone())),
            "PartitionKey eq 'p' and g eq guid'abababab-abab-abab-abab-abababababab'"
        );
        assert_eq!(
            residual_text(cmp(p("bin"), CmpOp::Ne, Value::Binary(vec![1, 2]))),
            "PartitionKey eq 'p' and bin ne X'0102'"
        );
        // Their order is not the service's to decide.
        let o = tr(&partition("p").with_filter(cmp(p("g"), CmpOp::Lt, g)));
        assert_eq!(o.filter.as_deref(), Some("PartitionKey eq 'p'"));
        assert_eq!(o.coverage, Coverage::ResidualLocal);
        // Keys compare only with strings; odd property names are not sent.
        for f in [
            cmp(Field::PartitionKey, CmpOp::Eq, Value::Int32(1)),
            cmp(Field::Timestamp, CmpOp::Eq, s("x")),
            cmp(p("a b"), CmpOp::Eq, s("x")),
            cmp(p("rowkey"), CmpOp::Eq, s("x")),
        ] {
            let o = tr(&partition("p").with_filter(f));
            assert_eq!(o.filter.as_deref(), Some("PartitionKey eq 'p'"));
            assert_eq!(o.coverage, Coverage::ResidualLocal);
        }
    }

    #[test]
    fn datetimes_allow_for_the_services_finer_ticks() {
        let t = dt("2026-11-24T08:00:00.123456Z");
        let d = |f: Field, op| residual_text(cmp(f, op, Value::DateTime(t)));
        // Widened to whole milliseconds (Azurite compares milliseconds).
        let at = "datetime'2026-11-24T08:00:00.123000Z'";
        let next = "datetime'2026-11-24T08:00:00.124000Z'";
        assert_eq!(
            d(Field::Timestamp, CmpOp::Ge),
            format!("PartitionKey eq 'p' and Timestamp ge {at}")
        );
        assert_eq!(
            d(Field::Timestamp, CmpOp::Lt),
            format!("PartitionKey eq 'p' and Timestamp lt {next}")
        );
        assert_eq!(
            d(Field::Timestamp, CmpOp::Le),
            format!("PartitionKey eq 'p' and Timestamp lt {next}")
        );
        assert_eq!(
            d(p("due"), CmpOp::Gt),
            format!("PartitionKey eq 'p' and due ge {at}")
        );
        let o =
            tr(&partition("p").with_filter(cmp(Field::Timestamp, CmpOp::Eq, Value::DateTime(t))));
        assert_eq!(
            o.filter.as_deref(),
            Some(
                format!("PartitionKey eq 'p' and Timestamp ge {at} and Timestamp lt {next}")
                    .as_str()
            )
        );
        assert_eq!((o.comparisons, o.coverage), (3, Coverage::ResidualLocal));
        assert_eq!(
            d(p("due"), CmpOp::Ne),
            format!("PartitionKey eq 'p' and (due lt {next} or due ge {at})")
        );
        // The last instant has no successor literal: dropped.
        let o = tr(&partition("p").with_filter(cmp(
            p("due"),
            CmpOp::Le,
            Value::DateTime(DateTime::MAX),
        )));
        assert_eq!(o.coverage, Coverage::ResidualLocal);
    }

    #[test]
    fn in_lists() {
        let f = Filter::In {
            field: p("c"),
            values: vec![s("red"), s("it's")],
        };
        let o = tr(&partition("p").with_filter(f));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey eq 'p' and (c eq 'red' or c eq 'it''s')")
        );
        assert_eq!((o.comparisons, o.coverage), (3, Coverage::Exact));
        // Alone, the list needs no parentheses.
        let f = Filter::In {
            field: Field::RowKey,
            values: vec![s("a"), s("b")],
        };
        assert_eq!(
            filter_of(&Query::full_scan().with_filter(f)),
            "RowKey eq 'a' or RowKey eq 'b'"
        );
        // A value without a literal drops the whole list.
        let f = Filter::In {
            field: p("x"),
            values: vec![Value::Double(1.5), Value::Double(f64::NAN)],
        };
        assert_eq!(residual_text(f), "PartitionKey eq 'p'");
    }

    #[test]
    fn negation_only_around_exact_translations() {
        let eq = cmp(p("s"), CmpOp::Eq, s("a"));
        let o = tr(&partition("p").with_filter(Filter::Not(Box::new(eq.clone()))));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey eq 'p' and not (s eq 'a')")
        );
        // SQL's NOT (s = 'a') is unknown without s; OData's is true.
        assert_eq!(o.coverage, Coverage::ResidualLocal);
        let both = Filter::Not(Box::new(Filter::Or(vec![
            eq.clone(),
            cmp(p("n"), CmpOp::Lt, Value::Int32(3)),
        ])));
        assert_eq!(
            residual_text(both),
            "PartitionKey eq 'p' and not (s eq 'a' or n lt 3)"
        );
        // Not around something broadened or dropped is itself dropped.
        let like = Filter::Like {
            field: p("s"),
            pattern: "ab%".into(),
            escape: None,
            case_insensitive: false,
        };
        for inner in [
            like,
            Filter::IsNull(p("s")),
            Filter::And(vec![eq.clone(), Filter::IsNull(p("t"))]),
        ] {
            let o = tr(&partition("p").with_filter(Filter::Not(Box::new(inner))));
            assert_eq!(o.filter.as_deref(), Some("PartitionKey eq 'p'"));
            assert_eq!(o.coverage, Coverage::ResidualLocal);
        }
    }

    #[test]
    fn untranslatable_parts_only_broaden() {
        let eq = cmp(p("s"), CmpOp::Eq, s("a"));
        // Inside AND the IS NULL is dropped, the rest is kept.
        let o =
            tr(&partition("p").with_filter(Filter::And(vec![Filter::IsNull(p("t")), eq.clone()])));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey eq 'p' and s eq 'a'")
        );
        assert_eq!(o.coverage, Coverage::ResidualLocal);
        // Inside OR it takes the whole OR with it.
        let o =
            tr(&partition("p").with_filter(Filter::Or(vec![Filter::IsNull(p("t")), eq.clone()])));
        assert_eq!(o.filter.as_deref(), Some("PartitionKey eq 'p'"));
        assert_eq!(o.coverage, Coverage::ResidualLocal);
        // ...inside an AND, whose other conjuncts stay.
        let o = tr(&partition("p").with_filter(Filter::And(vec![
            Filter::Or(vec![Filter::IsNull(p("t")), eq.clone()]),
            cmp(p("u"), CmpOp::Ne, s("z")),
        ])));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey eq 'p' and u ne 'z'")
        );
        // TRUE adds nothing, FALSE leaves an OR, an always-true child makes
        // the OR true.
        let o = tr(&partition("p").with_filter(Filter::And(vec![Filter::True, eq.clone()])));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey eq 'p' and s eq 'a'")
        );
        assert_eq!(o.coverage, Coverage::Exact);
        assert_eq!(
            residual_text(Filter::Or(vec![Filter::False, eq.clone()])),
            "PartitionKey eq 'p' and s eq 'a'"
        );
        let o =
            tr(&partition("p").with_filter(Filter::Or(vec![Filter::True, Filter::IsNull(p("t"))])));
        assert_eq!(o.filter.as_deref(), Some("PartitionKey eq 'p'"));
        assert_eq!(o.coverage, Coverage::Exact);
        // A false residual asks for nothing.
        let o = tr(&partition("p").with_filter(Filter::And(vec![eq, Filter::False])));
        assert_eq!(o.filter.as_deref(), Some("PartitionKey lt ''"));
        assert_eq!(o.coverage, Coverage::Exact);
    }

    #[test]
    fn like_as_a_prefix_range() {
        let like = |pattern: &str, escape, ci| Filter::Like {
            field: p("s"),
            pattern: pattern.into(),
            escape,
            case_insensitive: ci,
        };
        let o = tr(&partition("p").with_filter(like("abc%", None, false)));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey eq 'p' and s ge 'abc' and s lt 'abd'")
        );
        assert_eq!(o.coverage, Coverage::ResidualLocal);
        // The escape makes `_` literal.
        assert_eq!(
            residual_text(like("ab\\_c%", Some('\\'), false)),
            "PartitionKey eq 'p' and s ge 'ab_c' and s lt 'ab_d'"
        );
        // Any pattern is within its literal prefix's range.
        assert_eq!(
            residual_text(like("a%b", None, false)),
            "PartitionKey eq 'p' and s ge 'a' and s lt 'b'"
        );
        assert_eq!(
            residual_text(like("ab_", None, false)),
            "PartitionKey eq 'p' and s ge 'ab' and s lt 'ac'"
        );
        // No prefix: at least a string.
        assert_eq!(
            residual_text(like("%x%", None, false)),
            "PartitionKey eq 'p' and s ge ''"
        );
        // No wildcard: an equality, exact.
        let o = tr(&partition("p").with_filter(like("50\\%", Some('\\'), false)));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey eq 'p' and s eq '50%'")
        );
        assert_eq!(o.coverage, Coverage::Exact);
        // The top, U+10000, sorts below U+FFFF in UTF-16: widened to the
        // successor of the part below U+E000.
        assert_eq!(
            residual_text(like("a\u{FFFF}%", None, false)),
            "PartitionKey eq 'p' and s ge 'a\u{FFFF}' and s lt 'b'"
        );
        // ILIKE has no OData form.
        let o = tr(&partition("p").with_filter(like("abc%", None, true)));
        assert_eq!(o.filter.as_deref(), Some("PartitionKey eq 'p'"));
        assert_eq!(o.coverage, Coverage::ResidualLocal);
    }

    // ---- The 15-comparison limit ----

    fn points(n: usize) -> Vec<KeyBox> {
        (0..n)
            .map(|i| KeyBox::point(format!("p{i:02}"), "r"))
            .collect()
    }

    #[test]
    fn over_the_limit_residual_conjuncts_go_first() {
        // 1 + 1 + 14 + 1 = 17: the IN list (14) no longer fits.
        let f = Filter::And(vec![
            cmp(p("a"), CmpOp::Eq, Value::Int32(1)),
            Filter::In {
                field: p("b"),
                values: (1..=14).map(Value::Int32).collect(),
            },
            cmp(p("s"), CmpOp::Eq, s("x")),
        ]);
        let o = tr(&partition("p").with_filter(f));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey eq 'p' and a eq 1 and s eq 'x'")
        );
        assert_eq!((o.comparisons, o.coverage), (3, Coverage::Broadened));
        // A residual that is one big OR is dropped whole; the keys stay.
        let f = Filter::In {
            field: p("b"),
            values: (1..=14).map(Value::Int64).collect(),
        };
        let o = tr(&Query::spans(vec![KeyBox::point("p", "r")]).with_filter(f));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey eq 'p' and RowKey eq 'r'")
        );
        assert_eq!((o.comparisons, o.coverage), (2, Coverage::Broadened));
        // Exactly 15 still fits.
        let f = Filter::In {
            field: p("b"),
            values: (1..=14).map(|i| s(&i.to_string())).collect(),
        };
        let o = tr(&partition("p").with_filter(f));
        assert_eq!((o.comparisons, o.coverage), (15, Coverage::Exact));
    }

    #[test]
    fn over_the_limit_spans_become_their_bounding_box() {
        // 8 points = 16 comparisons: the PartitionKey range, RowKey 'r'.
        let o = tr(&Query::spans(points(8)).with_filter(cmp(p("s"), CmpOp::Eq, s("x"))));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey ge 'p00' and PartitionKey le 'p07' and RowKey eq 'r' and s eq 'x'")
        );
        assert_eq!((o.comparisons, o.coverage), (4, Coverage::Broadened));
        // Many rows of one partition keep the partition and a row range.
        let rows: Vec<KeyBox> = (0..16)
            .map(|i| KeyBox::point("p", format!("r{i:02}")))
            .collect();
        let o = tr(&Query::spans(rows));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey eq 'p' and RowKey ge 'r00' and RowKey le 'r15'")
        );
        assert_eq!((o.comparisons, o.coverage), (3, Coverage::Broadened));
        // Exclusive and inclusive ends: the hull keeps the wider one.
        let mut boxes = points(8);
        boxes.push(KeyBox {
            pk: KeyInterval::new(Bound::Excluded("a".into()), Bound::Excluded("p07".into())),
            rk: KeyInterval::all(),
        });
        boxes.push(KeyBox {
            pk: KeyInterval::new(Bound::Included("a".into()), Bound::Excluded("b".into())),
            rk: KeyInterval::all(),
        });
        let o = tr(&Query::spans(boxes));
        assert_eq!(
            o.filter.as_deref(),
            Some("PartitionKey ge 'a' and PartitionKey le 'p07'")
        );
        assert_eq!((o.comparisons, o.coverage), (2, Coverage::Broadened));
    }

    #[test]
    fn over_the_limit_with_unbounded_hull_sends_nothing() {
        let mut boxes = points(8);
        boxes.push(KeyBox {
            pk: KeyInterval::new(Bound::Unbounded, Bound::Excluded("a".into())),
            rk: KeyInterval::point("r"),
        });
        boxes.push(KeyBox {
            pk: KeyInterval::new(Bound::Excluded("z".into()), Bound::Unbounded),
            rk: KeyInterval::all(),
        });
        let o = tr(&Query::spans(boxes.clone()));
        assert_eq!(
            (o.filter, o.comparisons, o.coverage),
            (None, 0, Coverage::Broadened)
        );
        // A residual that fits is still sent.
        let o = tr(&Query::spans(boxes).with_filter(cmp(p("s"), CmpOp::Eq, s("x"))));
        assert_eq!(o.filter.as_deref(), Some("s eq 'x'"));
        assert_eq!((o.comparisons, o.coverage), (1, Coverage::Broadened));
    }

    // ---- $select ----

    #[test]
    fn cosmos_gets_no_timestamp_condition() {
        let t = DateTime(1_700_000_000_000_000);
        let q = Query {
            filter: Some(Filter::And(vec![
                cmp(Field::Timestamp, CmpOp::Gt, Value::DateTime(t)),
                cmp(Field::prop("n"), CmpOp::Eq, Value::Int32(1)),
            ])),
            ..Query::full_scan()
        };
        let storage = translate(&q, Service::Storage);
        let f = storage.filter.unwrap();
        assert!(f.starts_with("Timestamp ge datetime'"), "{f}");
        // Cosmos DB answers a Timestamp condition with no rows: it is
        // finished locally.
        let cosmos = translate(&q, Service::Cosmos);
        assert_eq!(cosmos.filter.as_deref(), Some("n eq 1"));
        assert_eq!(cosmos.coverage, Coverage::ResidualLocal);
    }

    #[test]
    fn select_lists_keys_projection_and_filtered_properties() {
        let f = Filter::And(vec![
            cmp(p("c"), CmpOp::Eq, s("x")),
            Filter::IsNull(p("a")),
            cmp(Field::RowKey, CmpOp::Gt, s("r")),
        ]);
        let q = partition("p").with_filter(f).with_projection(vec![
            "b".into(),
            "a".into(),
            "RowKey".into(),
            "b".into(),
        ]);
        assert_eq!(
            tr(&q).select.as_deref(),
            Some("PartitionKey,RowKey,Timestamp,b,a,c")
        );
        assert_eq!(tr(&partition("p")).select, None);
        let q = partition("p").with_projection(Vec::new());
        assert_eq!(
            tr(&q).select.as_deref(),
            Some("PartitionKey,RowKey,Timestamp")
        );
        // A name that cannot be sent: every property instead.
        let q = partition("p").with_projection(vec!["a,b".into()]);
        assert_eq!(tr(&q).select, None);
    }

    // ---- Property: never narrower ----

    const KEYS: [&str; 5] = ["", "a", "ab", "b", "c"];

    fn key() -> impl Strategy<Value = String> {
        prop::sample::select(KEYS.to_vec()).prop_map(str::to_owned)
    }

    fn bound() -> impl Strategy<Value = Bound<String>> {
        prop_oneof![
            Just(Bound::Unbounded),
            key().prop_map(Bound::Included),
            key().prop_map(Bound::Excluded),
        ]
    }

    fn interval_strategy() -> impl Strategy<Value = KeyInterval> {
        prop_oneof![
            key().prop_map(KeyInterval::point),
            (bound(), bound()).prop_map(|(lo, hi)| KeyInterval::new(lo, hi)),
        ]
    }

    fn key_box() -> impl Strategy<Value = KeyBox> {
        (interval_strategy(), interval_strategy()).prop_map(|(pk, rk)| KeyBox { pk, rk })
    }

    /// Values without NaN (whose order the service does not share).
    fn value(nan: bool) -> impl Strategy<Value = Value> {
        let mut doubles = vec![
            0.0,
            -0.0,
            0.5,
            -1.5,
            2.0,
            3e9,
            9_007_199_254_740_992.0,
            9_007_199_254_740_996.0,
            9_223_372_036_854_775_808.0,
            9.3e18,
            -9.3e18,
            1e300,
            f64::INFINITY,
        ];
        if nan {
            doubles.push(f64::NAN);
        }
        prop_oneof![
            prop_oneof![-2i32..3, Just(i32::MAX), Just(i32::MIN)].prop_map(Value::Int32),
            prop_oneof![
                -2i64..3,
                Just(3_000_000_000),
                Just(9_007_199_254_740_993),
                Just(9_007_199_254_740_995),
                Just(i64::MAX),
                Just(i64::MIN),
            ]
            .prop_map(Value::Int64),
            prop_oneof![
                (-4i32..5).prop_map(|i| f64::from(i) / 2.0),
                prop::sample::select(doubles),
            ]
            .prop_map(Value::Double),
            any::<bool>().prop_map(Value::Boolean),
            prop::sample::select(vec!["", "a", "ab", "a'b", "b", "%", "a\u{FFFF}"]).prop_map(s),
            prop_oneof![-2i64..3, Just(DateTime::MAX.0)].prop_map(|t| Value::DateTime(DateTime(t))),
            prop::sample::select(vec![0u8, 1, 2]).prop_map(|b| Value::Guid([b; 16])),
            prop::sample::select(vec![vec![], vec![0u8], vec![1]]).prop_map(Value::Binary),
        ]
    }

    fn field() -> impl Strategy<Value = Field> {
        prop::sample::select(vec![
            Field::PartitionKey,
            Field::RowKey,
            Field::Timestamp,
            p("x"),
            p("y"),
            p("z"),
            p("RowKey"),
        ])
    }

    fn op() -> impl Strategy<Value = CmpOp> {
        prop::sample::select(&CmpOp::ALL[..])
    }

    fn filter() -> impl Strategy<Value = Filter> {
        let leaf = prop_oneof![
            1 => Just(Filter::True),
            1 => Just(Filter::False),
            4 => (field(), op(), value(true)).prop_map(|(f, o, v)| Filter::cmp(f, o, v)),
            1 => (field(), prop::collection::vec(value(true), 0..4))
                .prop_map(|(field, values)| Filter::In { field, values }),
            1 => field().prop_map(Filter::IsNull),
            2 => (
                field(),
                prop::sample::select(vec![
                    "a%", "a_", "%", "ab", "a%b", "\\%%", "a\\", "%a%", "", "a\u{FFFF}%",
                ]),
                prop::option::of(Just('\\')),
                any::<bool>(),
            )
                .prop_map(|(field, pattern, escape, case_insensitive)| Filter::Like {
                    field,
                    pattern: pattern.into(),
                    escape,
                    case_insensitive,
                }),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 1..4).prop_map(Filter::And),
                prop::collection::vec(inner.clone(), 1..4).prop_map(Filter::Or),
                inner.prop_map(|f| Filter::Not(Box::new(f))),
            ]
        })
    }

    fn query() -> impl Strategy<Value = Query> {
        (
            prop_oneof![
                prop::collection::vec(key_box(), 1..4),
                prop::collection::vec(key_box(), 6..12),
            ],
            prop::option::of(filter()),
        )
            .prop_map(|(spans, filter)| Query {
                spans,
                filter,
                projection: None,
            })
    }

    fn entity() -> impl Strategy<Value = Entity> {
        (
            key(),
            key(),
            -2i64..3,
            prop::option::of(value(false)),
            prop::option::of(value(false)),
        )
            .prop_map(|(pk, rk, ts, x, y)| {
                let mut properties = BTreeMap::new();
                if let Some(v) = x {
                    properties.insert("x".to_owned(), v);
                }
                if let Some(v) = y {
                    properties.insert("y".to_owned(), v);
                }
                Entity {
                    partition_key: pk,
                    row_key: rk,
                    timestamp: DateTime(ts),
                    etag: None,
                    properties,
                }
            })
    }

    /// `f` as SQL reads it, three-valued: a property compared with a
    /// constant of another EDM type reads as NULL (the planner gives the
    /// constant its column's type, and the column reads only values of that
    /// type; see the module docs). Otherwise as [`Filter::eval`].
    fn sql(f: &Filter, e: &Entity) -> Option<bool> {
        match f {
            Filter::And(fs) => {
                let mut result = Some(true);
                for c in fs {
                    match sql(c, e) {
                        Some(false) => return Some(false),
                        None => result = None,
                        Some(true) => {}
                    }
                }
                result
            }
            Filter::Or(fs) => {
                let mut result = Some(false);
                for c in fs {
                    match sql(c, e) {
                        Some(true) => return Some(true),
                        None => result = None,
                        Some(false) => {}
                    }
                }
                result
            }
            Filter::Not(c) => sql(c, e).map(|b| !b),
            Filter::Compare { field, value, .. } if of_other_type(e, field, value) => None,
            // `f IN (a, b)` is `f = a OR f = b`, each with its own type.
            Filter::In { field, values } if !values.is_empty() => sql(
                &Filter::Or(
                    values
                        .iter()
                        .map(|v| Filter::cmp(field.clone(), CmpOp::Eq, v.clone()))
                        .collect(),
                ),
                e,
            ),
            _ => f.eval(e),
        }
    }

    /// `field` is a property of `e` with another EDM type than `value`.
    fn of_other_type(e: &Entity, field: &Field, value: &Value) -> bool {
        match field {
            Field::Property(p) => e
                .properties
                .get(p)
                .is_some_and(|v| v.edm_type() != value.edm_type()),
            _ => false,
        }
    }

    /// The precondition under which `sql` and [`Filter::eval`] (so
    /// [`Query::selects`]) agree: no numeric constant is compared with a
    /// numeric property of another EDM type.
    fn well_typed(f: &Filter, e: &Entity) -> bool {
        let number = |v: &Value| matches!(v, Value::Int32(_) | Value::Int64(_) | Value::Double(_));
        let clash = |field: &Field, v: &Value| {
            number(v)
                && of_other_type(e, field, v)
                && matches!(field, Field::Property(p) if e.properties.get(p).is_some_and(number))
        };
        match f {
            Filter::And(fs) | Filter::Or(fs) => fs.iter().all(|c| well_typed(c, e)),
            Filter::Not(c) => well_typed(c, e),
            Filter::Compare { field, value, .. } => !clash(field, value),
            Filter::In { field, values } => !values.iter().any(|v| clash(field, v)),
            _ => true,
        }
    }

    /// Checks a translated predicate against SQL (`sql`) on one entity: an
    /// exact translation agrees wherever SQL's answer is known, any
    /// translation holds wherever SQL is true.
    fn agrees(f: &Filter, t: &Tr, e: &Entity) -> Result<(), String> {
        let sql = sql(f, e);
        let (service, exact) = match t {
            Tr::True { exact } => (true, *exact),
            Tr::False => (false, true),
            Tr::Expr { expr, exact } => (eval(expr, e), *exact),
        };
        let ok = match sql {
            Some(b) if exact => service == b,
            Some(true) => service,
            _ => true,
        };
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{f:?} as {t:?}: SQL {sql:?}, service {service} on {e:?}"
            ))
        }
    }

    /// `agrees` for a filter and each of its sub-filters.
    fn agrees_throughout(f: &Filter, e: &Entity) -> Result<(), String> {
        agrees(f, &translate_filter(f, Service::Storage), e)?;
        match f {
            Filter::And(fs) | Filter::Or(fs) => fs.iter().try_for_each(|c| agrees_throughout(c, e)),
            Filter::Not(c) => agrees_throughout(c, e),
            _ => Ok(()),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        /// The service (evaluating the text sent) never rejects an entity
        /// the query selects in SQL (`sql`: a property of another type than
        /// the constant it is compared with reads as NULL); when the
        /// coverage says Exact it returns exactly those. Where no numeric
        /// constant meets a numeric property of another type, that is
        /// `Query::selects`. And every sub-filter's translation keeps its
        /// promise (exact or broader).
        #[test]
        fn never_narrower(q in query(), es in prop::collection::vec(entity(), 40)) {
            let o = translate(&q, Service::Storage);
            let tree = o.filter.as_deref().map(Parser::parse);
            prop_assert_eq!(&tree, &plan(&q, Service::Storage).filter);
            prop_assert!(o.comparisons <= MAX_COMPARISONS);
            prop_assert_eq!(o.comparisons, tree.as_ref().map_or(0, OExpr::comparisons));
            for e in &es {
                let sent = tree.as_ref().is_none_or(|t| eval(t, e));
                let in_spans = q
                    .spans
                    .iter()
                    .any(|b| b.contains(&e.partition_key, &e.row_key));
                let selected = in_spans && q.filter.as_ref().is_none_or(|f| sql(f, e) == Some(true));
                if q.filter.as_ref().is_none_or(|f| well_typed(f, e)) {
                    prop_assert_eq!(selected, q.selects(e));
                }
                prop_assert!(sent || !selected, "{:?} lost {:?}", o.filter, e);
                if o.coverage == Coverage::Exact {
                    prop_assert_eq!(sent, selected, "{:?} not exact on {:?}", o.filter, e);
                }
                if let Some(f) = &q.filter {
                    agrees_throughout(f, e).map_err(TestCaseError::fail)?;
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5000))]

        /// One comparison, many entities: every comparison is exact against
        /// `sql` (numbers in their own type, booleans as equalities,
        /// DateTimes at the microsecond), and so is its negation.
        #[test]
        fn comparisons_agree_where_sql_knows(
            field in prop_oneof![3 => Just(p("x")), 1 => field()],
            op in op(),
            v in value(true),
            es in prop::collection::vec(entity(), 20),
        ) {
            let f = Filter::cmp(field, op, v);
            for e in &es {
                agrees_throughout(&f, e).map_err(TestCaseError::fail)?;
                let not = Filter::Not(Box::new(f.clone()));
                agrees_throughout(&not, e).map_err(TestCaseError::fail)?;
            }
        }
    }
}
