//! Queries: native SELECTs, EXPLAIN, statements the analytics engine runs,
//! and `version()`.

use std::sync::Arc;

use futures::StreamExt;
use pgwire::api::results::{QueryResponse, Response};
use tablegate_planner::ExplainPlan;

use super::prepare::NativeSelect;
use super::{ConnHandler, Run, one_text_row};
use crate::analytics::EnginePlan;
use crate::encode;
use crate::sqlstate::PgError;
use crate::telemetry::StatementGuard;

impl ConnHandler {
    /// A native SELECT: its rows stream as the store's pages arrive.
    pub(super) fn select(
        &self,
        select: &NativeSelect,
        run: &Run<'_>,
        guard: &mut Option<StatementGuard>,
    ) -> Result<Response, PgError> {
        let rows = self
            .planner
            .execute(&select.plan, run.params, &run.opts)
            .map_err(|e| PgError::from(&e))?;
        let f = select.fields(run.format);
        Ok(Response::Query(QueryResponse::new(
            f.clone(),
            encode::row_stream(rows, f, run.stop.clone(), guard.take()),
        )))
    }

    /// EXPLAIN [ANALYZE] of a native SELECT, or of an UPDATE / DELETE's
    /// scan.
    pub(super) async fn explain(
        &self,
        e: &ExplainPlan,
        run: &Run<'_>,
    ) -> Result<Response, PgError> {
        let explained = self.planner.explain_plan(e, run.params, &run.opts);
        let lines = tokio::select! {
            r = explained => r.map_err(|e| PgError::from(&e))?,
            e = run.stop.wait() => return Err(e),
        };
        Ok(one_text_row("QUERY PLAN", &lines))
    }

    /// A statement the analytics engine runs (or, with `explain`,
    /// explains): its batches stream like a native scan's.
    pub(super) async fn analytics(
        &self,
        plan: &Arc<EnginePlan>,
        explain: Option<bool>,
        run: &Run<'_>,
        guard: &mut Option<StatementGuard>,
    ) -> Result<Response, PgError> {
        let engine = self.session.engine_for_run(&self.planner).await?;
        if let Some(analyze) = explain {
            let explained = engine.explain(plan, run.params, analyze, run.opts.clone());
            let lines = tokio::select! {
                r = explained => r.map_err(|e| PgError::from(&e))?,
                e = run.stop.wait() => return Err(e),
            };
            return Ok(one_text_row("QUERY PLAN", &lines));
        }
        let batches = self.analytics_batches(&engine, plan, run, guard).await?;
        let f = Arc::new(encode::arrow_fields(&plan.schema, run.format));
        Ok(Response::Query(QueryResponse::new(
            f.clone(),
            encode::batch_stream(batches, f, run.stop.clone()),
        )))
    }

    /// The running batches of an analytics statement, counted into
    /// `guard` (taken) when there is one.
    pub(super) async fn analytics_batches(
        &self,
        engine: &crate::analytics::Engine,
        plan: &Arc<EnginePlan>,
        run: &Run<'_>,
        guard: &mut Option<StatementGuard>,
    ) -> Result<super::arrow::Batches, PgError> {
        let scans = Arc::new(parking_lot::Mutex::new(
            tablegate_planner::Actuals::default(),
        ));
        if let Some(g) = guard.as_mut() {
            g.count_scans(scans.clone());
        }
        let started = engine.execute_counted(plan, run.params, run.opts.clone(), scans);
        let stream = tokio::select! {
            r = started => r.map_err(|e| PgError::from(&e))?,
            e = run.stop.wait() => return Err(e),
        };
        let batches = stream.map(|b| b.map_err(|e| PgError::from(&e)));
        Ok(match guard.take() {
            Some(g) => Box::pin(encode::counted(batches, g)),
            None => Box::pin(batches),
        })
    }
}

/// `SELECT version()`, answered the same on every path.
pub(super) fn version() -> Response {
    one_text_row("version", &[crate::settings::version_string()])
}
