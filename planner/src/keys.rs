//! **Where a query is classified.** From a bound WHERE clause to the store's
//! key spans, the residual filter and the access class.
//!
//! 1. [`nnf`] pushes NOT down to the leaves (`NOT (a < 1)` → `a >= 1`,
//!    De Morgan), so every leaf can be read positively. SQL's three-valued
//!    logic survives: `NOT (x = 1)` and `x <> 1` are both unknown when x is
//!    NULL.
//! 2. [`derive`] maps each subexpression to a [`KeySet`] — a union of
//!    PartitionKey × RowKey boxes containing every row the expression can
//!    select — and says whether the set is *exact* (the expression holds on
//!    every key in it). Key comparisons, BETWEEN, IN, prefix LIKE and row
//!    values give exact sets; anything else is "all keys, inexact". AND
//!    intersects, OR unites.
//! 3. [`Access::from_where`] keeps the exact top-level conjuncts in the spans
//!    only and turns the rest into the residual filter the store evaluates.
//!    An empty key set is a contradiction: zero store requests. The shape
//!    of every bound prepared point lookup, `PartitionKey = 'a' AND RowKey =
//!    'b'`, takes a shortcut to the same answer (`exact_point`).
//! 4. [`AccessClass::of`] names the shape: point, row-range, partition-range,
//!    full scan.

use std::ops::Bound;

use tablegate_catalog::{Role, SqlType, TableDef};
use tablegate_store::{CmpOp, Field, Filter, KeyBox, KeyInterval, Value};

use crate::expr::BExpr;

/// More boxes than this and the planner stops splitting hairs: the span
/// becomes the hull of the boxes (still correct, less precise).
const MAX_BOXES: usize = 1024;

/// The access classes, best first, with the seeds' ratings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AccessClass {
    /// The predicate is a contradiction: nothing to read.
    Empty,
    /// PartitionKey = c AND RowKey = c (or several such points).
    Point,
    /// One PartitionKey, a RowKey range or none.
    RowRange,
    /// A PartitionKey range, list or prefix.
    PartitionRange,
    /// No usable PartitionKey predicate.
    FullScan,
}

impl AccessClass {
    /// Name as EXPLAIN shows it.
    pub fn name(self) -> &'static str {
        match self {
            AccessClass::Empty => "empty",
            AccessClass::Point => "point",
            AccessClass::RowRange => "row-range",
            AccessClass::PartitionRange => "partition-range",
            AccessClass::FullScan => "full-scan",
        }
    }

    /// The seeds' rating.
    pub fn rating(self) -> &'static str {
        match self {
            AccessClass::Empty => "free: the predicate is a contradiction, no store request",
            AccessClass::Point => "excellent: a direct lookup of each entity",
            AccessClass::RowRange => {
                "good with small partitions, poor with very large ones: one partition, one server"
            }
            AccessClass::PartitionRange => {
                "good with few partition servers touched, worse with more: several partitions"
            }
            AccessClass::FullScan => "worst: every entity of the table is read",
        }
    }

    /// Classifies key spans.
    pub fn of(spans: &[KeyBox]) -> AccessClass {
        if spans.is_empty() {
            return AccessClass::Empty;
        }
        if spans
            .iter()
            .all(|b| b.pk.as_point().is_some() && b.rk.as_point().is_some())
        {
            return AccessClass::Point;
        }
        let first = spans[0].pk.as_point();
        if first.is_some() && spans.iter().all(|b| b.pk.as_point() == first) {
            return AccessClass::RowRange;
        }
        if spans
            .iter()
            .any(|b| matches!((&b.pk.lo, &b.pk.hi), (Bound::Unbounded, Bound::Unbounded)))
        {
            return AccessClass::FullScan;
        }
        AccessClass::PartitionRange
    }
}

/// A union of key boxes.
#[derive(Debug, Clone, PartialEq)]
pub struct KeySet {
    /// The boxes; empty means no key.
    pub boxes: Vec<KeyBox>,
    /// True when the boxes were widened (a superset of the keys): the
    /// predicate that produced them must stay in the residual.
    pub lossy: bool,
}

/// Do two intervals overlap or touch, so that their union is an interval?
fn joinable(a: &KeyInterval, b: &KeyInterval) -> bool {
    let touches = |hi: &Bound<String>, lo: &Bound<String>| match (hi, lo) {
        (Bound::Unbounded, _) | (_, Bound::Unbounded) => true,
        (Bound::Included(h), Bound::Included(l)) => h >= l,
        (Bound::Included(h), Bound::Excluded(l)) | (Bound::Excluded(h), Bound::Included(l)) => {
            h >= l
        }
        (Bound::Excluded(h), Bound::Excluded(l)) => h > l,
    };
    touches(&a.hi, &b.lo) && touches(&b.hi, &a.lo)
}

fn interval_for(op: CmpOp, v: &str) -> Vec<KeyInterval> {
    let s = v.to_owned();
    match op {
        CmpOp::Eq => vec![KeyInterval::point(s)],
        CmpOp::Lt => vec![KeyInterval::new(Bound::Unbounded, Bound::Excluded(s))],
        CmpOp::Le => vec![KeyInterval::new(Bound::Unbounded, Bound::Included(s))],
        CmpOp::Gt => vec![KeyInterval::new(Bound::Excluded(s), Bound::Unbounded)],
        CmpOp::Ge => vec![KeyInterval::new(Bound::Included(s), Bound::Unbounded)],
        CmpOp::Ne => vec![
            KeyInterval::new(Bound::Unbounded, Bound::Excluded(s.clone())),
            KeyInterval::new(Bound::Excluded(s), Bound::Unbounded),
        ],
    }
}

impl KeySet {
    /// Every key.
    pub fn all() -> Self {
        KeySet {
            boxes: vec![KeyBox::all()],
            lossy: false,
        }
    }

