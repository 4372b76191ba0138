//! Correlated scalar subqueries DataFusion cannot plan, rewritten as joins.
//!
//! DataFusion 55 decorrelates a scalar subquery only when its correlation
//! is equalities (`WHERE o.cid = c.id`); with any other comparison
//! (`WHERE x.b < t1.b`, SQLite's sqllogictest is full of them) it refuses
//! the query. The value of such a subquery depends only on the outer
//! columns it reads, so it is computed once per distinct combination of
//! them and joined back:
//!
//! ```sql
//! SELECT a, (SELECT count(*) FROM t1 AS x WHERE x.b < t1.b) FROM t1
//! -- becomes
//! SELECT a, COALESCE(__sq1.__v, 0) FROM t1
//!   LEFT JOIN (SELECT __o.__k1, count(*) AS __v
//!              FROM (SELECT DISTINCT b AS __k1 FROM t1) AS __o, t1 AS x
//!              WHERE x.b < __o.__k1 GROUP BY __o.__k1) AS __sq1
//!     ON __sq1.__k1 IS NOT DISTINCT FROM t1.b
//! ```
//!
//! One row of `__sq1` per distinct key, so the join keeps the outer rows
//! as they were; an outer row no inner row matches gets NULL, which is the
//! subquery's value for every aggregate but `count`, whose 0 the COALESCE
//! gives. Deliberately narrow, since a wrong rewrite is a wrong answer:
//! the outer query reads one table and no `*`; the subquery is one
//! aggregate call over tables of other names, with the outer columns only
//! in its WHERE, no GROUP BY, HAVING, DISTINCT, ORDER BY, LIMIT or nested
//! subquery. Anything else is left to DataFusion as written.

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{
    BinaryOperator, Expr, FunctionArguments, GroupByExpr, Ident, ObjectNamePart, Query, SelectItem,
    SetExpr, Statement, TableFactor, Visit, VisitMut, Visitor, VisitorMut,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion_pg_catalog::sql::rules::SqlStatementRewriteRule;

/// The rule (`dialect.rs` runs it on queries over user tables).
#[derive(Debug)]
pub(super) struct Decorrelate;

impl SqlStatementRewriteRule for Decorrelate {
    fn rewrite(&self, mut s: Statement) -> Statement {
        let _ = VisitMut::visit(&mut s, &mut Decorrelate);
        s
    }
}

impl VisitorMut for Decorrelate {
    type Break = ();

    fn post_visit_query(&mut self, q: &mut Query) -> ControlFlow<()> {
        // ORDER BY may repeat a subquery; rewriting the select list alone
        // would leave it behind.
        if q.order_by.as_ref().is_some_and(has_subquery) {
            return ControlFlow::Continue(());
        }
        if let SetExpr::Select(sel) = &mut *q.body {
            rewrite_select(sel);
        }
        ControlFlow::Continue(())
    }
}

fn has_subquery<T: Visit>(node: &T) -> bool {
    struct Find;
    impl Visitor for Find {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            match e {
                Expr::Subquery(_) | Expr::Exists { .. } | Expr::InSubquery { .. } => {
                    ControlFlow::Break(())
                }
                _ => ControlFlow::Continue(()),
            }
        }
    }
    node.visit(&mut Find).is_break()
}

fn rewrite_select(sel: &mut datafusion::sql::sqlparser::ast::Select) {
    let [from] = sel.from.as_slice() else { return };
    if !from.joins.is_empty() {
        return;
    }
    let TableFactor::Table {
        name,
        alias,
        args: None,
        ..
    } = &from.relation
    else {
        return;
    };
    if sel.projection.iter().any(|i| {
        matches!(
            i,
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)
        )
    }) {
        return;
    }
    let outer_name = match alias {
        Some(a) if a.columns.is_empty() => a.name.value.clone(),
        Some(_) => return,
        None => match name.0.last().and_then(ObjectNamePart::as_ident) {
            Some(i) => i.value.clone(),
            None => return,
        },
    };
    let outer = Outer {
        table: name.to_string(),
        name: outer_name,
    };
    let mut joins = Vec::new();
    let mut rewriter = Rewriter {
        outer: &outer,
        joins: &mut joins,
    };
    for item in &mut sel.projection {
        let _ = VisitMut::visit(item, &mut rewriter);
    }
    if let Some(w) = &mut sel.selection {
        let _ = VisitMut::visit(w, &mut rewriter);
    }
    sel.from[0].joins.extend(joins);
}

