//! Write planning: INSERT, UPDATE and DELETE bound against the catalog.
//!
//! A [`WritePlan`] says which entities a statement touches and how each
//! one's new state is computed; [`crate::apply`] runs it (autocommit: as
//! entity-group transactions per PartitionKey; inside BEGIN: staged in the
//! [`crate::txn::Transaction`]).
//!
//! - `INSERT ... VALUES` / `INSERT ... SELECT`: rows become Insert
//!   operations (an existing key is 23505).
//! - `ON CONFLICT (pk, rk) DO UPDATE SET c = EXCLUDED.c, ...` is a blind
//!   InsertOrMerge when it sets exactly the columns the INSERT supplies,
//!   and InsertOrReplace when it sets every column; any other SET (an
//!   expression over the current row, a subset of the columns) is read,
//!   then Insert or Merge with If-Match. `DO NOTHING` reads, then inserts
//!   the absent keys.
//! - `UPDATE` / `DELETE`: the WHERE is classified like a query's and the
//!   matched entities are written with If-Match of the ETag they were read
//!   with; `WHERE etag = '...'` is therefore an explicit If-Match.
//! - `COPY t FROM STDIN` is an INSERT whose rows the caller supplies;
//!   `COPY t TO STDOUT` a query of the table in key order.
//!
//! The values assigned (VALUES, SET, DEFAULT) are the value-expression
//! language of [`crate::value_expr`]; RETURNING is a select list, bound
//! like a SELECT's (`plan::bind_select_list`). Key columns cannot
//! be updated (a key is the entity's identity in the store).

use std::sync::Arc;

use sqlparser::ast::{self, Expr, SelectItem};
use tablegate_catalog::{Catalog, ColumnRef, Role, SqlType, TableDef};

use crate::error::{PlanError, Result};
use crate::expr::{BExpr, Binder, Count, char_position, fold};
use crate::plan::{
    OutputColumn, Parens, Route, Routed, SelectPlan, bind_select_list, plan_query, star_columns,
};
use crate::value_expr::{VExpr, ValueBinder};

/// A planned INSERT, UPDATE or DELETE.
#[derive(Debug, Clone)]
pub struct WritePlan {
    /// The table written.
    pub table: Arc<TableDef>,
    /// What the statement does.
    pub kind: WriteKind,
    /// RETURNING columns (empty: no RETURNING).
    pub returning: Vec<OutputColumn>,
    /// Parameter types by index.
    pub param_types: Vec<SqlType>,
}

/// The statement forms.
#[derive(Debug, Clone)]
pub enum WriteKind {
    /// INSERT.
    Insert {
        /// Target columns, in the order values are given.
        columns: Vec<ColumnRef>,
        /// Every user column of the table, in declaration order, with the
        /// index in `columns` of the value that fills it (`None`: its
        /// DEFAULT): resolved once when planned, shared by every row.
        targets: Vec<(Arc<ColumnRef>, Option<usize>)>,
        /// The rows.
        source: InsertSource,
        /// ON CONFLICT.
        conflict: OnConflict,
    },
    /// UPDATE.
    Update {
        /// SET column = value.
        set: Vec<(ColumnRef, VExpr)>,
        /// The matched entities, as a query (all columns).
        scan: Arc<SelectPlan>,
    },
    /// DELETE.
    Delete {
        /// The matched entities, as a query (all columns).
        scan: Arc<SelectPlan>,
    },
}

/// Where INSERT's rows come from.
#[derive(Debug, Clone)]
pub enum InsertSource {
    /// `VALUES (...), (...)`.
    Values(Vec<Vec<VExpr>>),
    /// `INSERT ... SELECT` (native path).
    Query(Arc<SelectPlan>),
    /// `INSERT ... SELECT` whose SELECT the analytics engine runs (no FROM,
    /// `generate_series`, joins, aggregates): the gateway runs `query` and
    /// hands its rows to [`crate::apply::insert_rows`].
    Engine {
        /// The SELECT, as SQL.
        query: String,
        /// Why the native path does not run it.
        reason: String,
    },
}