    /// No key.
    pub fn none() -> Self {
        KeySet {
            boxes: Vec::new(),
            lossy: false,
        }
    }

    fn on(role: Role, intervals: Vec<KeyInterval>) -> Self {
        let mut s = KeySet {
            lossy: false,
            boxes: intervals
                .into_iter()
                .map(|i| match role {
                    Role::PartitionKey => KeyBox {
                        pk: i,
                        rk: KeyInterval::all(),
                    },
                    _ => KeyBox {
                        pk: KeyInterval::all(),
                        rk: i,
                    },
                })
                .collect(),
        };
        s.normalize();
        s
    }

    /// True when the set is every key.
    pub fn is_all(&self) -> bool {
        self.boxes.iter().any(|b| b == &KeyBox::all())
    }

    /// Set intersection.
    pub fn and(&self, other: &KeySet) -> KeySet {
        let mut boxes = Vec::new();
        for a in &self.boxes {
            for b in &other.boxes {
                let x = KeyBox {
                    pk: a.pk.intersect(&b.pk),
                    rk: a.rk.intersect(&b.rk),
                };
                if !x.pk.is_empty() && !x.rk.is_empty() {
                    boxes.push(x);
                }
            }
        }
        let mut s = KeySet {
            boxes,
            lossy: self.lossy || other.lossy,
        };
        s.normalize();
        s
    }

    /// Set union.
    pub fn or(&self, other: &KeySet) -> KeySet {
        let mut boxes = self.boxes.clone();
        boxes.extend(other.boxes.iter().cloned());
        let mut s = KeySet {
            boxes,
            lossy: self.lossy || other.lossy,
        };
        s.normalize();
        s
    }

    /// Drops empty and duplicate boxes, merges boxes that differ in one
    /// dimension only where their union is one box, and caps the count.
    pub fn normalize(&mut self) {
        self.boxes.retain(|b| !b.pk.is_empty() && !b.rk.is_empty());
        // '' is the smallest key: `>= ''` is no bound at all, and
        // `<= ''` is the point ''.
        for b in &mut self.boxes {
            for i in [&mut b.pk, &mut b.rk] {
                let empty = |x: &Bound<String>| matches!(x, Bound::Included(s) if s.is_empty());
                if empty(&i.hi) {
                    *i = KeyInterval::point("");
                } else if empty(&i.lo) {
                    i.lo = Bound::Unbounded;
                }
            }
        }
        if self.is_all() {
            self.boxes = vec![KeyBox::all()];
            return;
        }
        self.boxes.sort_by_key(box_order);
        self.boxes.dedup();
        if self.boxes.len() <= EXHAUSTIVE_MERGE {
            // Small sets: merge every pair that unites into one box.
            while let Some((i, j, u)) = self.find_merge() {
                self.boxes[i] = u;
                self.boxes.remove(j);
            }
        } else {
            // Large sets (a long IN list): one pass over sorted neighbours,
            // O(n log n) overall, so a huge list cannot stall the planner.
            let mut out: Vec<KeyBox> = Vec::with_capacity(self.boxes.len());
            for b in std::mem::take(&mut self.boxes) {
                match out.last().and_then(|a| union_of(a, &b)) {
                    Some(u) => *out.last_mut().expect("non-empty") = u,
                    None => out.push(b),
                }
            }
            self.boxes = out;
        }
        if self.boxes.len() > MAX_BOXES {
            // Too fine-grained to be worth it: keep the hull, which is a
            // superset — the set is no longer exact, and says so.
            let pk = self
                .boxes
                .iter()
                .map(|b| b.pk.clone())
                .reduce(|a, b| a.hull(&b));
            self.boxes = vec![KeyBox {
                pk: pk.unwrap_or_else(KeyInterval::all),
                rk: KeyInterval::all(),
            }];
            self.lossy = true;
        }
        self.boxes.sort_by_key(box_order);
    }
}

/// Sets up to this size are merged pairwise (quadratic, precise).
const EXHAUSTIVE_MERGE: usize = 64;

/// The one box covering `a` and `b`, when there is one.
fn union_of(a: &KeyBox, b: &KeyBox) -> Option<KeyBox> {
    if a.rk == b.rk && joinable(&a.pk, &b.pk) {
        Some(KeyBox {
            pk: a.pk.hull(&b.pk),
            rk: a.rk.clone(),
        })
    } else if a.pk == b.pk && a.pk.as_point().is_some() && joinable(&a.rk, &b.rk) {
        Some(KeyBox {
            pk: a.pk.clone(),
            rk: a.rk.hull(&b.rk),
        })
    } else {
        None
    }
}

impl KeySet {
    fn find_merge(&self) -> Option<(usize, usize, KeyBox)> {
        for i in 0..self.boxes.len() {
            for j in i + 1..self.boxes.len() {
                if let Some(u) = union_of(&self.boxes[i], &self.boxes[j]) {
                    return Some((i, j, u));
                }
            }
        }
        None
    }
}

fn box_order(b: &KeyBox) -> (u8, String, u8, String) {
    let key = |bound: &Bound<String>| match bound {
        Bound::Unbounded => (0, String::new()),
        Bound::Included(s) => (1, s.clone()),
        Bound::Excluded(s) => (2, s.clone()),
    };
    let (a, s) = key(&b.pk.lo);
    let (c, t) = key(&b.rk.lo);
    (a, s, c, t)
}

