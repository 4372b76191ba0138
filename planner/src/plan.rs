//! SELECT planning: one statement bound against the catalog, with its route
//! (native path or the analytics engine) decided at prepare time and its
//! key spans at bind time, once parameter values are known.
//!
//! Also owns the select-list binder (`bind_select_list`) that a write's
//! RETURNING shares, so `*`, aliases and output names mean the same in both.

use std::sync::Arc;

use sqlparser::ast::{self, Expr, SelectItem, SetExpr, TableFactor};
use tablegate_catalog::{Catalog, ColumnRef, Role, SqlType, TableDef};
use tablegate_store::{CmpOp, Value};

use crate::error::{PlanError, Result};
use crate::expr::{BExpr, Binder, Count, char_position, fold};
use crate::keys::Access;

/// Which engine runs a statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Straight to the store: key spans, residual filter, projection,
    /// limit; no sort, no join, no aggregate.
    Native,
    /// Needs a SQL engine (DataFusion); the reason names the construct.
    Engine(String),
}

/// An output column.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputColumn {
    /// Name in the result (alias or column name).
    pub name: String,
    /// The column it reads.
    pub column: ColumnRef,
}

/// A prepared SELECT over one table.
#[derive(Debug, Clone)]
pub struct SelectPlan {
    /// The table.
    pub table: Arc<TableDef>,
    /// Result columns.
    pub columns: Vec<OutputColumn>,
    /// WHERE, bound (may contain parameters).
    pub predicate: Option<BExpr>,
    /// LIMIT.
    pub limit: Count,
    /// OFFSET.
    pub offset: Count,
    /// Parameter types by index (`$1` first); unknown ones default to text.
    pub param_types: Vec<SqlType>,
    /// Native or engine.
    pub route: Route,
    /// Its ORDER BY is the clustered-key order, so no sort was planned:
    /// the rows must come in code-point key order (a store that returns
    /// another order is sorted after).
    pub ordered: bool,
    /// The Arrow schema of the result, made on first use and kept with
    /// the plan: a prepared statement executed again does not rebuild it
    /// (a point lookup rebuilt its fields and names every time).
    pub schema: ResultSchema,
}

/// A plan's result schema, made once ([`SelectPlan::result_schema`]).
/// Plans are built with `ResultSchema::default()`; a copy of a plan whose
/// columns change must start from a new one.
#[derive(Debug, Clone, Default)]
pub struct ResultSchema(std::sync::OnceLock<arrow_schema::SchemaRef>);

/// A SELECT with parameter values: what actually runs.
#[derive(Debug, Clone)]
pub struct BoundSelect {
    /// The prepared plan.
    pub plan: Arc<SelectPlan>,
    /// The classified table access.
    pub access: Access,
    /// Rows to return at most (`None`: all).
    pub limit: Option<u64>,
    /// Rows to skip first.
    pub offset: u64,
}

impl SelectPlan {
    /// The Arrow schema of the result: the columns' types, named as in the
    /// result (aliases included).
    pub fn result_schema(&self) -> arrow_schema::SchemaRef {
        self.schema
            .0
            .get_or_init(|| {
                let cols: Vec<_> = self.columns.iter().map(|c| c.column.clone()).collect();
                let schema = TableDef::arrow_schema(&cols);
                Arc::new(arrow_schema::Schema::new(
                    schema
                        .fields()
                        .iter()
                        .zip(&self.columns)
                        .map(|(f, c)| f.as_ref().clone().with_name(&c.name))
                        .collect::<Vec<_>>(),
                ))
            })
            .clone()
    }

    /// Binds parameter values: substitutes them and classifies the access.
    pub fn bind(self: &Arc<Self>, params: &[Option<Value>]) -> Result<BoundSelect> {
        let predicate = self
            .predicate
            .as_ref()
            .map(|p| p.substitute(params))
            .transpose()?;
        let count = |c: Count| -> Result<Option<u64>> {
            Ok(match c {
                Count::All => None,
                Count::Value(v) => Some(v),
                Count::Param(n) => match params.get(n) {
                    Some(Some(Value::Int64(v))) if *v >= 0 => Some(*v as u64),
                    Some(Some(Value::Int32(v))) if *v >= 0 => Some(*v as u64),
                    Some(None) => None,
                    _ => {
                        return Err(PlanError::InvalidParameter(format!(
                            "parameter ${} must be a non-negative integer (LIMIT/OFFSET)",
                            n + 1
                        )));
                    }
                },
            })
        };
        Ok(BoundSelect {
            plan: self.clone(),
            access: Access::from_where(predicate.as_ref(), self.table.row_key.is_some()),
            limit: count(self.limit)?,
            offset: count(self.offset)?.unwrap_or(0),
        })
    }