struct Outer {
    /// The outer table as written.
    table: String,
    /// The name its columns are qualified with (alias, else table name).
    name: String,
}

struct Rewriter<'a> {
    outer: &'a Outer,
    joins: &'a mut Vec<datafusion::sql::sqlparser::ast::Join>,
}

impl VisitorMut for Rewriter<'_> {
    type Break = ();

    fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        let Expr::Subquery(q) = e else {
            return ControlFlow::Continue(());
        };
        let n = self.joins.len() + 1;
        if let Some((join, value)) = decorrelate(q, self.outer, n) {
            self.joins.push(join);
            *e = value;
        }
        ControlFlow::Continue(())
    }
}

/// The join and the expression that replace subquery `q` (the `n`th of
/// its query), or `None` to leave it as written.
fn decorrelate(
    q: &Query,
    outer: &Outer,
    n: usize,
) -> Option<(datafusion::sql::sqlparser::ast::Join, Expr)> {
    if q.with.is_some() || q.order_by.is_some() || q.limit_clause.is_some() || q.fetch.is_some() {
        return None;
    }
    let SetExpr::Select(inner) = &*q.body else {
        return None;
    };
    if inner.distinct.is_some()
        || inner.having.is_some()
        || !matches!(&inner.group_by, GroupByExpr::Expressions(g, m) if g.is_empty() && m.is_empty())
        || inner.from.is_empty()
    {
        return None;
    }
    // One aggregate call.
    let [
        SelectItem::UnnamedExpr(Expr::Function(agg))
        | SelectItem::ExprWithAlias {
            expr: Expr::Function(agg),
            ..
        },
    ] = inner.projection.as_slice()
    else {
        return None;
    };
    let agg_name = agg
        .name
        .0
        .last()
        .and_then(ObjectNamePart::as_ident)?
        .value
        .to_ascii_lowercase();
    if !matches!(agg_name.as_str(), "count" | "sum" | "min" | "max" | "avg") || agg.over.is_some() {
        return None;
    }
    let FunctionArguments::List(_) = &agg.args else {
        return None;
    };
    // No inner table may take the outer's name: its columns would then be
    // the inner table's, not outer references.
    for t in &inner.from {
        for f in std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)) {
            match f {
                TableFactor::Table { name, alias, .. } => {
                    let shown = alias.as_ref().map(|a| a.name.value.clone()).or_else(|| {
                        name.0
                            .last()
                            .and_then(ObjectNamePart::as_ident)
                            .map(|i| i.value.clone())
                    });
                    if shown.is_none_or(|s| s.eq_ignore_ascii_case(&outer.name)) {
                        return None;
                    }
                }
                _ => return None,
            }
        }
    }
    let selection = inner.selection.as_ref()?;
    if has_subquery(selection) || has_subquery(&inner.projection) || has_subquery(&inner.from) {
        return None;
    }
    // Outer references only in the WHERE clause.
    if !outer_columns(&inner.projection, &outer.name).is_empty()
        || !outer_columns(&inner.from, &outer.name).is_empty()
    {
        return None;
    }
    let keys = outer_columns(selection, &outer.name);
    if keys.is_empty() {
        return None;
    }
    // Equalities only: DataFusion decorrelates it itself.
    if equalities_only(selection, &outer.name) {
        return None;
    }
    let mut where_ = selection.clone();
    let _ = VisitMut::visit(
        &mut where_,
        &mut Substitute {
            outer: &outer.name,
            keys: &keys,
        },
    );
    let key_list = |f: &dyn Fn(usize, &str) -> String| -> String {
        keys.iter()
            .enumerate()
            .map(|(i, k)| f(i + 1, k))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let inner_from = inner
        .from
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ");
    let sq = format!("__tg_sq{n}");
    let join_sql = format!(
        "SELECT 1 FROM __tg_outer LEFT JOIN (SELECT {keys_out}, {agg} AS __tg_v \
         FROM (SELECT DISTINCT {keys_in} FROM {table}) AS __tg_o, {inner_from} \
         WHERE {where_} GROUP BY {keys_group}) AS {sq} ON {on}",
        keys_out = key_list(&|i, _| format!("__tg_o.__tg_k{i}")),
        agg = agg,
        keys_in = key_list(&|i, k| format!("{} AS __tg_k{i}", quote(k))),
        table = outer.table,
        keys_group = key_list(&|i, _| format!("__tg_o.__tg_k{i}")),
        on = keys
            .iter()
            .enumerate()
            .map(|(i, k)| format!(
                // Parenthesized: the parser binds IS NOT DISTINCT FROM
                // looser than AND.
                "({sq}.__tg_k{} IS NOT DISTINCT FROM {}.{})",
                i + 1,
                quote(&outer.name),
                quote(k)
            ))
            .collect::<Vec<_>>()
            .join(" AND "),
    );
    let value_sql = if agg_name == "count" {
        format!("SELECT COALESCE({sq}.__tg_v, 0)")
    } else {
        format!("SELECT {sq}.__tg_v")
    };
    let join = match Parser::parse_sql(&PostgreSqlDialect {}, &join_sql)
        .ok()?
        .pop()?
    {
        Statement::Query(q) => match *q.body {
            SetExpr::Select(mut s) => s.from.pop()?.joins.pop()?,
            _ => return None,
        },
        _ => return None,
    };
    let value = match Parser::parse_sql(&PostgreSqlDialect {}, &value_sql)
        .ok()?
        .pop()?
    {
        Statement::Query(q) => match *q.body {
            SetExpr::Select(mut s) => match s.projection.pop()? {
                SelectItem::UnnamedExpr(e) => e,
                _ => return None,
            },
            _ => return None,
        },
        _ => return None,
    };
    Some((join, value))
}

fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The outer table's columns `node` names as `outer.column` (folded as
/// written: quoted names keep their case), in first-seen order.
fn outer_columns<T: Visit>(node: &T, outer: &str) -> Vec<String> {
    struct Find<'a> {
        outer: &'a str,
        found: Vec<String>,
    }
    impl Visitor for Find<'_> {
        type Break = ();
        fn pre_visit_expr(&mut self, e: &Expr) -> ControlFlow<()> {
            if let Some(c) = outer_ref(e, self.outer)
                && !self.found.contains(&c)
            {
                self.found.push(c);
            }
            ControlFlow::Continue(())
        }
    }
    let mut f = Find {
        outer,
        found: Vec::new(),
    };
    let _ = node.visit(&mut f);
    f.found
}

/// `outer.column` → the column, as DataFusion resolves it.
fn outer_ref(e: &Expr, outer: &str) -> Option<String> {
    match e {
        Expr::CompoundIdentifier(ids)
            if ids.len() == 2 && ids[0].value.eq_ignore_ascii_case(outer) =>
        {
            Some(fold(&ids[1]))
        }
        _ => None,
    }
}

fn fold(i: &Ident) -> String {
    if i.quote_style.is_some() {
        i.value.clone()
    } else {
        i.value.to_ascii_lowercase()
    }
}

/// Every conjunct of `e` that reads an outer column is `inner = outer`.
fn equalities_only(e: &Expr, outer: &str) -> bool {
    match e {
        Expr::BinaryOp {
            left,
            op: BinaryOperator::And,
            right,
        } => equalities_only(left, outer) && equalities_only(right, outer),
        Expr::Nested(x) => equalities_only(x, outer),
        Expr::BinaryOp {
            left,
            op: BinaryOperator::Eq,
            right,
        } => {
            let (l, r) = (outer_ref(left, outer), outer_ref(right, outer));
            match (l, r) {
                (Some(_), None) => outer_columns(&**right, outer).is_empty(),
                (None, Some(_)) => outer_columns(&**left, outer).is_empty(),
                (None, None) => outer_columns(e, outer).is_empty(),
                (Some(_), Some(_)) => false,
            }
        }
        other => outer_columns(other, outer).is_empty(),
    }
}