/// Pushes NOT down to the leaves and folds boolean constants (unknown folds
/// to false, which is sound for WHERE once no NOT is above it).
pub fn nnf(e: &BExpr, negate: bool) -> BExpr {
    let neg_op = |op: CmpOp| match op {
        CmpOp::Eq => CmpOp::Ne,
        CmpOp::Ne => CmpOp::Eq,
        CmpOp::Lt => CmpOp::Ge,
        CmpOp::Le => CmpOp::Gt,
        CmpOp::Gt => CmpOp::Le,
        CmpOp::Ge => CmpOp::Lt,
    };
    match e {
        BExpr::Not(x) => nnf(x, !negate),
        BExpr::And(v) | BExpr::Or(v) => {
            let is_and = matches!(e, BExpr::And(_)) != negate;
            let parts: Vec<BExpr> = v.iter().map(|x| nnf(x, negate)).collect();
            let mut flat = Vec::new();
            for p in parts {
                match (is_and, p) {
                    (true, BExpr::And(inner)) | (false, BExpr::Or(inner)) => flat.extend(inner),
                    (true, BExpr::Bool(true)) | (false, BExpr::Bool(false)) => {}
                    (true, BExpr::Bool(false)) => return BExpr::Bool(false),
                    (false, BExpr::Bool(true)) => return BExpr::Bool(true),
                    (_, p) => flat.push(p),
                }
            }
            match (flat.len(), is_and) {
                (0, and) => BExpr::Bool(and),
                (1, _) => flat.pop().expect("one"),
                (_, true) => BExpr::And(flat),
                (_, false) => BExpr::Or(flat),
            }
        }
        BExpr::Bool(b) => BExpr::Bool(*b != negate),
        // Unknown is never true, negated or not.
        BExpr::Null => BExpr::Bool(false),
        BExpr::Cmp(a, op, b) => {
            if matches!(**b, BExpr::Null) {
                return BExpr::Bool(false);
            }
            BExpr::Cmp(a.clone(), if negate { neg_op(*op) } else { *op }, b.clone())
        }
        // A NULL element: spell the comparison out so each element's
        // comparison folds by itself (`(a, b) > ('x', NULL)` is true
        // exactly where a > 'x').
        BExpr::RowCmp { left, op, right }
            if left.iter().chain(right).any(|x| matches!(x, BExpr::Null)) =>
        {
            nnf(&row_expanded(left, *op, right), negate)
        }
        BExpr::RowCmp { left, op, right } if negate => BExpr::RowCmp {
            left: left.clone(),
            op: neg_op(*op),
            right: right.clone(),
        },
        BExpr::InList {
            expr,
            list,
            negated,
        } => {
            let negated = *negated != negate;
            let has_null = list.iter().any(|x| matches!(x, BExpr::Null));
            let list: Vec<BExpr> = list
                .iter()
                .filter(|x| !matches!(x, BExpr::Null))
                .cloned()
                .collect();
            // `x NOT IN (…, NULL)` is never true; `x IN (NULL)` neither.
            if (negated && has_null) || list.is_empty() {
                return BExpr::Bool(false);
            }
            BExpr::InList {
                expr: expr.clone(),
                list,
                negated,
            }
        }
        // A NULL bound: spell BETWEEN out so each comparison folds by
        // itself (`x NOT BETWEEN NULL AND 5` is true where x > 5).
        BExpr::Between {
            expr,
            low,
            high,
            negated,
        } if matches!(**low, BExpr::Null) || matches!(**high, BExpr::Null) => nnf(
            &BExpr::And(vec![
                BExpr::Cmp(expr.clone(), CmpOp::Ge, low.clone()),
                BExpr::Cmp(expr.clone(), CmpOp::Le, high.clone()),
            ]),
            negate != *negated,
        ),
        BExpr::Between {
            expr,
            low,
            high,
            negated,
        } => BExpr::Between {
            expr: expr.clone(),
            low: low.clone(),
            high: high.clone(),
            negated: *negated != negate,
        },
        BExpr::Like {
            expr,
            pattern,
            escape,
            negated,
            case_insensitive,
        } => {
            if matches!(**pattern, BExpr::Null) {
                return BExpr::Bool(false);
            }
            BExpr::Like {
                expr: expr.clone(),
                pattern: pattern.clone(),
                escape: *escape,
                negated: *negated != negate,
                case_insensitive: *case_insensitive,
            }
        }
        BExpr::IsNull { expr, negated } => BExpr::IsNull {
            expr: expr.clone(),
            negated: *negated != negate,
        },
        other if negate => BExpr::Not(Box::new(other.clone())),
        other => other.clone(),
    }
}

/// `(a, b) op (x, y)` as comparisons of its elements, lexicographically:
/// `=` is `a = x AND b = y`, `<>` its negation, `>` is
/// `a > x OR (a = x AND b > y)`, `>=` the same with `b >= y` last.
fn row_expanded(left: &[BExpr], op: CmpOp, right: &[BExpr]) -> BExpr {
    let cmp = |i: usize, op| BExpr::Cmp(Box::new(left[i].clone()), op, Box::new(right[i].clone()));
    let eq_prefix = |n: usize| (0..n).map(|i| cmp(i, CmpOp::Eq)).collect::<Vec<_>>();
    let n = left.len().min(right.len());
    match op {
        CmpOp::Eq => BExpr::And(eq_prefix(n)),
        CmpOp::Ne => BExpr::Not(Box::new(BExpr::And(eq_prefix(n)))),
        _ => {
            let (strict, last) = match op {
                CmpOp::Lt => (CmpOp::Lt, CmpOp::Lt),
                CmpOp::Le => (CmpOp::Lt, CmpOp::Le),
                CmpOp::Gt => (CmpOp::Gt, CmpOp::Gt),
                _ => (CmpOp::Gt, CmpOp::Ge),
            };
            BExpr::Or(
                (0..n)
                    .map(|i| {
                        let mut conj = eq_prefix(i);
                        conj.push(cmp(i, if i + 1 == n { last } else { strict }));
                        BExpr::And(conj)
                    })
                    .collect(),
            )
        }
    }
}

fn key_role(e: &BExpr) -> Option<Role> {
    match e {
        BExpr::Column(c) if matches!(c.role, Role::PartitionKey | Role::RowKey) => Some(c.role),
        _ => None,
    }
}

fn lit_str(e: &BExpr) -> Option<&str> {
    match e {
        BExpr::Lit(Value::String(s)) => Some(s),
        _ => None,
    }
}

