//! **Where a query is classified.** From a bound WHERE clause to the store's
//! key spans, the residual filter and the access class.
//!
//! 1. [`nnf`] pushes NOT down to the leaves (`NOT (a < 1)` → `a >= 1`,
//!    De Morgan), so every leaf can be read positively. SQL's three-valued
//!    logic survives: `NOT (x = 1)` and `x <> 1` are both unknown when x is
//!    NULL.
//! 2. [`derive()`] maps each subexpression to a [`KeySet`] — a union of
//!    PartitionKey × RowKey boxes containing every row the expression can
//!    select — and says whether the set is *exact* (the expression holds on
//!    every key in it). Key comparisons, BETWEEN, IN, prefix LIKE and row
//!    values give exact sets; anything else is "all keys, inexact". AND
//!    intersects, OR unites.
//! 3. [`Access::from_where`] keeps the exact top-level conjuncts in the spans
//!    only and turns the rest into the residual filter the store evaluates
//!    ([`to_filter`]). An empty key set is a contradiction: zero store
//!    requests. The shape of every bound prepared point lookup,
//!    `PartitionKey = 'a' AND RowKey = 'b'`, takes a shortcut to the same
//!    answer (`exact_point`).
//! 4. [`AccessClass::of`] names the shape: point, row-range, partition-range,
//!    full scan.
//!
//! This module holds the access classes and [`Access`], which runs the
//! stages; the stages live in private submodules, re-exported here so that
//! every public item stays at `keys::…`:
//!
//! - `set`: key sets, their intersection, union and normal form;
//! - `derive`: NNF, key sets of predicates, typed key bounds, LIKE prefixes;
//! - `filter`: the residual as a store filter, constants in the column's
//!   type, ETags;
//! - `render`: spans in key syntax for EXPLAIN, advice and selectivity.

use std::ops::Bound;

use tablegate_catalog::Role;
use tablegate_store::{CmpOp, Filter, KeyBox, KeyInterval};

use crate::expr::BExpr;

mod derive;
mod filter;
mod render;
mod set;

pub use derive::{LikeShape, derive, like_prefix, nnf};
pub use filter::{etag_timestamp, to_filter};
pub use render::{equality_columns, is_key, render_spans, selectivity};
pub use set::KeySet;

use derive::{key_point, key_role};

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

/// `PartitionKey = 'a' AND RowKey = 'b'` (either order), the shape of every
/// prepared point lookup once its parameters are bound: the one point it
/// names, exactly what the general path derives for it, without normal
/// forms, key sets and residual analysis, which cost the hottest query
/// shape for nothing. Any other shape returns `None` and takes the general
/// path.
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

#[cfg(test)]
mod tests;
