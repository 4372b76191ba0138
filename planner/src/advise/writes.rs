//! The workload's writes, as the advisor judges a design by them: which
//! writes must be atomic together (a multi-row INSERT; the statements of a
//! `BEGIN … COMMIT` block), and whether a design keeps each such unit in
//! one PartitionKey, the only place an entity-group transaction can make
//! it atomic (the seeds' banking example: the account number cannot be
//! part of the PartitionKey when a transfer writes two accounts).
//!
//! The judgement is on the statement text: the rows a unit writes are
//! compared by the expression each gives a column (the same literal or the
//! same parameter is the same value). A unit whose rows give a key column
//! different or unknown expressions may span PartitionKeys.

use sqlparser::ast;

use super::WorkloadStatement;
use super::derived::Derived;
use crate::expr::fold;

/// A workload statement, parsed when it parses.
pub type Statement<'a> = (&'a WorkloadStatement, Option<&'a ast::Statement>);

/// Writes that must be atomic together.
#[derive(Debug, Clone)]
pub struct Unit {
    /// Its first write's text.
    pub sql: String,
    /// How often it runs.
    pub weight: f64,
    /// Each row written: the expression each column is given (for UPDATE
    /// and DELETE, the columns the WHERE clause fixes).
    rows: Vec<Vec<(String, String)>>,
}

impl Unit {
    /// Whether every row gives `col` the same expression.
    fn same(&self, col: &str) -> bool {
        let mut seen: Option<&str> = None;
        for r in &self.rows {
            match r.iter().find(|(c, _)| c == col) {
                Some((_, e)) if seen.is_none_or(|s| s == e) => seen = Some(e),
                _ => return false,
            }
        }
        true
    }

    /// Whether a design whose PartitionKey is `pk` (a column or a derived
    /// key) writes the unit in one PartitionKey.
    pub fn atomic_under(&self, pk: &str, derived: &[Derived]) -> bool {
        match derived.iter().find(|d| d.name == pk) {
            // A compound key is one value when its parts are; a bucket of
            // one value is one bucket.
            Some(d) => d.sources().iter().all(|c| self.same(c)),
            None => self.same(pk),
        }
    }
}

/// Splits `workload` into the writes to `table` that must be atomic
/// together (units of two rows or more), and marks each statement it used.
/// `columns` orders a positional INSERT's values.
pub fn units(
    workload: &[Statement<'_>],
    table: &str,
    columns: &[String],
) -> (Vec<Unit>, Vec<usize>) {
    let mut out = Vec::new();
    let mut used = Vec::new();
    let mut block: Option<Unit> = None;
    for (i, (w, stmt)) in workload.iter().enumerate() {
        let Some(stmt) = stmt else { continue };
        match stmt {
            ast::Statement::StartTransaction { .. } => {
                used.push(i);
                block = Some(Unit {
                    sql: String::new(),
                    weight: w.weight,
                    rows: Vec::new(),
                });
            }
            ast::Statement::Commit { .. } | ast::Statement::Rollback { .. } => {
                used.push(i);
                if let Some(u) = block.take()
                    && u.rows.len() > 1
                {
                    out.push(u);
                }
            }
            s => {
                let Some(rows) = rows_written(s, table, columns) else {
                    continue;
                };
                used.push(i);
                match &mut block {
                    Some(u) => {
                        if u.sql.is_empty() {
                            u.sql = w.sql.clone();
                        }
                        u.rows.extend(rows);
                    }
                    // An INSERT … SELECT alone is a bulk load: applied one
                    // entity-group transaction per PartitionKey, never
                    // atomic as a whole.
                    None if rows.len() > 1 && rows.iter().all(|r| !r.is_empty()) => {
                        out.push(Unit {
                            sql: w.sql.clone(),
                            weight: w.weight,
                            rows,
                        })
                    }
                    None => {}
                }
            }
        }
    }
    (out, used)
}

/// The workload's INSERTs into `table`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Inserts {
    /// There are some (so the insert order is a runtime pattern, not only
    /// how the data was loaded).
    pub any: bool,
    /// Entities per second they write (rate times rows); `None` when one
    /// of them has no rate.
    pub load: Option<f64>,
}