/// `col op lit` over a key column as a comparison of the stored key text.
/// A text key compares with the literal itself. A typed key (see
/// `tablegate_catalog::keycodec`) compares with the literal first put in the
/// column's type, as the residual filter does (`id > 2.5` is `id > 2`, `id
/// = 2.5` is below every id), then encoded; the encoding keeps the order.
/// `None` when `col` is not a key or `lit` not a literal of its type.
fn key_bound(col: &BExpr, op: CmpOp, lit: &BExpr) -> Option<(CmpOp, String)> {
    let BExpr::Column(c) = col else { return None };
    if !matches!(c.role, Role::PartitionKey | Role::RowKey) {
        return None;
    }
    if c.ty == SqlType::Text {
        return Some((op, lit_str(lit)?.to_owned()));
    }
    let BExpr::Lit(v) = lit else { return None };
    match in_column_type(col, field_of(col)?, op, v.clone()) {
        Filter::Compare { op, value, .. } => Some((op, c.ty.encode_key(&value)?)),
        _ => None,
    }
}

/// The stored key `col = lit` names: `None` when it is not a key equality,
/// or when no value of the key's type equals `lit` (`id = 2.5`).
fn key_point(col: &BExpr, lit: &BExpr) -> Option<String> {
    match key_bound(col, CmpOp::Eq, lit)? {
        (CmpOp::Eq, s) => Some(s),
        _ => None,
    }
}

/// The key set of `col op lit`, if it is a key comparison.
fn key_cmp(col: &BExpr, op: CmpOp, lit: &BExpr) -> Option<KeySet> {
    let (op, s) = key_bound(col, op, lit)?;
    let role = key_role(col)?;
    // Below an integer key's smallest value (how `id = 2.5` and `id <
    // -2^63` come out of `in_column_type`): no key.
    if let BExpr::Column(c) = col
        && op == CmpOp::Lt
        && matches!(
            c.ty.decode_key(&s),
            Some(Value::Int32(i32::MIN) | Value::Int64(i64::MIN))
        )
    {
        return Some(KeySet::none());
    }
    Some(KeySet::on(role, interval_for(op, &s)))
}

/// A LIKE pattern on a text key (a typed key's stored text is not what
/// the pattern would be matched against).
fn text_key_role(e: &BExpr) -> Option<Role> {
    match e {
        BExpr::Column(c) if c.ty == SqlType::Text => key_role(e),
        _ => None,
    }
}

/// The literal prefix of a LIKE pattern and whether the pattern is exactly
/// `prefix%` (or exactly `prefix`, with no wildcard at all).
pub fn like_prefix(pattern: &str, escape: Option<char>) -> (String, LikeShape) {
    let mut prefix = String::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        if Some(c) == escape {
            match chars.next() {
                Some(n) => prefix.push(n),
                None => prefix.push(c),
            }
        } else if c == '%' {
            let rest: String = chars.collect();
            return (
                prefix,
                if rest.chars().all(|c| c == '%') {
                    LikeShape::Prefix
                } else {
                    LikeShape::Other
                },
            );
        } else if c == '_' {
            return (prefix, LikeShape::Other);
        } else {
            prefix.push(c);
        }
    }
    (prefix, LikeShape::Exact)
}

/// What a LIKE pattern is beyond its literal prefix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LikeShape {
    /// No wildcard: equality.
    Exact,
    /// `prefix%`.
    Prefix,
    /// Wildcards in the middle.
    Other,
}

/// The key set of an NNF expression and whether it is exact (a widened,
/// lossy set never is).
pub fn derive(e: &BExpr) -> (KeySet, bool) {
    let (set, exact) = derive_node(e);
    let exact = exact && !set.lossy;
    (set, exact)
}

fn derive_node(e: &BExpr) -> (KeySet, bool) {
    match e {
        BExpr::Bool(true) => (KeySet::all(), true),
        BExpr::Bool(false) => (KeySet::none(), true),
        BExpr::And(v) => v.iter().fold((KeySet::all(), true), |(s, ex), x| {
            let (t, ey) = derive(x);
            (s.and(&t), ex && ey)
        }),
        // Unions are gathered and normalized once: folding pairwise would
        // re-normalize a growing set for every term of a long OR.
        BExpr::Or(v) => {
            let mut all = KeySet::none();
            let mut exact = true;
            for x in v {
                let (t, ey) = derive(x);
                exact &= ey;
                all.lossy |= t.lossy;
                all.boxes.extend(t.boxes);
            }
            all.normalize();
            (all, exact)
        }
        BExpr::Cmp(a, op, b) => match key_cmp(a, *op, b) {
            Some(set) => (set, true),
            None => (KeySet::all(), false),
        },
        BExpr::InList {
            expr,
            list,
            negated: false,
        } => match key_role(expr) {
            Some(role) if list.iter().all(|x| key_bound(expr, CmpOp::Eq, x).is_some()) => (
                KeySet::on(
                    role,
                    // An element no key equals (`id IN (1, 2.5)`) drops out.
                    list.iter()
                        .filter_map(|x| key_point(expr, x))
                        .map(KeyInterval::point)
                        .collect(),
                ),
                true,
            ),
            _ => (KeySet::all(), false),
        },
        // `k NOT IN (a, b)` is `k <> a AND k <> b` (keys are never NULL).
        BExpr::InList {
            expr,
            list,
            negated: true,
        } => {
            let sets: Option<Vec<KeySet>> =
                list.iter().map(|x| key_cmp(expr, CmpOp::Ne, x)).collect();
            match sets {
                Some(sets) => (sets.iter().fold(KeySet::all(), |set, x| set.and(x)), true),
                None => (KeySet::all(), false),
            }
        }
        BExpr::Between {
            expr,
            low,
            high,
            negated,
        } => {
            let sets = if *negated {
                key_cmp(expr, CmpOp::Lt, low)
                    .zip(key_cmp(expr, CmpOp::Gt, high))
                    .map(|(a, b)| a.or(&b))
            } else {
                key_cmp(expr, CmpOp::Ge, low)
                    .zip(key_cmp(expr, CmpOp::Le, high))
                    .map(|(a, b)| a.and(&b))
            };
            match sets {
                Some(set) => (set, true),
                None => (KeySet::all(), false),
            }
        }
        BExpr::Like {
            expr,
            pattern,
            escape,
            negated: false,
            case_insensitive: false,
        } => match (text_key_role(expr), lit_str(pattern)) {
            (Some(role), Some(p)) => {
                let (prefix, shape) = like_prefix(p, *escape);
                match shape {
                    LikeShape::Exact => (KeySet::on(role, vec![KeyInterval::point(prefix)]), true),
                    LikeShape::Prefix => {
                        (KeySet::on(role, vec![KeyInterval::prefix(&prefix)]), true)
                    }
                    LikeShape::Other if prefix.is_empty() => (KeySet::all(), false),
                    LikeShape::Other => {
                        (KeySet::on(role, vec![KeyInterval::prefix(&prefix)]), false)
                    }
                }
            }
            _ => (KeySet::all(), false),
        },
        BExpr::IsNull { expr, negated } if key_role(expr).is_some() => {
            // Keys are never NULL.
            (
                if *negated {
                    KeySet::all()
                } else {
                    KeySet::none()
                },
                true,
            )
        }
        BExpr::RowCmp { left, op, right } => row_keyset(left, *op, right),
        _ => (KeySet::all(), false),
    }
}

