//! From a predicate to the keys it can select: NOT pushed to the leaves
//! ([`nnf`]), row values expanded into comparisons of their elements, key
//! sets of predicates ([`derive()`]), comparisons on typed keys as bounds on
//! the stored key text, and the literal prefix of LIKE patterns.

use tablegate_catalog::{Role, SqlType};
use tablegate_store::{CmpOp, Filter, KeyBox, KeyInterval, Value};

use super::filter::{field_of, in_column_type};
use super::set::{KeySet, interval_for};
use crate::expr::BExpr;

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
pub(super) fn row_expanded(left: &[BExpr], op: CmpOp, right: &[BExpr]) -> BExpr {
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

pub(super) fn key_role(e: &BExpr) -> Option<Role> {
    match e {
        BExpr::Column(c) if matches!(c.role, Role::PartitionKey | Role::RowKey) => Some(c.role),
        _ => None,
    }
}

pub(super) fn lit_str(e: &BExpr) -> Option<&str> {
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
pub(super) fn key_point(col: &BExpr, lit: &BExpr) -> Option<String> {
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