/// Replaces `outer.column` by `__tg_o.__tg_kN`.
struct Substitute<'a> {
    outer: &'a str,
    keys: &'a [String],
}

impl VisitorMut for Substitute<'_> {
    type Break = ();
    fn pre_visit_expr(&mut self, e: &mut Expr) -> ControlFlow<()> {
        if let Some(c) = outer_ref(e, self.outer)
            && let Some(i) = self.keys.iter().position(|k| *k == c)
        {
            *e = Expr::CompoundIdentifier(vec![
                Ident::new("__tg_o"),
                Ident::new(format!("__tg_k{}", i + 1)),
            ]);
        }
        ControlFlow::Continue(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(sql: &str) -> String {
        let s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
            .unwrap()
            .pop()
            .unwrap();
        Decorrelate.rewrite(s).to_string()
    }

    #[test]
    fn a_non_equality_correlation_becomes_a_join_on_the_outer_columns() {
        assert_eq!(
            rewrite(
                "SELECT a, (SELECT count(*) FROM t1 AS x WHERE x.b < t1.b AND x.c <> t1.c) FROM t1 WHERE (SELECT max(y.a) FROM t2 AS y WHERE y.a > t1.a) > 3"
            ),
            "SELECT a, COALESCE(__tg_sq1.__tg_v, 0) FROM t1 \
             LEFT JOIN (SELECT __tg_o.__tg_k1, __tg_o.__tg_k2, count(*) AS __tg_v FROM (SELECT DISTINCT \"b\" AS __tg_k1, \"c\" AS __tg_k2 FROM t1) AS __tg_o, t1 AS x \
             WHERE x.b < __tg_o.__tg_k1 AND x.c <> __tg_o.__tg_k2 GROUP BY __tg_o.__tg_k1, __tg_o.__tg_k2) AS __tg_sq1 \
             ON (__tg_sq1.__tg_k1 IS NOT DISTINCT FROM \"t1\".\"b\") AND (__tg_sq1.__tg_k2 IS NOT DISTINCT FROM \"t1\".\"c\") \
             LEFT JOIN (SELECT __tg_o.__tg_k1, max(y.a) AS __tg_v FROM (SELECT DISTINCT \"a\" AS __tg_k1 FROM t1) AS __tg_o, t2 AS y \
             WHERE y.a > __tg_o.__tg_k1 GROUP BY __tg_o.__tg_k1) AS __tg_sq2 \
             ON (__tg_sq2.__tg_k1 IS NOT DISTINCT FROM \"t1\".\"a\") \
             WHERE __tg_sq2.__tg_v > 3"
        );
    }

    #[test]
    fn what_datafusion_plans_or_the_rewrite_cannot_keep_exact_is_left_alone() {
        for sql in [
            // Equalities: DataFusion decorrelates them.
            "SELECT (SELECT max(o.amount) FROM ord AS o WHERE o.cid = c.id) FROM cust AS c",
            // Not an aggregate; an expression over one; a wildcard.
            "SELECT (SELECT x.a FROM t1 AS x WHERE x.b < t1.b) FROM t1",
            "SELECT (SELECT count(*) + 1 FROM t1 AS x WHERE x.b < t1.b) FROM t1",
            "SELECT *, (SELECT count(*) FROM t1 AS x WHERE x.b < t1.b) FROM t1",
            // The inner table takes the outer's name; a join outside.
            "SELECT (SELECT count(*) FROM t1 WHERE t1.b < 3) FROM t1",
            "SELECT (SELECT count(*) FROM t2 AS x WHERE x.b < t1.b) FROM t1 JOIN t3 ON true",
            // Outer columns outside the inner WHERE; ORDER BY a subquery.
            "SELECT (SELECT max(t1.a) FROM t2 AS x WHERE x.b < t1.b) FROM t1",
            "SELECT (SELECT count(*) FROM t2 AS x WHERE x.b < t1.b) FROM t1 ORDER BY (SELECT 1)",
        ] {
            let s = Parser::parse_sql(&PostgreSqlDialect {}, sql)
                .unwrap()
                .pop()
                .unwrap()
                .to_string();
            assert_eq!(rewrite(sql), s, "{sql}");
        }
    }
}