/// ON CONFLICT.
#[derive(Debug, Clone)]
pub enum OnConflict {
    /// No clause: an existing key is 23505.
    Error,
    /// `DO NOTHING`.
    DoNothing,
    /// `DO UPDATE SET ...`.
    Update {
        /// Assignments (may use `EXCLUDED.col` and the current row).
        set: Vec<(ColumnRef, VExpr)>,
        /// `Some` when the update is a blind upsert: `true` InsertOrMerge,
        /// `false` InsertOrReplace.
        blind_merge: Option<bool>,
    },
}

impl WritePlan {
    /// The command tag's verb.
    pub fn verb(&self) -> &'static str {
        match self.kind {
            WriteKind::Insert { .. } => "INSERT",
            WriteKind::Update { .. } => "UPDATE",
            WriteKind::Delete { .. } => "DELETE",
        }
    }

    /// An INSERT's resolved columns ([`WriteKind::Insert::targets`]);
    /// `None` for UPDATE and DELETE.
    pub fn insert_targets(&self) -> Option<&[(Arc<ColumnRef>, Option<usize>)]> {
        match &self.kind {
            WriteKind::Insert { targets, .. } => Some(targets),
            _ => None,
        }
    }
}

fn table_of(catalog: &Catalog, name: &ast::ObjectName, sql: &str) -> Result<Arc<TableDef>> {
    let ident = name
        .0
        .last()
        .and_then(|p| p.as_ident())
        .cloned()
        .ok_or_else(|| PlanError::Unsupported {
            feature: format!("table reference {name}"),
            hint: "name a table".into(),
        })?;
    let folded = fold(&ident);
    catalog.table(&folded).map_err(|_| PlanError::UnknownTable {
        name: folded,
        position: char_position(sql, ident.span.start),
    })
}

/// Resolves a column a write assigns: a user column, not a system one.
fn target(b: &Binder<'_>, idents: &[ast::Ident]) -> Result<ColumnRef> {
    let col = b.column(idents)?;
    if matches!(col.role, Role::Timestamp | Role::ETag) {
        return Err(PlanError::ReadOnlyColumn { column: col.name });
    }
    Ok(col)
}

fn assignment_target(b: &Binder<'_>, a: &ast::Assignment) -> Result<ColumnRef> {
    match &a.target {
        ast::AssignmentTarget::ColumnName(n) => {
            let ids: Vec<ast::Ident> = n.0.iter().filter_map(|p| p.as_ident().cloned()).collect();
            // `SET t.col = ...` is not PostgreSQL; the last part names the column.
            let col = target(b, &ids[ids.len().saturating_sub(1)..])?;
            if matches!(col.role, Role::PartitionKey | Role::RowKey) {
                return Err(PlanError::Unsupported {
                    feature: format!("changing the key column \"{}\"", col.name),
                    hint: "a key is the entity's identity in the store: INSERT the row under the new key and DELETE the old one (in one transaction when both share a PartitionKey)".into(),
                });
            }
            Ok(col)
        }
        ast::AssignmentTarget::Tuple(_) => Err(PlanError::Unsupported {
            feature: "SET (a, b) = (...)".into(),
            hint: "assign columns one by one".into(),
        }),
    }
}

/// RETURNING: a select list of columns only. Unlike a SELECT's, nothing
/// can go to the analytics engine, so anything else is refused; `(a)`
/// counts as an expression here (a SELECT looks through parentheses).
fn returning(b: &Binder<'_>, items: Option<&Vec<SelectItem>>) -> Result<Vec<OutputColumn>> {
    let items = items.map_or(&[][..], Vec::as_slice);
    bind_select_list(b, items, Parens::Keep, |item| {
        Err(PlanError::Unsupported {
            feature: format!("RETURNING {item}"),
            hint: "RETURNING lists columns (or *)".into(),
        })
    })
}

/// A query over the matched rows of an UPDATE / DELETE: every column, the
/// WHERE as a predicate, on the native path.
fn scan_plan(
    b: &mut Binder<'_>,
    table: &Arc<TableDef>,
    selection: Option<&Expr>,
    verb: &str,
) -> Result<SelectPlan> {
    let predicate = selection.map(|e| b.predicate(e)).transpose()?;
    if let Some(p) = &predicate
        && p.has_opaque()
    {
        return Err(PlanError::NeedsAnalytics {
            reason: format!("{verb} with a condition the store cannot evaluate ({p})"),
        });
    }
    Ok(SelectPlan {
        table: table.clone(),
        columns: star_columns(table),
        predicate,
        limit: Count::All,
        offset: Count::All,
        param_types: Vec::new(),
        route: Route::Native,
        ordered: false,
        schema: Default::default(),
    })
}

