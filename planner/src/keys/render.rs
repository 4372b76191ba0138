//! Spans and residuals as EXPLAIN shows them: key spans in key syntax (with
//! the typed values of typed keys), the columns worth a better key, a rough
//! selectivity, and whether a column is a key (for advice wording).

use std::ops::Bound;

use tablegate_catalog::{Role, SqlType, TableDef};
use tablegate_store::{CmpOp, KeyBox, KeyInterval};

use crate::expr::BExpr;

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
                    crate::expr::sql_literal_as(&v, c.ty)
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