    /// Property names the store must return (projection pushdown).
    pub fn store_projection(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .columns
            .iter()
            .filter(|c| c.column.role == Role::Property)
            .map(|c| c.column.name.clone())
            .collect();
        v.dedup();
        v
    }
}

/// What planning a query decided: bound against one table (whose
/// [`SelectPlan::route`] says whether the native path runs it), or a shape
/// only the analytics engine runs, before any table is bound.
#[derive(Debug, Clone)]
pub enum Routed {
    /// One table's query, bound and classified.
    Bound(SelectPlan),
    /// WITH, set operations, VALUES, joins, subqueries in FROM, no FROM,
    /// other schemas and system catalogs: the reason names the shape.
    Engine(String),
}

/// Plans a query expression (`SELECT ...`): **where a statement is routed**
/// between the native path and the analytics engine.
pub fn plan_query(catalog: &Catalog, q: &ast::Query, sql: &str) -> Result<Routed> {
    let engine = |reason: &str| Ok(Routed::Engine(reason.to_owned()));
    let mut reasons: Vec<String> = Vec::new();
    if q.with.is_some() {
        return engine("WITH (common table expressions)");
    }
    let select = match &*q.body {
        SetExpr::Select(s) => s,
        SetExpr::SetOperation { op, .. } => {
            return engine(&format!("{op} of several queries"));
        }
        SetExpr::Values(_) => {
            return engine("VALUES lists");
        }
        other => {
            return Err(PlanError::Unsupported {
                feature: format!(
                    "query form {}",
                    other.to_string().chars().take(40).collect::<String>()
                ),
                hint: "use SELECT ... FROM table".into(),
            });
        }
    };
    let (table, alias) = match select.from.as_slice() {
        [] => {
            return engine("SELECT without FROM");
        }
        [twj] if twj.joins.is_empty() => match &twj.relation {
            TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } => {
                let ident = name.0.last().and_then(|p| p.as_ident()).cloned();
                let Some(ident) = ident else {
                    return Err(PlanError::Unsupported {
                        feature: format!("table reference {name}"),
                        hint: "name a table".into(),
                    });
                };
                // Store tables live in schema `public`; any other schema
                // (`tablegate` system views, `pg_catalog`,
                // `information_schema`) is the analytics engine's.
                if let [.., schema, _] = name.0.as_slice()
                    && let Some(schema) = schema.as_ident()
                    && fold(schema) != "public"
                {
                    return engine(&format!("a table in schema {}", fold(schema)));
                }
                let folded = fold(&ident);
                let Ok(def) = catalog.table(&folded) else {
                    // PostgreSQL's catalogs are the analytics engine's
                    // (drivers and psql query them unqualified).
                    let lower = sql.to_ascii_lowercase();
                    if folded.starts_with("pg_")
                        || lower.contains("pg_catalog")
                        || lower.contains("information_schema")
                    {
                        return engine("a system catalog query");
                    }
                    return Err(PlanError::UnknownTable {
                        name: folded,
                        position: char_position(sql, ident.span.start),
                    });
                };
                (def, alias.as_ref().map(|a| fold(&a.name)))
            }
            TableFactor::Derived { .. } => {
                return engine("a subquery in FROM");
            }
            TableFactor::Table { args: Some(_), .. }
            | TableFactor::Function { .. }
            | TableFactor::TableFunction { .. }
            | TableFactor::UNNEST { .. } => {
                return engine("a table function");
            }
            other => {
                return Err(PlanError::Unsupported {
                    feature: format!("FROM {other}"),
                    hint: "select from a table".into(),
                });
            }
        },
        _ => {
            return engine("a join");
        }
    };
    let mut b = Binder::new(&table, alias, sql);

    // Projection: what is not a column goes to the engine.
    let columns = bind_select_list(&b, &select.projection, Parens::Unwrap, |item| {
        reasons.push(match item {
            Unbound::Expr(Expr::Function(f)) => {
                format!("function {}() in the select list", f.name)
            }
            Unbound::Expr(e) => format!("expression {e} in the select list"),
            Unbound::Item(i) => format!("select item {i}"),
        });
        Ok(())
    })?;

    let predicate = select
        .selection
        .as_ref()
        .map(|e| b.predicate(e))
        .transpose()?;
    if let Some(p) = &predicate
        && p.has_opaque()
    {
        reasons.push(format!(
            "a condition the store cannot evaluate ({})",
            opaque_part(p)
        ));
    }
    if select.distinct.is_some() {
        reasons.push("DISTINCT".into());
    }
    match &select.group_by {
        ast::GroupByExpr::Expressions(e, _) if e.is_empty() => {}
        _ => reasons.push("GROUP BY".into()),
    }
    if select.having.is_some() {
        reasons.push("HAVING".into());
    }
    if !select.named_window.is_empty() || select.qualify.is_some() {
        reasons.push("window functions".into());
    }
    if !q.locks.is_empty() {
        return Err(PlanError::Unsupported {
            feature: "SELECT ... FOR UPDATE/SHARE".into(),
            hint: "tablegate has optimistic concurrency: read the etag column and update WHERE etag = '…'".into(),
        });
    }

    // ORDER BY: only what clustered-key order already gives.
    let mut ordered = false;
    if let Some(order) = &q.order_by {
        match &order.kind {
            ast::OrderByKind::Expressions(exprs) => {
                let mut cols = Vec::new();
                let mut ok = true;
                // A bare name is an output column first (PostgreSQL's rule:
                // `count(*) AS n ... ORDER BY n`); the alias of an
                // expression needs a sort, so the engine runs the query.
                let expr_aliases: Vec<String> = select
                    .projection
                    .iter()
                    .filter_map(|item| match item {
                        SelectItem::ExprWithAlias { alias, .. } => Some(fold(alias)),
                        _ => None,
                    })
                    .collect();
                for o in exprs {
                    let col = match strip(&o.expr) {
                        Expr::Identifier(i) => {
                            let name = fold(i);
                            if let Some(out) = columns.iter().find(|c| c.name == name) {
                                Some(out.column.clone())
                            } else if expr_aliases.contains(&name) {
                                None
                            } else {
                                Some(b.column(std::slice::from_ref(i))?)
                            }
                        }
                        Expr::CompoundIdentifier(ids) => Some(b.column(ids)?),
                        _ => None,
                    };
                    match (col, o.options.asc) {
                        (Some(c), None | Some(true)) if o.options.nulls_first != Some(true) => {
                            cols.push(c.role)
                        }
                        _ => ok = false,
                    }
                }
                let pk_fixed = predicate.as_ref().is_some_and(fixes_partition_key);
                let key_order = matches!(
                    cols.as_slice(),
                    [Role::PartitionKey] | [Role::PartitionKey, Role::RowKey]
                ) || (pk_fixed
                    && matches!(
                        cols.as_slice(),
                        [Role::RowKey] | [Role::RowKey, Role::PartitionKey]
                    ));
                ordered = ok && key_order;
                if !ok || !key_order {
                    reasons.push(
                        "ORDER BY other than the key columns ascending (needs a sort)".into(),
                    );
                }
            }
            ast::OrderByKind::All(_) => reasons.push("ORDER BY ALL".into()),
        }
    }

    let (mut limit, mut offset) = (Count::All, Count::All);
    match &q.limit_clause {
        None => {}
        Some(ast::LimitClause::LimitOffset {
            limit: l,
            offset: o,
            ..
        }) => {
            if let Some(l) = l {
                limit = b.count(l)?;
            }
            if let Some(o) = o {
                offset = b.count(&o.value)?;
            }
        }
        Some(ast::LimitClause::OffsetCommaLimit {
            offset: o,
            limit: l,
        }) => {
            limit = b.count(l)?;
            offset = b.count(o)?;
        }
    }
    if let Some(f) = &q.fetch {
        match &f.quantity {
            Some(e) if !f.percent && !f.with_ties => limit = b.count(e)?,
            _ => reasons.push("FETCH ... PERCENT / WITH TIES".into()),
        }
    }

    let param_types = b
        .params
        .iter()
        .map(|t| t.unwrap_or(SqlType::Text))
        .collect();
    let route = if reasons.is_empty() {
        Route::Native
    } else {
        Route::Engine(reasons.join("; "))
    };
    Ok(Routed::Bound(SelectPlan {
        table,
        columns,
        predicate,
        limit,
        offset,
        param_types,
        route,
        ordered,
        schema: ResultSchema::default(),
    }))
}