/// `(pk, rk) op (a, b)` as boxes, lexicographically; `(pk) op (a)` as a
/// plain comparison. Other shapes are not key predicates.
fn row_keyset(left: &[BExpr], op: CmpOp, right: &[BExpr]) -> (KeySet, bool) {
    if let ([l], [r]) = (left, right) {
        return match key_cmp(l, op, r) {
            Some(set) => (set, true),
            None => (KeySet::all(), false),
        };
    }
    let roles: Vec<_> = left.iter().map(key_role).collect();
    let vals: Vec<_> = left
        .iter()
        .zip(right)
        .map(|(l, r)| key_point(l, r))
        .collect();
    match (roles.as_slice(), vals.as_slice()) {
        ([Some(Role::PartitionKey), Some(Role::RowKey)], [Some(a), Some(b)]) => {
            let pk_eq = |rk: Vec<KeyInterval>| KeySet {
                lossy: false,
                boxes: rk
                    .into_iter()
                    .map(|rk| KeyBox {
                        pk: KeyInterval::point(a.as_str()),
                        rk,
                    })
                    .collect(),
            };
            let pk_only = |op| KeySet::on(Role::PartitionKey, interval_for(op, a));
            let set = match op {
                CmpOp::Eq => pk_eq(interval_for(CmpOp::Eq, b)),
                CmpOp::Gt | CmpOp::Ge => pk_eq(interval_for(op, b)).or(&pk_only(CmpOp::Gt)),
                CmpOp::Lt | CmpOp::Le => pk_eq(interval_for(op, b)).or(&pk_only(CmpOp::Lt)),
                CmpOp::Ne => pk_eq(interval_for(CmpOp::Ne, b)).or(&pk_only(CmpOp::Ne)),
            };
            (set, true)
        }
        _ => (KeySet::all(), false),
    }
}

/// Converts an NNF predicate into the store's residual filter; `None` when
/// some part is beyond the store (functions, casts of columns, ...).
pub fn to_filter(e: &BExpr) -> Option<Filter> {
    Some(match e {
        BExpr::Bool(b) => {
            if *b {
                Filter::True
            } else {
                Filter::False
            }
        }
        BExpr::And(v) => Filter::And(v.iter().map(to_filter).collect::<Option<_>>()?),
        BExpr::Or(v) => Filter::Or(v.iter().map(to_filter).collect::<Option<_>>()?),
        BExpr::Not(x) => Filter::Not(Box::new(to_filter(x)?)),
        BExpr::Cmp(a, op, b) => match (malformed_etag(a, b), op) {
            // No row's ETag is a malformed one (and none is NULL).
            (true, CmpOp::Eq) => Filter::False,
            (true, CmpOp::Ne) => Filter::True,
            (true, _) => return None,
            (false, _) => {
                let (field, value) = field_value(a, b)?;
                stored(a, in_column_type(a, field, *op, value))?
            }
        },
        BExpr::InList {
            expr,
            list,
            negated,
        } => {
            let field = field_of(expr)?;
            let mut values = Vec::with_capacity(list.len());
            for x in list {
                if malformed_etag(expr, x) {
                    continue;
                }
                let (f, v) = field_value(expr, x)?;
                // Values no row of the column's type can equal drop out.
                if let Filter::Compare {
                    op: CmpOp::Eq,
                    value,
                    ..
                } = stored(expr, in_column_type(expr, f, CmpOp::Eq, v))?
                {
                    values.push(value);
                }
            }
            let f = Filter::In { field, values };
            if *negated {
                Filter::Not(Box::new(f))
            } else {
                f
            }
        }
        BExpr::Between {
            expr,
            low,
            high,
            negated,
        } => {
            let (field, lo) = field_value(expr, low)?;
            let (_, hi) = field_value(expr, high)?;
            let f = Filter::And(vec![
                stored(expr, in_column_type(expr, field.clone(), CmpOp::Ge, lo))?,
                stored(expr, in_column_type(expr, field, CmpOp::Le, hi))?,
            ]);
            if *negated {
                Filter::Not(Box::new(f))
            } else {
                f
            }
        }
        BExpr::Like {
            expr,
            pattern,
            escape,
            negated,
            case_insensitive,
        } => {
            // A typed key's stored text is not the text LIKE would match.
            if matches!(&**expr, BExpr::Column(c)
                if c.ty != SqlType::Text && matches!(c.role, Role::PartitionKey | Role::RowKey))
            {
                return None;
            }
            let f = Filter::Like {
                field: field_of(expr)?,
                pattern: lit_str(pattern)?.to_owned(),
                escape: *escape,
                case_insensitive: *case_insensitive,
            };
            if *negated {
                Filter::Not(Box::new(f))
            } else {
                f
            }
        }
        BExpr::IsNull { expr, negated } => {
            let field = field_of(expr)?;
            // A property stored with another type reads as NULL.
            let f = match &**expr {
                BExpr::Column(c) if c.role == Role::Property => Filter::IsNullAs(field, c.ty.edm()),
                _ => Filter::IsNull(field),
            };
            if *negated {
                Filter::Not(Box::new(f))
            } else {
                f
            }
        }
        BExpr::RowCmp { left, op, right } => to_filter(&row_expanded(left, *op, right))?,
        _ => return None,
    })
}