/// The workload's INSERTs into `table`.
pub fn inserts(workload: &[Statement<'_>], table: &str) -> Inserts {
    let mut out = Inserts {
        any: false,
        load: Some(0.0),
    };
    for (w, s) in workload {
        if let Some(ast::Statement::Insert(ins)) = s
            && matches!(&ins.table, ast::TableObject::TableName(n) if names_table(n, table))
        {
            let rows = match ins.source.as_deref().map(|q| &*q.body) {
                Some(ast::SetExpr::Values(v)) => v.rows.len(),
                _ => 1,
            };
            out.any = true;
            out.load = out.load.zip(w.rate).map(|(l, r)| l + r * rows as f64);
        }
    }
    out
}

fn names_table(name: &ast::ObjectName, table: &str) -> bool {
    name.0
        .last()
        .and_then(|p| p.as_ident())
        .is_some_and(|i| fold(i) == table)
}

/// The rows a write to `table` touches, each as (column, expression);
/// `None` for a statement that is not a write to `table`.
fn rows_written(
    s: &ast::Statement,
    table: &str,
    columns: &[String],
) -> Option<Vec<Vec<(String, String)>>> {
    match s {
        ast::Statement::Insert(ins) => {
            let ast::TableObject::TableName(name) = &ins.table else {
                return None;
            };
            if !names_table(name, table) {
                return None;
            }
            let cols: Vec<String> = if ins.columns.is_empty() {
                columns.to_vec()
            } else {
                ins.columns
                    .iter()
                    .filter_map(|c| c.0.last()?.as_ident().map(fold))
                    .collect()
            };
            let ast::SetExpr::Values(v) = &*ins.source.as_ref()?.body else {
                // INSERT … SELECT: the rows are not in the text (inside
                // a block, they may be anywhere).
                return Some(vec![Vec::new(), Vec::new()]);
            };
            Some(
                v.rows
                    .iter()
                    .map(|r| cols.iter().cloned().zip(r.iter().map(expr_text)).collect())
                    .collect(),
            )
        }
        ast::Statement::Update(u) => {
            let ast::TableFactor::Table { name, .. } = &u.table.relation else {
                return None;
            };
            names_table(name, table).then(|| vec![fixed(u.selection.as_ref())])
        }
        ast::Statement::Delete(d) => {
            let from = match &d.from {
                ast::FromTable::WithFromKeyword(v) | ast::FromTable::WithoutKeyword(v) => v,
            };
            let [twj] = from.as_slice() else { return None };
            let ast::TableFactor::Table { name, .. } = &twj.relation else {
                return None;
            };
            names_table(name, table).then(|| vec![fixed(d.selection.as_ref())])
        }
        _ => None,
    }
}

/// A value's identity: constants and parameters by their text; anything
/// computed is its own (never equal to another row's).
fn expr_text(e: &ast::Expr) -> String {
    match e {
        ast::Expr::Value(_) => e.to_string(),
        ast::Expr::Cast { expr, .. } | ast::Expr::Nested(expr) => expr_text(expr),
        _ => format!("{e}#{:p}", e),
    }
}

/// The columns a WHERE clause fixes with `col = value` conjuncts.
fn fixed(e: Option<&ast::Expr>) -> Vec<(String, String)> {
    fn walk(e: &ast::Expr, out: &mut Vec<(String, String)>) {
        match e {
            ast::Expr::BinaryOp {
                left,
                op: ast::BinaryOperator::And,
                right,
            } => {
                walk(left, out);
                walk(right, out);
            }
            ast::Expr::Nested(x) => walk(x, out),
            ast::Expr::BinaryOp {
                left,
                op: ast::BinaryOperator::Eq,
                right,
            } => match (&**left, &**right) {
                (ast::Expr::Identifier(c), v) | (v, ast::Expr::Identifier(c)) => {
                    out.push((fold(c), expr_text(v)));
                }
                _ => {}
            },
            _ => {}
        }
    }
    let mut out = Vec::new();
    if let Some(e) = e {
        walk(e, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(sql: &str) -> Vec<(WorkloadStatement, Option<ast::Statement>)> {
        super::super::parse_workload(sql)
            .into_iter()
            .map(|w| {
                let s = crate::Planner::parse(&w.sql).ok().and_then(|mut v| v.pop());
                (w, s)
            })
            .collect()
    }

    #[test]
    fn a_unit_is_atomic_when_its_rows_share_the_partition_key() {
        let cols = ["tenant".to_owned(), "id".to_owned(), "total".to_owned()];
        let parsed = parse(
            "-- weight: 4\nINSERT INTO orders VALUES ($1, $2, 10), ($1, $3, 20);\n\
             BEGIN; UPDATE orders SET total = 1 WHERE tenant = 'a' AND id = $1;\
             DELETE FROM orders WHERE id = $2 AND tenant = 'a'; COMMIT;\n\
             INSERT INTO orders (id, tenant) VALUES (1, 'x');\n\
             INSERT INTO orders SELECT * FROM orders;\n\
             INSERT INTO other VALUES (1, 2), (3, 4);",
        );
        let w: Vec<Statement<'_>> = parsed.iter().map(|(w, s)| (w, s.as_ref())).collect();
        let (units, used) = units(&w, "orders", &cols);
        assert_eq!(units.len(), 2);
        assert_eq!(used, [0, 1, 2, 3, 4, 5, 6]);
        assert_eq!(units[0].weight, 4.0);
        for u in &units {
            assert!(u.atomic_under("tenant", &[]));
            assert!(!u.atomic_under("id", &[]));
        }
        let c = Derived::compound("tenant", "id");
        assert!(!units[0].atomic_under(&c.name, std::slice::from_ref(&c)));
        let b = Derived::bucket("tenant");
        assert!(units[0].atomic_under(&b.name, std::slice::from_ref(&b)));
    }
}
