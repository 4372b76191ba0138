//! SQL-level prepared statements: PREPARE, EXECUTE, EXPLAIN EXECUTE and
//! DEALLOCATE (protocol-level ones are pgwire's, budgeted in
//! [`super::extended`]).

use std::sync::Arc;

use pgwire::api::results::{Response, Tag};
use sqlparser::ast;
use tablegate_planner::ExplainPlan;
use tablegate_store::Value;

use super::params::constant_param;
use super::prepare::{Prepared, replan};
use super::session::{Named, too_many_prepared};
use super::{ConnHandler, MAX_NAMED_STATEMENTS, MAX_PREPARED_BYTES};
use crate::sqlstate::PgError;

impl ConnHandler {
    /// PREPARE name AS statement.
    pub(super) fn prepare_sql(
        &self,
        name: &str,
        stmt: &Prepared,
        sql: &Arc<str>,
        version: u64,
    ) -> Result<Response, PgError> {
        let named = &mut self.session.lock().named;
        if named.contains_key(name) {
            return Err(PgError::duplicate_prepared_statement(format!(
                "prepared statement \"{name}\" already exists"
            )));
        }
        let held: usize = named.values().map(|n| n.sql.len()).sum();
        if named.len() >= MAX_NAMED_STATEMENTS || held + sql.len() > MAX_PREPARED_BYTES {
            return Err(too_many_prepared("DEALLOCATE statements no longer needed"));
        }
        let named_stmt = Named {
            stmt: stmt.clone(),
            sql: sql.clone(),
            version,
        };
        named.insert(name.to_owned(), named_stmt);
        Ok(Response::Execution(Tag::new("PREPARE")))
    }

    /// DEALLOCATE name, or DEALLOCATE ALL (`None`).
    pub(super) fn deallocate(&self, name: Option<&str>) -> Response {
        let named = &mut self.session.lock().named;
        match name {
            None => named.clear(),
            Some(n) => {
                named.remove(n);
            }
        }
        Response::Execution(Tag::new(if name.is_none() {
            "DEALLOCATE ALL"
        } else {
            "DEALLOCATE"
        }))
    }

    /// What EXECUTE or EXPLAIN EXECUTE runs: the prepared statement (or
    /// its EXPLAIN) and its parameters.
    pub(super) async fn execute_sql(
        &self,
        p: &Prepared,
    ) -> Result<(Prepared, Vec<Option<Value>>), PgError> {
        match p {
            Prepared::ExecuteSql { name, args } => self.named_call(name, args).await,
            Prepared::ExplainExecute {
                name,
                args,
                analyze,
                json,
            } => {
                let (stmt, params) = self.named_call(name, args).await?;
                let explain = match stmt {
                    Prepared::Select(select) => Prepared::Explain(Arc::new(ExplainPlan {
                        analyze: *analyze,
                        json: *json,
                        select: select.plan,
                        write: None,
                        what_if: None,
                    })),
                    Prepared::Engine {
                        plan,
                        explain: None,
                    } => Prepared::Engine {
                        plan,
                        explain: Some(*analyze),
                    },
                    _ => {
                        return Err(PgError::feature_not_supported(format!(
                            "EXPLAIN EXECUTE of \"{name}\" is not supported"
                        ))
                        .hint("EXPLAIN EXECUTE shows prepared queries; EXPLAIN the write itself"));
                    }
                };
                Ok((explain, params))
            }
            _ => Err(PgError::internal("not an EXECUTE")),
        }
    }

    /// A SQL-level prepared statement (planned again if a table definition
    /// changed since) and its EXECUTE parameters, typed by the statement.
    async fn named_call(
        &self,
        name: &str,
        args: &[ast::Expr],
    ) -> Result<(Prepared, Vec<Option<Value>>), PgError> {
        let named = self
            .session
            .lock()
            .named
            .get(name)
            .cloned()
            .ok_or_else(|| {
                PgError::invalid_sql_statement_name(format!(
                    "prepared statement \"{name}\" does not exist"
                ))
            })?;
        let version = self.planner.catalog().version();
        let stmt = if named.version == version {
            named.stmt
        } else {
            let stmt = replan(&self.planner, &self.session, &named.stmt, &named.sql).await?;
            if let Some(n) = self.session.lock().named.get_mut(name) {
                n.stmt = stmt.clone();
                n.version = version;
            }
            stmt
        };
        let types = stmt.param_types();
        if args.len() != types.len() {
            return Err(PgError::syntax_error(format!(
                "wrong number of parameters for prepared statement \"{name}\""
            ))
            .detail(format!(
                "Expected {} parameters but got {}.",
                types.len(),
                args.len()
            )));
        }
        let params = args
            .iter()
            .zip(types)
            .map(|(a, t)| constant_param(a, *t))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((stmt, params))
    }
}