/// A comparison on a typed key column compares the stored key text: the
/// value in the key's encoding. `None` when it has none.
fn stored(col: &BExpr, f: Filter) -> Option<Filter> {
    match (col, f) {
        (BExpr::Column(c), Filter::Compare { field, op, value })
            if matches!(c.role, Role::PartitionKey | Role::RowKey) && c.ty != SqlType::Text =>
        {
            Some(Filter::Compare {
                field,
                op,
                value: Value::String(c.ty.encode_key(&value)?),
            })
        }
        (_, f) => Some(f),
    }
}

fn field_of(e: &BExpr) -> Option<Field> {
    match e {
        BExpr::Column(c) => Some(match c.role {
            Role::PartitionKey => Field::PartitionKey,
            Role::RowKey => Field::RowKey,
            Role::Timestamp | Role::ETag => Field::Timestamp,
            Role::Property => Field::Property(c.name.clone()),
        }),
        _ => None,
    }
}

/// A column and a literal as a store field and value. The ETag compares as
/// the Timestamp it is derived from.
/// `field op value` with the constant in the column's own EDM type and the
/// same SQL meaning, three-valued logic included. SQL compares Int32, Int64
/// and Double with one another; a remote table service compares only
/// within one type (Azurite even fails on mixed ones), and a property
/// stored with another type than the column's reads as NULL anyway. So
/// `x > 2.5` on an integer column is `x > 2`, and `x = 2.5`, which no
/// integer satisfies, is `x < MIN` (false, or unknown for NULL — exactly
/// what `x = 2.5` is).
fn in_column_type(col: &BExpr, field: Field, op: CmpOp, value: Value) -> Filter {
    use tablegate_store::EdmType;
    let cmp = |op, value| Filter::Compare {
        field: field.clone(),
        op,
        value,
    };
    let ty = match col {
        BExpr::Column(c) => c.ty.edm(),
        _ => return cmp(op, value),
    };
    let n: i128 = match (&value, ty) {
        (v, t) if v.edm_type() == t => return cmp(op, value),
        (Value::Int32(i), EdmType::Double) => return cmp(op, Value::Double(f64::from(*i))),
        (Value::Int64(i), EdmType::Double) => {
            let d = *i as f64;
            // Beyond 2^53 the nearest double is not the integer: keep it.
            return if d as i128 == i128::from(*i) {
                cmp(op, Value::Double(d))
            } else {
                cmp(op, value)
            };
        }
        (Value::Int32(i), _) => i128::from(*i),
        (Value::Int64(i), _) => i128::from(*i),
        // PostgreSQL orders NaN above every number.
        (Value::Double(d), _) if d.is_nan() => i128::MAX,
        (Value::Double(d), _) if d.fract() == 0.0 || d.is_infinite() => *d as i128,
        (Value::Double(d), _) => match op {
            CmpOp::Eq | CmpOp::Ne => {
                // No integer equals a fraction.
                let never = op == CmpOp::Eq;
                return in_column_type(
                    col,
                    field.clone(),
                    if never { CmpOp::Lt } else { CmpOp::Ge },
                    Value::Int64(i64::MIN),
                );
            }
            // x < 2.5 ⇔ x < 3, x >= 2.5 ⇔ x >= 3; x <= 2.5 ⇔ x <= 2, x > 2.5 ⇔ x > 2.
            CmpOp::Lt | CmpOp::Ge => d.ceil() as i128,
            CmpOp::Le | CmpOp::Gt => d.floor() as i128,
        },
        _ => return cmp(op, value),
    };
    let (min, max, make): (i128, i128, fn(i128) -> Value) = match ty {
        EdmType::Int32 => (i128::from(i32::MIN), i128::from(i32::MAX), |n| {
            Value::Int32(n as i32)
        }),
        EdmType::Int64 => (i128::from(i64::MIN), i128::from(i64::MAX), |n| {
            Value::Int64(n as i64)
        }),
        _ => return cmp(op, value),
    };
    if (min..=max).contains(&n) {
        return cmp(op, make(n));
    }
    // Out of the column's range: the comparison holds for every value or
    // for none; said with the smallest value, so NULL stays unknown.
    let all = match op {
        CmpOp::Eq => false,
        CmpOp::Ne => true,
        CmpOp::Lt | CmpOp::Le => n > max,
        CmpOp::Gt | CmpOp::Ge => n < min,
    };
    cmp(if all { CmpOp::Ge } else { CmpOp::Lt }, make(min))
}

fn field_value(col: &BExpr, lit: &BExpr) -> Option<(Field, Value)> {
    let field = field_of(col)?;
    let value = match lit {
        BExpr::Lit(v) => v.clone(),
        _ => return None,
    };
    match (col, &value) {
        (BExpr::Column(c), Value::String(tag)) if c.role == Role::ETag => {
            Some((field, Value::DateTime(etag_timestamp(tag)?)))
        }
        _ => Some((field, value)),
    }
}

