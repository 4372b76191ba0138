//! Writes and DDL: INSERT, UPDATE, DELETE (with RETURNING), CREATE / DROP /
//! ALTER TABLE.
//!
//! The planner's `write` decides each entity's change and groups changes
//! into entity-group transactions (`tablegate_planner::apply`); inside
//! `BEGIN` they are staged in the session's transaction instead.
//!
//! `INSERT ... SELECT` whose SELECT the analytics engine runs, and
//! `CREATE TABLE ... AS`, run the query here and write its rows the way
//! COPY does: each value goes through its PostgreSQL text form into the
//! target column's type.

use std::sync::Arc;

use pgwire::api::results::{QueryResponse, Response, Tag};
use tablegate_catalog::SqlType;
use tablegate_planner::write::{InsertSource, WriteKind};
use tablegate_planner::{Plan, WritePlan};

use super::{ConnHandler, Run};
use crate::encode::{self, fields};
use crate::sqlstate::PgError;

impl ConnHandler {
    /// CREATE / DROP / ALTER TABLE.
    pub(super) async fn ddl(
        &self,
        plan: &Plan,
        run: &mut Run<'_>,
        report: &(dyn Fn(String) + Send + Sync),
    ) -> Result<Response, PgError> {
        if let Plan::CreateTableAs {
            name,
            columns,
            query,
            if_not_exists,
        } = plan
        {
            return self
                .create_table_as(name, columns, query, *if_not_exists, run)
                .await;
        }
        let outcome = self
            .planner
            .run_ddl_reporting(plan, report)
            .await
            .map_err(|e| PgError::from(&e))?;
        run.notices.extend(outcome.notice.map(PgError::notice));
        Ok(Response::Execution(Tag::new(outcome.tag)))
    }

    /// INSERT, UPDATE or DELETE, and its RETURNING rows.
    pub(super) async fn write(
        &self,
        w: &WritePlan,
        run: &mut Run<'_>,
    ) -> Result<Response, PgError> {
        if let WriteKind::Insert {
            source: InsertSource::Engine { query, reason },
            ..
        } = &w.kind
        {
            if !w.returning.is_empty() {
                return Err(PgError::feature_not_supported(
                    "RETURNING with INSERT ... SELECT that the analytics engine runs",
                )
                .hint("run the INSERT, then SELECT the rows"));
            }
            let (schema, rows) = self.engine_rows(query, reason, run).await?;
            let n = self.insert_text_rows(w, &schema, rows, run).await?;
            return Ok(Response::Execution(Tag::new("INSERT 0").with_rows(n)));
        }
        let _writing = self.cancel.writing();
        let mut txn = self.session.lock().txn.take();
        // A cancelled write stops between entity-group transactions: those
        // applied stay applied.
        let result = tokio::select! {
            r = self.planner.write(w, run.params, txn.as_mut(), &run.opts) => {
                r.map_err(|e| PgError::from(&e))
            }
            e = run.stop.wait() => Err(e),
        };
        self.session.lock().txn = txn;
        let out = result?;
        run.notices.extend(out.notice.map(PgError::notice));
        let tag = match w.verb() {
            "INSERT" => "INSERT 0",
            verb => verb,
        };
        if w.returning.is_empty() {
            return Ok(Response::Execution(
                Tag::new(tag).with_rows(out.rows as usize),
            ));
        }
        let f = Arc::new(fields(&w.returning, run.format));
        let cols: Vec<_> = w.returning.iter().map(|c| c.column.clone()).collect();
        let schema = tablegate_catalog::TableDef::arrow_schema(&cols);
        let batch =
            tablegate_planner::exec::to_batch(&w.table, &w.returning, &out.returning, &schema)
                .map_err(|e| PgError::from(&e))?;
        let mut rows = Vec::new();
        encode::encode_batch(&batch, &f, &mut rows).map_err(PgError::internal)?;
        let mut q = QueryResponse::new(f, futures::stream::iter(rows.into_iter().map(Ok)));
        q.set_command_tag(tag);
        Ok(Response::Query(q))
    }

    /// Runs `sql` in the analytics engine: its columns, and every row as
    /// the text a SELECT would send (`None`: NULL).
    async fn engine_rows(
        &self,
        sql: &str,
        reason: &str,
        run: &Run<'_>,
    ) -> Result<(arrow_schema::SchemaRef, Vec<Vec<Option<String>>>), PgError> {
        use futures::StreamExt;
        let engine = self.session.engine_for_run(&self.planner).await?;
        let df = |e: crate::analytics::EngineError| PgError::from(&e);
        let plan = engine.plan(sql, reason).await.map_err(df)?;
        let fields = Arc::new(encode::arrow_fields(&plan.schema, None));
        let mut stream = tokio::select! {
            r = engine.execute(&plan, &[], run.opts.clone()) => r.map_err(df)?,
            e = run.stop.wait() => return Err(e),
        };
        let mut rows = Vec::new();
        loop {
            let batch = tokio::select! {
                b = stream.next() => b,
                e = run.stop.wait() => return Err(e),
            };
            let Some(batch) = batch else { break };
            let batch = batch.map_err(df)?;
            let mut encoded = Vec::with_capacity(batch.num_rows());
            encode::encode_batch(&batch, &fields, &mut encoded).map_err(PgError::internal)?;
            rows.extend(encoded.iter().map(encode::text_values));
        }
        Ok((plan.schema.clone(), rows))
    }