/// How a select list reads a parenthesized column reference `(a)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parens {
    /// As the column (SELECT).
    Unwrap,
    /// As an expression, left to the caller (RETURNING).
    Keep,
}

/// A select-list item that is neither a wildcard nor a column reference:
/// [`bind_select_list`] leaves it to its caller.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Unbound<'q> {
    /// An expression (with parentheses removed under [`Parens::Unwrap`]).
    Expr(&'q Expr),
    /// A select item of another form.
    Item(&'q SelectItem),
}

impl std::fmt::Display for Unbound<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unbound::Expr(e) => e.fmt(f),
            Unbound::Item(i) => i.fmt(f),
        }
    }
}

/// Every column `*` selects, named as itself.
pub(crate) fn star_columns(table: &TableDef) -> Vec<OutputColumn> {
    table
        .star()
        .into_iter()
        .map(|c| OutputColumn {
            name: c.name.clone(),
            column: c,
        })
        .collect()
}

/// Binds a select list (a SELECT's, a write's RETURNING) to output
/// columns: `*` and `t.*` are every column ([`star_columns`]); a column
/// reference is that column, named by its alias or else its own name.
/// Anything else goes to `other`, in list order, which decides: a SELECT
/// sends it to the analytics engine, RETURNING refuses it (its error stops
/// the binding).
pub(crate) fn bind_select_list<'q>(
    b: &Binder<'_>,
    items: &'q [SelectItem],
    parens: Parens,
    mut other: impl FnMut(Unbound<'q>) -> Result<()>,
) -> Result<Vec<OutputColumn>> {
    let mut columns = Vec::new();
    for item in items {
        match item {
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                columns.extend(star_columns(b.table));
            }
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                let alias = match item {
                    SelectItem::ExprWithAlias { alias, .. } => Some(fold(alias)),
                    _ => None,
                };
                let e = match parens {
                    Parens::Unwrap => strip(e),
                    Parens::Keep => e,
                };
                let c = match e {
                    Expr::Identifier(i) => b.column(std::slice::from_ref(i))?,
                    Expr::CompoundIdentifier(ids) => b.column(ids)?,
                    e => {
                        other(Unbound::Expr(e))?;
                        continue;
                    }
                };
                columns.push(OutputColumn {
                    name: alias.unwrap_or_else(|| c.name.clone()),
                    column: c,
                });
            }
            item => other(Unbound::Item(item))?,
        }
    }
    Ok(columns)
}