/// `etag` against a text that is not an ETag the store gives out: it
/// equals no row's.
fn malformed_etag(col: &BExpr, lit: &BExpr) -> bool {
    matches!(
        (col, lit),
        (BExpr::Column(c), BExpr::Lit(Value::String(tag)))
            if c.role == Role::ETag && etag_timestamp(tag).is_none()
    )
}

/// The Timestamp inside an ETag `W/"datetime'…'"`.
pub fn etag_timestamp(tag: &str) -> Option<tablegate_store::DateTime> {
    let inner = tag.strip_prefix("W/\"datetime'")?.strip_suffix("'\"")?;
    chrono_parse(inner)
}

fn chrono_parse(s: &str) -> Option<tablegate_store::DateTime> {
    tablegate_catalog::types::parse_timestamp(s, true)
}

/// `PartitionKey = 'a' AND RowKey = 'b'` (either order), the shape of every
/// prepared point lookup once its parameters are bound: the one point it
/// names, exactly what the general path derives for it, without normal
/// forms, key sets and residual analysis (~4% of a prepared point lookup's
/// server CPU). Any other shape returns `None` and takes the general path.
fn exact_point(p: &BExpr) -> Option<Access> {
    let BExpr::And(v) = p else { return None };
    let [a, b] = v.as_slice() else { return None };
    fn eq(e: &BExpr) -> Option<(Role, String)> {
        match e {
            BExpr::Cmp(col, CmpOp::Eq, lit) => Some((key_role(col)?, key_point(col, lit)?)),
            _ => None,
        }
    }
    let (pk, rk) = match (eq(a)?, eq(b)?) {
        ((Role::PartitionKey, pk), (Role::RowKey, rk))
        | ((Role::RowKey, rk), (Role::PartitionKey, pk)) => (pk, rk),
        _ => return None,
    };
    Some(Access {
        spans: vec![KeyBox {
            pk: KeyInterval::point(pk),
            rk: KeyInterval::point(rk),
        }],
        residual: None,
        filter: None,
        residual_needs_engine: false,
        class: AccessClass::Point,
    })
}

/// A classified table access: what the store is asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Access {
    /// Key spans pushed into the store (empty: contradiction).
    pub spans: Vec<KeyBox>,
    /// The part of WHERE the spans do not enforce, in SQL form.
    pub residual: Option<BExpr>,
    /// The residual as a store filter (`None` if there is none).
    pub filter: Option<Filter>,
    /// True when the residual has parts the store cannot evaluate.
    pub residual_needs_engine: bool,
    /// The class.
    pub class: AccessClass,
}

impl Access {
    /// Classifies a WHERE clause (already bound and parameter-free).
    /// `has_row_key` is false for tables keyed by one column, whose RowKey
    /// is always the empty string: there `PartitionKey = c` is a point.
    pub fn from_where(predicate: Option<&BExpr>, has_row_key: bool) -> Access {
        if has_row_key && let Some(point) = predicate.and_then(exact_point) {
            return point;
        }
        Access::derived(predicate, has_row_key)
    }

    /// [`Access::from_where`] without the point shortcut: normal form, key
    /// sets, residual.
    fn derived(predicate: Option<&BExpr>, has_row_key: bool) -> Access {
        let implicit_rk = |set: KeySet| {
            if has_row_key {
                set
            } else {
                set.and(&KeySet {
                    lossy: false,
                    boxes: vec![KeyBox {
                        pk: KeyInterval::all(),
                        rk: KeyInterval::point(""),
                    }],
                })
            }
        };
        let Some(p) = predicate else {
            let spans = implicit_rk(KeySet::all()).boxes;
            return Access {
                class: AccessClass::of(&spans),
                spans,
                residual: None,
                filter: None,
                residual_needs_engine: false,
            };
        };
        let n = nnf(p, false);
        let (set, _) = derive(&n);
        let set = implicit_rk(set);
        // Conjuncts whose key sets are exact are fully enforced by the spans.
        let conjuncts = match &n {
            BExpr::And(v) => v.clone(),
            other => vec![other.clone()],
        };
        // A widened (lossy) key set enforces none of the conjuncts exactly,
        // even those that are exact alone: all of them stay in the residual.
        let rest: Vec<BExpr> = if set.lossy {
            conjuncts
        } else {
            conjuncts.into_iter().filter(|c| !derive(c).1).collect()
        };
        let residual = match rest.len() {
            0 => None,
            1 => rest.into_iter().next(),
            _ => Some(BExpr::And(rest)),
        };
        let spans = set.boxes;
        // A contradiction reads nothing, so nothing is left to filter.
        let residual = if spans.is_empty() { None } else { residual };
        let filter = residual.as_ref().and_then(to_filter);
        let residual_needs_engine = residual.is_some() && filter.is_none();
        Access {
            class: AccessClass::of(&spans),
            spans,
            residual,
            filter,
            residual_needs_engine,
        }
    }
}