    /// Writes rows of text values into an INSERT plan's columns (the rest
    /// take their DEFAULT), as COPY does; the number of rows written.
    async fn insert_text_rows(
        &self,
        w: &WritePlan,
        schema: &arrow_schema::Schema,
        rows: Vec<Vec<Option<String>>>,
        run: &mut Run<'_>,
    ) -> Result<usize, PgError> {
        let (WriteKind::Insert { columns, .. }, Some(targets)) = (&w.kind, w.insert_targets())
        else {
            return Err(PgError::internal(
                "INSERT ... SELECT was planned as another write",
            ));
        };
        if schema.fields().len() > columns.len() {
            return Err(PgError::syntax_error(
                "INSERT has more expressions than target columns",
            ));
        }
        let table = &w.table;
        for c in table.columns.iter().filter(|c| c.is_identity()) {
            let given = targets
                .iter()
                .any(|(t, i)| t.name == c.name && i.is_some_and(|i| i < schema.fields().len()));
            if given {
                if matches!(
                    c.default,
                    Some(tablegate_catalog::ColumnDefault::Identity { always: true })
                ) {
                    return Err(PgError::from(
                        &tablegate_planner::PlanError::GeneratedAlways {
                            column: c.name.clone(),
                        },
                    ));
                }
            } else {
                self.planner
                    .identities()
                    .reserve(&table.name, &c.name, rows.len())
                    .await
                    .map_err(|e| PgError::from(&e))?;
            }
        }
        let out = rows
            .iter()
            .map(|fields| super::copy::text_row(table, targets, fields, ""))
            .collect::<Result<Vec<_>, _>>()?;
        let _writing = self.cancel.writing();
        let mut txn = self.session.lock().txn.take();
        let result = tokio::select! {
            r = tablegate_planner::apply::insert_rows(
                self.planner.store(),
                self.planner.catalog(),
                w,
                out,
                txn.as_mut(),
                &run.opts,
            ) => r.map_err(|e| PgError::from(&e.with_key_columns(table))),
            e = run.stop.wait() => Err(e),
        };
        self.session.lock().txn = txn;
        let done = result?;
        run.notices.extend(done.notice.map(PgError::notice));
        Ok(done.rows as usize)
    }

    /// `CREATE TABLE name [(columns)] AS query`: the table takes the
    /// query's columns (renamed by `columns`) and types, without a primary
    /// key, then its rows. Tag `SELECT n`, as PostgreSQL's.
    async fn create_table_as(
        &self,
        name: &str,
        columns: &[String],
        query: &str,
        if_not_exists: bool,
        run: &mut Run<'_>,
    ) -> Result<Response, PgError> {
        if self.planner.catalog().table(name).is_ok() {
            if if_not_exists {
                run.notices.push(PgError::notice(format!(
                    "relation \"{name}\" already exists, skipping"
                )));
                return Ok(Response::Execution(Tag::new("CREATE TABLE AS")));
            }
            return Err(PgError::from(&tablegate_planner::PlanError::Catalog(
                tablegate_planner::catalog::CatalogError::TableExists {
                    name: name.to_owned(),
                },
            )));
        }
        let (schema, rows) = self.engine_rows(query, "CREATE TABLE ... AS", run).await?;
        if columns.len() > schema.fields().len() {
            return Err(PgError::syntax_error(
                "too many column names were specified",
            ));
        }
        let mut defs = Vec::with_capacity(schema.fields().len());
        for (i, f) in schema.fields().iter().enumerate() {
            let col = columns.get(i).map_or(f.name().as_str(), String::as_str);
            let ty = table_type(f.data_type()).pg_name();
            defs.push(format!("\"{}\" {ty}", col.replace('"', "\"\"")));
        }
        let ddl = format!(
            "CREATE TABLE \"{}\" ({})",
            name.replace('"', "\"\""),
            defs.join(", ")
        );
        let stmt = tablegate_planner::Planner::parse(&ddl)
            .map_err(|e| PgError::from(&e))?
            .pop()
            .ok_or_else(|| PgError::internal("CREATE TABLE AS: no statement"))?;
        let plan = self
            .planner
            .plan(&stmt, &ddl)
            .map_err(|e| PgError::from(&e))?;
        let outcome = self
            .planner
            .run_ddl(&plan)
            .await
            .map_err(|e| PgError::from(&e))?;
        run.notices.extend(outcome.notice.map(PgError::notice));
        let (w, _) = tablegate_planner::write::plan_copy_in(
            self.planner.catalog(),
            &sqlparser::ast::ObjectName::from(vec![sqlparser::ast::Ident::with_quote('"', name)]),
            &[],
        )
        .map_err(|e| PgError::from(&e))?;
        let n = self.insert_text_rows(&w, &schema, rows, run).await?;
        Ok(Response::Execution(Tag::new("SELECT").with_rows(n)))
    }
}

/// The column type `CREATE TABLE ... AS` gives a result column: the
/// store's nearest type (numeric and real become double precision; times,
/// intervals and arrays keep their text).
fn table_type(dt: &arrow_schema::DataType) -> SqlType {
    use arrow_schema::DataType as D;
    match dt {
        D::Int8 | D::Int16 | D::UInt8 => SqlType::Int2,
        D::Int32 | D::UInt16 => SqlType::Int4,
        D::Int64 | D::UInt32 | D::UInt64 => SqlType::Int8,
        D::Float16 | D::Float32 | D::Float64 | D::Decimal128(..) | D::Decimal256(..) => {
            SqlType::Float8
        }
        D::Boolean => SqlType::Bool,
        D::Binary | D::LargeBinary | D::BinaryView => SqlType::Bytea,
        D::FixedSizeBinary(16) => SqlType::Uuid,
        D::Timestamp(_, Some(_)) => SqlType::Timestamptz,
        D::Timestamp(_, None) => SqlType::Timestamp,
        D::Date32 | D::Date64 => SqlType::Date,
        _ => SqlType::Text,
    }
}