fn finish_params(b: &Binder<'_>) -> Vec<SqlType> {
    b.params
        .iter()
        .map(|t| t.unwrap_or(SqlType::Text))
        .collect()
}

/// Plans `INSERT`.
pub fn plan_insert(catalog: &Catalog, ins: &ast::Insert, sql: &str) -> Result<WritePlan> {
    let name = match &ins.table {
        ast::TableObject::TableName(n) => n,
        other => {
            return Err(PlanError::Unsupported {
                feature: format!("INSERT INTO {other}"),
                hint: "insert into a table".into(),
            });
        }
    };
    let table = table_of(catalog, name, sql)?;
    let alias = ins.table_alias.as_ref().map(|a| fold(&a.alias));
    let mut b = Binder::new(&table, alias, sql);
    let user: Vec<ColumnRef> = table
        .visible()
        .map(|c| table.resolve(&c.name))
        .collect::<std::result::Result<_, _>>()?;
    let columns: Vec<ColumnRef> = if ins.columns.is_empty() {
        user.clone()
    } else {
        let mut cols = Vec::new();
        for n in &ins.columns {
            let ids: Vec<ast::Ident> = n.0.iter().filter_map(|p| p.as_ident().cloned()).collect();
            let c = target(&b, &ids)?;
            if cols.iter().any(|x: &ColumnRef| x.name == c.name) {
                return Err(PlanError::Syntax {
                    message: format!("column \"{}\" specified more than once", c.name),
                    position: None,
                });
            }
            cols.push(c);
        }
        cols
    };
    let source = match ins.source.as_deref() {
        None => {
            return Err(PlanError::Unsupported {
                feature: "INSERT without VALUES or SELECT".into(),
                hint: "INSERT INTO t (...) VALUES (...)".into(),
            });
        }
        Some(q) => match &*q.body {
            ast::SetExpr::Values(values) if q.order_by.is_none() && q.limit_clause.is_none() => 'values: {
                let mut rows = Vec::with_capacity(values.rows.len());
                for row in &values.rows {
                    let row = &row.content;
                    if row.len() > columns.len() {
                        return Err(PlanError::Syntax {
                            message: "INSERT has more expressions than target columns".into(),
                            position: None,
                        });
                    }
                    if row.len() < columns.len() && !ins.columns.is_empty() {
                        return Err(PlanError::Syntax {
                            message: "INSERT has more target columns than expressions".into(),
                            position: None,
                        });
                    }
                    let mut v = ValueBinder {
                        b: &mut b,
                        columns: false,
                        excluded: false,
                    };
                    let mut out = Vec::with_capacity(row.len());
                    for (e, c) in row.iter().zip(&columns) {
                        match v.bind(e, c.ty, true) {
                            Ok(x) => out.push(x),
                            // A function the write path does not evaluate
                            // (`repeat('x', 5)`, `md5(…)`): the analytics
                            // engine computes the rows, as for INSERT …
                            // SELECT. DEFAULT has no meaning there.
                            Err(PlanError::Unsupported { feature, hint })
                                if feature.starts_with("expression ") =>
                            {
                                if values.rows.iter().any(|r| r.content.iter().any(is_default)) {
                                    return Err(PlanError::Unsupported { feature, hint });
                                }
                                let reason = format!("{feature}: the analytics engine computes it");
                                break 'values engine_source(q, reason)?;
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    rows.push(out);
                }
                InsertSource::Values(rows)
            }
            _ => match plan_query(catalog, q, sql)? {
                Routed::Engine(reason) => engine_source(q, reason)?,
                Routed::Bound(select) if matches!(select.route, Route::Engine(_)) => {
                    let Route::Engine(reason) = select.route else {
                        unreachable!("matched above")
                    };
                    engine_source(q, reason)?
                }
                Routed::Bound(select) => {
                    if select.columns.len() > columns.len() {
                        return Err(PlanError::Syntax {
                            message: "INSERT has more expressions than target columns".into(),
                            position: None,
                        });
                    }
                    // The SELECT's parameters come first in its own numbering;
                    // INSERT ... SELECT with parameters in both parts shares it.
                    for (i, t) in select.param_types.iter().enumerate() {
                        b.note_param(i, *t);
                    }
                    InsertSource::Query(Arc::new(select))
                }
            },
        },
    };
    let conflict = match &ins.on {
        None => OnConflict::Error,
        Some(ast::OnInsert::OnConflict(oc)) => {
            if let Some(t) = &oc.conflict_target {
                match t {
                    ast::ConflictTarget::Columns(cols) => {
                        let mut named: Vec<String> = cols.iter().map(fold).collect();
                        named.sort();
                        let mut keys = vec![table.partition_key.clone()];
                        keys.extend(table.row_key.clone());
                        keys.sort();
                        if named != keys {
                            return Err(PlanError::Unsupported {
                                feature: format!("ON CONFLICT ({})", named.join(", ")),
                                hint: format!(
                                    "ON CONFLICT names the primary key: ON CONFLICT ({}); a UNIQUE index (unique within each PartitionKey) is not a conflict target, but ON CONFLICT DO NOTHING without a target skips rows it refuses",
                                    keys.join(", ")
                                ),
                            });
                        }
                    }
                    ast::ConflictTarget::OnConstraint(_) => {
                        return Err(PlanError::Unsupported {
                            feature: "ON CONFLICT ON CONSTRAINT".into(),
                            hint: "name the primary key columns: ON CONFLICT (pk, rk)".into(),
                        });
                    }
                }
            }
            match &oc.action {
                ast::OnConflictAction::DoNothing => OnConflict::DoNothing,
                ast::OnConflictAction::DoUpdate(du) => {
                    if oc.conflict_target.is_none() {
                        return Err(PlanError::Syntax {
                            message: "ON CONFLICT DO UPDATE requires inference specification or constraint name".into(),
                            position: None,
                        });
                    }
                    if du.selection.is_some() {
                        return Err(PlanError::Unsupported {
                            feature: "ON CONFLICT DO UPDATE ... WHERE".into(),
                            hint: "use UPDATE ... WHERE after the INSERT, in one transaction"
                                .into(),
                        });
                    }
                    let mut set = Vec::new();
                    for a in &du.assignments {
                        let col = assignment_target(&b, a)?;
                        let mut v = ValueBinder {
                            b: &mut b,
                            columns: true,
                            excluded: true,
                        };
                        let e = v.bind(&a.value, col.ty, true)?;
                        set.push((col, e));
                    }
                    let copies = set
                        .iter()
                        .all(|(c, e)| matches!(e, VExpr::Excluded(x) if x.name == c.name));
                    let mut set_cols: Vec<&str> =
                        set.iter().map(|(c, _)| c.name.as_str()).collect();
                    set_cols.sort_unstable();
                    // Columns the proposed row carries a value for: the
                    // named ones and those with a DEFAULT.
                    let mut supplied: Vec<&str> = user
                        .iter()
                        .filter(|c| c.role == Role::Property)
                        .filter(|c| {
                            columns.iter().any(|x| x.name == c.name)
                                || table
                                    .columns
                                    .iter()
                                    .any(|d| d.name == c.name && d.default.is_some())
                        })
                        .map(|c| c.name.as_str())
                        .collect();
                    supplied.sort_unstable();
                    let every: Vec<&str> = {
                        let mut v: Vec<&str> = user
                            .iter()
                            .filter(|c| c.role == Role::Property)
                            .map(|c| c.name.as_str())
                            .collect();
                        v.sort_unstable();
                        v
                    };
                    let blind_merge = if !copies {
                        None
                    } else if set_cols == every {
                        Some(false)
                    } else if set_cols == supplied {
                        Some(true)
                    } else {
                        None
                    };
                    OnConflict::Update { set, blind_merge }
                }
            }
        }
        Some(other) => {
            return Err(PlanError::Unsupported {
                feature: format!("{other}"),
                hint: "use ON CONFLICT (pk, rk) DO UPDATE SET ...".into(),
            });
        }
    };
    let returning = returning(&b, ins.returning.as_ref())?;
    let param_types = finish_params(&b);
    Ok(WritePlan {
        table: table.clone(),
        kind: WriteKind::Insert {
            targets: insert_targets(&table, &columns)?,
            columns,
            source,
            conflict,
        },
        returning,
        param_types,
    })
}

fn single_table(
    from: &[ast::TableWithJoins],
    verb: &str,
) -> Result<(ast::ObjectName, Option<String>)> {
    match from {
        [twj] if twj.joins.is_empty() => match &twj.relation {
            ast::TableFactor::Table {
                name,
                alias,
                args: None,
                ..
            } => Ok((name.clone(), alias.as_ref().map(|a| fold(&a.name)))),
            other => Err(PlanError::Unsupported {
                feature: format!("{verb} {other}"),
                hint: "name one table".into(),
            }),
        },
        _ => Err(PlanError::Unsupported {
            feature: format!("{verb} of several tables or a join"),
            hint: "write one table per statement".into(),
        }),
    }
}

/// Plans `UPDATE`.
pub fn plan_update(catalog: &Catalog, up: &ast::Update, sql: &str) -> Result<WritePlan> {
    if up.from.is_some() {
        return Err(PlanError::Unsupported {
            feature: "UPDATE ... FROM".into(),
            hint: "update one table; read the other first".into(),
        });
    }
    if up.limit.is_some() || !up.order_by.is_empty() {
        return Err(PlanError::Unsupported {
            feature: "UPDATE ... ORDER BY / LIMIT".into(),
            hint: "narrow the WHERE instead".into(),
        });
    }
    let (name, alias) = single_table(std::slice::from_ref(&up.table), "UPDATE")?;
    let table = table_of(catalog, &name, sql)?;
    let mut b = Binder::new(&table, alias, sql);
    let mut set = Vec::new();
    for a in &up.assignments {
        let col = assignment_target(&b, a)?;
        if set
            .iter()
            .any(|(c, _): &(ColumnRef, VExpr)| c.name == col.name)
        {
            return Err(PlanError::Syntax {
                message: format!("multiple assignments to same column \"{}\"", col.name),
                position: None,
            });
        }
        let mut v = ValueBinder {
            b: &mut b,
            columns: true,
            excluded: false,
        };
        let e = v.bind(&a.value, col.ty, true)?;
        set.push((col, e));
    }
    let scan = scan_plan(&mut b, &table, up.selection.as_ref(), "UPDATE")?;
    let returning = returning(&b, up.returning.as_ref())?;
    let param_types = finish_params(&b);
    Ok(WritePlan {
        table: table.clone(),
        kind: WriteKind::Update {
            set,
            scan: Arc::new(SelectPlan {
                param_types: param_types.clone(),
                ..scan
            }),
        },
        returning,
        param_types,
    })
}

/// Plans `DELETE`.
pub fn plan_delete(catalog: &Catalog, del: &ast::Delete, sql: &str) -> Result<WritePlan> {
    if del.using.is_some() || !del.tables.is_empty() {
        return Err(PlanError::Unsupported {
            feature: "DELETE ... USING".into(),
            hint: "delete from one table".into(),
        });
    }
    if del.limit.is_some() || !del.order_by.is_empty() {
        return Err(PlanError::Unsupported {
            feature: "DELETE ... ORDER BY / LIMIT".into(),
            hint: "narrow the WHERE instead".into(),
        });
    }
    let from = match &del.from {
        ast::FromTable::WithFromKeyword(v) | ast::FromTable::WithoutKeyword(v) => v,
    };
    let (name, alias) = single_table(from, "DELETE")?;
    let table = table_of(catalog, &name, sql)?;
    let mut b = Binder::new(&table, alias, sql);
    let scan = scan_plan(&mut b, &table, del.selection.as_ref(), "DELETE")?;
    let returning = returning(&b, del.returning.as_ref())?;
    let param_types = finish_params(&b);
    Ok(WritePlan {
        table: table.clone(),
        kind: WriteKind::Delete {
            scan: Arc::new(SelectPlan {
                param_types: param_types.clone(),
                ..scan
            }),
        },
        returning,
        param_types,
    })
}

/// The bound predicate of a write's scan, for callers that show it.
pub fn predicate(plan: &WritePlan) -> Option<&BExpr> {
    match &plan.kind {
        WriteKind::Update { scan, .. } | WriteKind::Delete { scan } => scan.predicate.as_ref(),
        WriteKind::Insert { .. } => None,
    }
}

/// The columns a COPY names (all user columns when none), resolved.
fn copy_columns(
    table: &TableDef,
    columns: &[ast::Ident],
    for_write: bool,
) -> Result<Vec<ColumnRef>> {
    if columns.is_empty() {
        return table
            .visible()
            .map(|c| Ok(table.resolve(&c.name)?))
            .collect();
    }
    let b = Binder::new(table, None, "");
    columns
        .iter()
        .map(|i| {
            if for_write {
                target(&b, std::slice::from_ref(i))
            } else {
                b.column(std::slice::from_ref(i))
            }
        })
        .collect()
}

/// `DEFAULT` in a VALUES row.
fn is_default(e: &Expr) -> bool {
    matches!(e, Expr::Identifier(i) if i.quote_style.is_none() && i.value.eq_ignore_ascii_case("default"))
}

/// The source of an `INSERT ... SELECT` the analytics engine runs.
fn engine_source(q: &ast::Query, reason: String) -> Result<InsertSource> {
    // The engine would have to type the parameters for the write's plan.
    let params = ast::visit_expressions(q, |e| match e {
        Expr::Value(v) if matches!(v.value, ast::Value::Placeholder(_)) => {
            std::ops::ControlFlow::Break(())
        }
        _ => std::ops::ControlFlow::Continue(()),
    });
    if params.is_break() {
        return Err(PlanError::NeedsAnalytics {
            reason: format!("INSERT ... SELECT with parameters and {reason}"),
        });
    }
    Ok(InsertSource::Engine {
        query: q.to_string(),
        reason,
    })
}

/// An INSERT's [`WriteKind::Insert::targets`].
fn insert_targets(
    table: &TableDef,
    columns: &[ColumnRef],
) -> Result<Vec<(Arc<ColumnRef>, Option<usize>)>> {
    table
        .columns
        .iter()
        .map(|c| {
            let col = table.resolve(&c.name)?;
            let given = columns.iter().position(|x| x.name == col.name);
            Ok((Arc::new(col), given))
        })
        .collect()
}

/// `COPY t [(cols)] FROM STDIN`: an INSERT of the named columns whose rows
/// the caller supplies ([`crate::apply::insert_rows`]).
pub fn plan_copy_in(
    catalog: &Catalog,
    name: &ast::ObjectName,
    columns: &[ast::Ident],
) -> Result<(WritePlan, Vec<ColumnRef>)> {
    let table = table_of(catalog, name, "")?;
    let cols = copy_columns(&table, columns, true)?;
    Ok((
        WritePlan {
            table: table.clone(),
            kind: WriteKind::Insert {
                targets: insert_targets(&table, &cols)?,
                columns: cols.clone(),
                source: InsertSource::Values(Vec::new()),
                conflict: OnConflict::Error,
            },
            returning: Vec::new(),
            param_types: Vec::new(),
        },
        cols,
    ))
}

/// `COPY t [(cols)] TO STDOUT`: a query of the named (or all user)
/// columns, in key order.
pub fn plan_copy_out(
    catalog: &Catalog,
    name: &ast::ObjectName,
    columns: &[ast::Ident],
) -> Result<SelectPlan> {
    let table = table_of(catalog, name, "")?;
    let cols = copy_columns(&table, columns, false)?;
    Ok(SelectPlan {
        table: table.clone(),
        columns: cols
            .into_iter()
            .map(|c| OutputColumn {
                name: c.name.clone(),
                column: c,
            })
            .collect(),
        predicate: None,
        limit: Count::All,
        offset: Count::All,
        param_types: Vec::new(),
        route: Route::Native,
        ordered: false,
        schema: Default::default(),
    })
}
