//! Writes and DDL: INSERT, UPDATE, DELETE (with RETURNING), CREATE / DROP /
//! ALTER TABLE.
//!
//! The planner's `write` decides each entity's change and groups changes
//! into entity-group transactions (`tablegate_planner::apply`); inside
//! `BEGIN` they are staged in the session's transaction instead.

use std::sync::Arc;

use pgwire::api::results::{QueryResponse, Response, Tag};
use tablegate_planner::{Plan, WritePlan};

use super::{ConnHandler, Run};
use crate::encode::{self, fields};
use crate::sqlstate::PgError;

impl ConnHandler {
    /// CREATE / DROP / ALTER TABLE.
    pub(super) async fn ddl(&self, plan: &Plan, run: &mut Run<'_>) -> Result<Response, PgError> {
        let outcome = self
            .planner
            .run_ddl(plan)
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
}