fn strip(e: &Expr) -> &Expr {
    match e {
        Expr::Nested(inner) => strip(inner),
        other => other,
    }
}

/// True when a top-level conjunct fixes the PartitionKey to one value, so
/// RowKey order is the result order.
fn fixes_partition_key(p: &BExpr) -> bool {
    let is_pk_eq = |e: &BExpr| {
        matches!(e, BExpr::Cmp(c, CmpOp::Eq, v)
            if matches!(&**c, BExpr::Column(col) if col.role == Role::PartitionKey)
            && matches!(&**v, BExpr::Lit(_) | BExpr::Param(..)))
    };
    match p {
        BExpr::And(v) => v.iter().any(is_pk_eq),
        other => is_pk_eq(other),
    }
}

fn opaque_part(p: &BExpr) -> String {
    match p {
        BExpr::Opaque(s) => s.clone(),
        BExpr::And(v) | BExpr::Or(v) => v
            .iter()
            .find(|x| x.has_opaque())
            .map(opaque_part)
            .unwrap_or_default(),
        BExpr::Not(x) => opaque_part(x),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use crate::{Plan, Planner};

    /// Output names of a statement's result (SELECT) or RETURNING (write),
    /// or the refusal / engine reason.
    async fn names(p: &Planner, sql: &str) -> Result<Vec<String>, String> {
        let stmt = &Planner::parse(sql).expect("parses")[0];
        let cols = match p.plan(stmt, sql).map_err(|e| format!("{e:?}"))? {
            Plan::Analytics { reason, .. } => return Err(format!("Engine({reason:?})")),
            Plan::Select(s) => s.columns.clone(),
            Plan::Write(w) => w.returning.clone(),
            other => panic!("unexpected plan {other:?}"),
        };
        Ok(cols
            .into_iter()
            .map(|c| format!("{}={}", c.name, c.column.name))
            .collect())
    }

    /// SELECT and RETURNING bind `*`, qualified names and aliases alike;
    /// they differ only in what is not a column: a SELECT reads `(a)` as
    /// `a` and sends expressions to the engine, RETURNING refuses both.
    #[tokio::test]
    async fn select_and_returning_share_the_select_list() {
        let store = tablegate_store::PartitionedStore::new(
            tablegate_store::LocalStore::in_memory(),
            tablegate_store::partition::PartitionConfig::default(),
        )
        .expect("store");
        let p = Planner::open(store).await.expect("planner");
        let ddl = "CREATE TABLE tab (pk text, rk text, a int, PRIMARY KEY (pk, rk))";
        let plan = p
            .plan(&Planner::parse(ddl).expect("parses")[0], ddl)
            .expect("plans");
        p.run_ddl(&plan).await.expect("created");
        let list = "*, x.a AS b, rk";
        let select = names(&p, &format!("SELECT {list} FROM tab AS x")).await;
        let returning = names(&p, &format!("DELETE FROM tab AS x RETURNING {list}")).await;
        assert_eq!(select, returning);
        assert_eq!(
            select.expect("binds")[..4],
            ["pk=pk", "rk=rk", "a=a", "timestamp=timestamp"]
        );
        assert_eq!(
            names(&p, "SELECT (a) FROM tab").await,
            Ok(vec!["a=a".into()])
        );
        let refused = names(&p, "DELETE FROM tab RETURNING (a)").await;
        assert!(refused.is_err_and(|e| e.contains("RETURNING (a)")));
        let engine = names(&p, "SELECT a + 1 FROM tab").await;
        assert!(engine.is_err_and(|e| e.contains("expression a + 1 in the select list")));
    }
}
