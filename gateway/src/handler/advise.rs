//! `SELECT * FROM tablegate.advise('table' [, 'workload'])`: the key-design
//! advisor ([`tablegate_planner::advise`]) as a result set. The workload is
//! the second argument (statements ending in `;`, each optionally after a
//! `-- weight: N` line) or, without it, the statement log's statements that
//! name the table, weighted by their calls.

use std::sync::Arc;

use arrow_array::types::Float64Type;
use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, ListArray, RecordBatch, StringArray,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use pgwire::api::results::{QueryResponse, Response};
use sqlparser::ast;
use tablegate_catalog::SqlType;
use tablegate_planner::advise::{WorkloadStatement, parse_workload};
use tablegate_store::Value;

use super::{ConnHandler, Run};
use crate::encode;
use crate::sqlstate::PgError;

/// An argument of the call: a text literal or a parameter (0-based).
#[derive(Debug, Clone)]
pub enum Arg {
    /// `'text'` or `$$text$$`.
    Text(String),
    /// `$n`.
    Param(usize),
}

/// A parsed `SELECT … FROM tablegate.advise(…)`.
#[derive(Debug, Clone)]
pub struct Call {
    /// The table name, then the workload's text (absent: the statement
    /// log's).
    pub args: Vec<Arg>,
    /// `text` for each parameter.
    pub param_types: Vec<SqlType>,
    /// The result's columns, as indices into [`schema`].
    pub columns: Vec<usize>,
}

impl Call {
    /// The result's schema.
    pub fn schema(&self) -> SchemaRef {
        Arc::new(schema().project(&self.columns).expect("checked columns"))
    }
}

/// The call, when `q` is `SELECT * | columns FROM tablegate.advise(…)`; an
/// error for a call with the wrong arguments or columns.
pub(super) fn advise_call(q: &ast::Query) -> Option<Result<Call, PgError>> {
    let ast::SetExpr::Select(s) = &*q.body else {
        return None;
    };
    let [twj] = s.from.as_slice() else {
        return None;
    };
    let ast::TableFactor::Table {
        name,
        args: Some(args),
        ..
    } = &twj.relation
    else {
        return None;
    };
    let parts: Vec<String> = name
        .0
        .iter()
        .filter_map(|p| p.as_ident())
        .map(tablegate_planner::expr::fold)
        .collect();
    if parts != ["tablegate", "advise"] {
        return None;
    }
    let bad = || {
        Some(Err(PgError::syntax_error(
            "tablegate.advise takes a table name and, optionally, a workload: tablegate.advise('table' [, 'SELECT …; SELECT …'])",
        )))
    };
    let larger = || {
        Some(Err(PgError::feature_not_supported(
            "tablegate.advise in a larger query",
        )
        .hint(
            "SELECT * (or column names) FROM tablegate.advise('table') alone",
        )))
    };
    if !twj.joins.is_empty()
        || s.selection.is_some()
        || s.distinct.is_some()
        || s.having.is_some()
        || q.order_by.is_some()
        || q.limit_clause.is_some()
        || s.group_by != ast::GroupByExpr::Expressions(vec![], vec![])
    {
        return larger();
    }
    let all = schema();
    let mut columns = Vec::new();
    for item in &s.projection {
        match item {
            ast::SelectItem::Wildcard(_) => columns.extend(0..all.fields().len()),
            ast::SelectItem::UnnamedExpr(ast::Expr::Identifier(i)) => {
                let name = tablegate_planner::expr::fold(i);
                match all.index_of(&name) {
                    Ok(n) => columns.push(n),
                    Err(_) => {
                        let names: Vec<&str> =
                            all.fields().iter().map(|f| f.name().as_str()).collect();
                        return Some(Err(PgError::undefined_column(format!(
                            "column \"{name}\" does not exist"
                        ))
                        .hint(format!("tablegate.advise returns {}", names.join(", ")))));
                    }
                }
            }
            _ => return larger(),
        }
    }
    let arg = |a: &ast::FunctionArg| match a {
        ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(ast::Expr::Value(v))) => {
            match &v.value {
                ast::Value::SingleQuotedString(s)
                | ast::Value::DollarQuotedString(ast::DollarQuotedString { value: s, .. }) => {
                    Some(Arg::Text(s.clone()))
                }
                ast::Value::Placeholder(p) => p
                    .strip_prefix('$')
                    .and_then(|n| n.parse::<usize>().ok())
                    .filter(|n| (1..=2).contains(n))
                    .map(|n| Arg::Param(n - 1)),
                _ => None,
            }
        }
        _ => None,
    };
    if !(1..=2).contains(&args.args.len()) {
        return bad();
    }
    let Some(parsed) = args.args.iter().map(arg).collect::<Option<Vec<Arg>>>() else {
        return bad();
    };
    let params = parsed
        .iter()
        .filter_map(|a| match a {
            Arg::Param(n) => Some(n + 1),
            Arg::Text(_) => None,
        })
        .max()
        .unwrap_or(0);
    Some(Ok(Call {
        args: parsed,
        param_types: vec![SqlType::Text; params],
        columns,
    }))
}