/// Renders key spans in key syntax for EXPLAIN:
/// `PartitionKey = 'a' AND RowKey >= 'x'`, one line per box. A bound on a
/// typed key column is followed by the typed value it encodes:
/// `PartitionKey >= '0000000042' (id >= 42)`.
pub fn render_spans(spans: &[KeyBox], table: &TableDef) -> Vec<String> {
    let typed = |c: Option<tablegate_catalog::ColumnRef>| c.filter(|c| c.ty != SqlType::Text);
    let pk = typed(Some(table.partition_key_column()));
    let rk = typed(table.row_key_column());
    spans
        .iter()
        .map(|b| {
            let mut parts = Vec::new();
            render_interval("PartitionKey", &b.pk, pk.as_ref(), &mut parts);
            render_interval("RowKey", &b.rk, rk.as_ref(), &mut parts);
            if parts.is_empty() {
                "all keys".to_owned()
            } else {
                parts.join(" AND ")
            }
        })
        .collect()
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn render_interval(
    name: &str,
    i: &KeyInterval,
    typed: Option<&tablegate_catalog::ColumnRef>,
    out: &mut Vec<String>,
) {
    let mut bound = |op: &str, key: &str| {
        let mut s = format!("{name} {op} {}", quote(key));
        if let Some(c) = typed {
            match c.ty.decode_key(key) {
                Some(v) => s.push_str(&format!(
                    " ({} {op} {})",
                    c.name,
                    crate::expr::sql_literal(&v)
                )),
                None => s.push_str(&format!(" (not a {} key)", c.ty.pg_name())),
            }
        }
        out.push(s);
    };
    if let Some(p) = i.as_point() {
        bound("=", p);
        return;
    }
    match &i.lo {
        Bound::Included(s) => bound(">=", s),
        Bound::Excluded(s) => bound(">", s),
        Bound::Unbounded => {}
    }
    match &i.hi {
        Bound::Included(s) => bound("<=", s),
        Bound::Excluded(s) => bound("<", s),
        Bound::Unbounded => {}
    }
}

/// Columns of `table` compared by equality in the residual: candidates for
/// a better PartitionKey when the access is a full scan.
pub fn equality_columns(residual: &BExpr, out: &mut Vec<String>) {
    match residual {
        BExpr::And(v) => v.iter().for_each(|x| equality_columns(x, out)),
        BExpr::Cmp(a, CmpOp::Eq, _)
        | BExpr::InList {
            expr: a,
            negated: false,
            ..
        } => {
            if let BExpr::Column(c) = &**a
                && c.role == Role::Property
                && !out.contains(&c.name)
            {
                out.push(c.name.clone());
            }
        }
        _ => {}
    }
}

/// Rough selectivity of a residual, PostgreSQL's default estimates:
/// equality 0.005 on keys-free columns is too optimistic for small demo
/// tables, so this uses 0.1 for `=`, 1/3 for ranges, 0.25 for LIKE.
pub fn selectivity(e: &BExpr) -> f64 {
    match e {
        BExpr::Bool(true) => 1.0,
        BExpr::Bool(false) => 0.0,
        BExpr::And(v) => v.iter().map(selectivity).product(),
        BExpr::Or(v) => v.iter().map(selectivity).sum::<f64>().min(1.0),
        BExpr::Not(x) => 1.0 - selectivity(x),
        BExpr::Cmp(_, CmpOp::Eq, _) => 0.1,
        BExpr::Cmp(_, CmpOp::Ne, _) => 0.9,
        BExpr::Cmp(..) | BExpr::RowCmp { .. } => 1.0 / 3.0,
        BExpr::InList { list, negated, .. } => {
            let s = (0.1 * list.len() as f64).min(1.0);
            if *negated { 1.0 - s } else { s }
        }
        BExpr::Between { negated, .. } => {
            if *negated {
                0.75
            } else {
                0.25
            }
        }
        BExpr::Like { negated, .. } => {
            if *negated {
                0.75
            } else {
                0.25
            }
        }
        BExpr::IsNull { negated, .. } => {
            if *negated {
                0.9
            } else {
                0.1
            }
        }
        _ => 1.0 / 3.0,
    }
}

/// True when `table` has the column as a key (for advice wording).
pub fn is_key(table: &TableDef, column: &str) -> bool {
    table.partition_key == column || table.row_key.as_deref() == Some(column)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablegate_catalog::{ColumnRef, SqlType};

    fn col(name: &str, role: Role) -> BExpr {
        BExpr::Column(ColumnRef {
            name: name.into(),
            ty: SqlType::Text,
            role,
            nullable: false,
        })
    }

    fn eq(a: BExpr, b: BExpr) -> BExpr {
        BExpr::Cmp(Box::new(a), CmpOp::Eq, Box::new(b))
    }

    fn text(s: &str) -> BExpr {
        BExpr::Lit(Value::String(s.into()))
    }

    /// The point shortcut answers exactly what the general path derives,
    /// and leaves every other shape to it.
    #[test]
    fn the_point_shortcut_agrees_with_the_general_path() {
        let pk = || col("pk", Role::PartitionKey);
        let rk = || col("rk", Role::RowKey);
        let n = || col("n", Role::Property);
        let taken = [
            BExpr::And(vec![eq(pk(), text("a")), eq(rk(), text("b"))]),
            BExpr::And(vec![eq(rk(), text("")), eq(pk(), text("p q"))]),
        ];
        for p in &taken {
            let fast = exact_point(p).expect("a point");
            assert_eq!(fast, Access::derived(Some(p), true), "{p:?}");
            assert_eq!(fast.class, AccessClass::Point);
            assert_eq!(Access::from_where(Some(p), true), fast);
        }
        let left = [
            BExpr::And(vec![eq(pk(), text("a")), eq(pk(), text("b"))]),
            BExpr::And(vec![eq(rk(), text("a")), eq(rk(), text("a"))]),
            BExpr::And(vec![eq(pk(), text("a")), eq(n(), text("b"))]),
            BExpr::And(vec![eq(text("a"), pk()), eq(rk(), text("b"))]),
            BExpr::And(vec![eq(pk(), text("a")), eq(rk(), BExpr::Null)]),
            BExpr::And(vec![
                eq(pk(), text("a")),
                eq(rk(), text("b")),
                eq(n(), text("c")),
            ]),
            BExpr::Or(vec![eq(pk(), text("a")), eq(rk(), text("b"))]),
            eq(pk(), text("a")),
        ];
        for p in &left {
            assert_eq!(exact_point(p), None, "{p:?}");
            assert_eq!(
                Access::from_where(Some(p), true),
                Access::derived(Some(p), true)
            );
        }
        // One-column keys: `pk = a AND rk = b` cannot occur, and the
        // shortcut is not asked.
        let p = &taken[0];
        assert_eq!(
            Access::from_where(Some(p), false),
            Access::derived(Some(p), false)
        );
    }
}
