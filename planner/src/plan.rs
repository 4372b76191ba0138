//! SELECT planning: one statement bound against the catalog, with its route
//! (native path or the analytics engine) decided at prepare time and its
//! key spans at bind time, once parameter values are known.

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

/// Plans a query expression (`SELECT ...`).
pub fn plan_query(catalog: &Catalog, q: &ast::Query, sql: &str) -> Result<SelectPlan> {
    let engine = |reason: &str| reason.to_owned();
    let mut reasons: Vec<String> = Vec::new();
    if q.with.is_some() {
        return Err(PlanError::NeedsAnalytics {
            reason: engine("WITH (common table expressions)"),
        });
    }
    let select = match &*q.body {
        SetExpr::Select(s) => s,
        SetExpr::SetOperation { op, .. } => {
            return Err(PlanError::NeedsAnalytics {
                reason: format!("{op} of several queries"),
            });
        }
        SetExpr::Values(_) => {
            return Err(PlanError::NeedsAnalytics {
                reason: "VALUES lists".into(),
            });
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
            return Err(PlanError::NeedsAnalytics {
                reason: "SELECT without FROM".into(),
            });
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
                    return Err(PlanError::NeedsAnalytics {
                        reason: format!("a table in schema {}", fold(schema)),
                    });
                }
                let folded = fold(&ident);
                let def = catalog
                    .table(&folded)
                    .map_err(|_| PlanError::UnknownTable {
                        name: folded.clone(),
                        position: char_position(sql, ident.span.start),
                    })?;
                (def, alias.as_ref().map(|a| fold(&a.name)))
            }
            TableFactor::Derived { .. } => {
                return Err(PlanError::NeedsAnalytics {
                    reason: "a subquery in FROM".into(),
                });
            }
            other => {
                return Err(PlanError::Unsupported {
                    feature: format!("FROM {other}"),
                    hint: "select from a table".into(),
                });
            }
        },
        _ => {
            return Err(PlanError::NeedsAnalytics {
                reason: "a join".into(),
            });
        }
    };
    let mut b = Binder::new(&table, alias, sql);

    // Projection.
    let mut columns = Vec::new();
    for item in &select.projection {
        match item {
            SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..) => {
                columns.extend(table.star().into_iter().map(|c| OutputColumn {
                    name: c.name.clone(),
                    column: c,
                }));
            }
            SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } => {
                let alias = match item {
                    SelectItem::ExprWithAlias { alias, .. } => Some(fold(alias)),
                    _ => None,
                };
                match strip(e) {
                    Expr::Identifier(i) => {
                        let c = b.column(std::slice::from_ref(i))?;
                        columns.push(OutputColumn {
                            name: alias.unwrap_or_else(|| c.name.clone()),
                            column: c,
                        });
                    }
                    Expr::CompoundIdentifier(ids) => {
                        let c = b.column(ids)?;
                        columns.push(OutputColumn {
                            name: alias.unwrap_or_else(|| c.name.clone()),
                            column: c,
                        });
                    }
                    other => {
                        let what = match other {
                            Expr::Function(f) => {
                                format!("function {}() in the select list", f.name)
                            }
                            _ => format!("expression {other} in the select list"),
                        };
                        reasons.push(what);
                    }
                }
            }
            other => reasons.push(format!("select item {other}")),
        }
    }

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
    Ok(SelectPlan {
        table,
        columns,
        predicate,
        limit,
        offset,
        param_types,
        route,
        schema: ResultSchema::default(),
    })
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