/// The result's columns.
pub(super) fn schema() -> SchemaRef {
    let f = |n: &str, t: DataType| Field::new(n, t, true);
    Arc::new(Schema::new(vec![
        f("rank", DataType::Int64),
        f("partition_key", DataType::Utf8),
        f("row_key", DataType::Utf8),
        f("current", DataType::Boolean),
        f("verdict", DataType::Utf8),
        f("entities_per_call", DataType::Float64),
        f(
            "entities_per_statement",
            DataType::List(Arc::new(Field::new("item", DataType::Float64, true))),
        ),
        f("min_ms_per_call", DataType::Float64),
        f("partitions", DataType::Int64),
        f("largest_partition", DataType::Int64),
        f("largest_partition_load", DataType::Float64),
        f("reason", DataType::Utf8),
        f("apply_sql", DataType::Utf8),
    ]))
}

impl ConnHandler {
    /// Runs the advisor and answers its rows.
    pub(super) async fn advise(&self, call: &Call, run: &Run<'_>) -> Result<Response, PgError> {
        let args = &call.args;
        let value = |a: &Arg| -> Result<String, PgError> {
            match a {
                Arg::Text(s) => Ok(s.clone()),
                Arg::Param(n) => match run.params.get(*n) {
                    Some(Some(Value::String(s))) => Ok(s.clone()),
                    _ => Err(PgError::invalid_parameter_value(
                        "tablegate.advise needs a table name and a workload as text, not NULL",
                    )),
                },
            }
        };
        let table = value(&args[0])?;
        let workload = args.get(1).map(value).transpose()?;
        let table = table.as_str();
        let workload = match workload.as_deref() {
            Some(w) => parse_workload(w),
            None => {
                let name = table.to_ascii_lowercase();
                let now = crate::statements::now_micros();
                crate::statements::statements()
                    .snapshot()
                    .into_iter()
                    .filter(|e| e.query.to_ascii_lowercase().contains(&name))
                    .map(|e| {
                        // Calls per second since it was first seen.
                        let secs = ((now - e.stats.first_seen) as f64 / 1e6).max(1.0);
                        WorkloadStatement {
                            sql: e.query.to_string(),
                            weight: e.stats.calls as f64,
                            rate: Some(e.stats.calls as f64 / secs),
                        }
                    })
                    .collect()
            }
        };
        let advised = self.planner.advise(table, workload);
        let report = tokio::select! {
            r = advised => r.map_err(|e| PgError::from(&e))?,
            e = run.stop.wait() => return Err(e),
        };
        let rows = report.rows();
        let columns: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from_iter(
                rows.iter().map(|r| r.rank.map(|n| n as i64)),
            )),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.partition_key.as_str()),
            )),
            Arc::new(StringArray::from_iter(
                rows.iter().map(|r| r.row_key.as_deref()),
            )),
            Arc::new(BooleanArray::from_iter(
                rows.iter().map(|r| Some(r.current)),
            )),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.verdict),
            )),
            Arc::new(Float64Array::from_iter_values(
                rows.iter().map(|r| r.entities_per_call),
            )),
            Arc::new(ListArray::from_iter_primitive::<Float64Type, _, _>(
                rows.iter().map(|r| {
                    Some(
                        r.entities_per_statement
                            .iter()
                            .map(|n| Some(*n))
                            .collect::<Vec<_>>(),
                    )
                }),
            )),
            Arc::new(Float64Array::from_iter_values(
                rows.iter().map(|r| r.min_ms),
            )),
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|r| r.partitions as i64),
            )),
            Arc::new(Int64Array::from_iter_values(
                rows.iter().map(|r| r.largest_partition as i64),
            )),
            Arc::new(Float64Array::from_iter(
                rows.iter().map(|r| r.largest_partition_load),
            )),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.reason.as_str()),
            )),
            Arc::new(StringArray::from_iter(
                rows.iter().map(|r| r.apply_sql.as_deref()),
            )),
        ];
        let batch = RecordBatch::try_new(schema(), columns)
            .and_then(|b| b.project(&call.columns))
            .map_err(PgError::internal)?;
        let fields = Arc::new(encode::arrow_fields(&call.schema(), run.format));
        Ok(Response::Query(QueryResponse::new(
            fields.clone(),
            encode::batch_stream(futures::stream::iter([Ok(batch)]), fields, run.stop.clone()),
        )))
    }
}
