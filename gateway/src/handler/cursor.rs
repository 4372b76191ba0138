//! Cursors: DECLARE, FETCH and CLOSE.
//!
//! A cursor holds a running native scan or analytics plan and reads it
//! forward only, like the store's continuation tokens. Its rows wait as
//! Arrow batches, not encoded rows, so each FETCH encodes them in the
//! format that FETCH asks for (tokio-postgres asks for binary, psql for
//! text), as PostgreSQL does. A cursor outlives its statement: each FETCH
//! runs under its own statement_timeout and cancel scope.

use std::fmt::Debug;
use std::sync::Arc;

use futures::StreamExt;
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldInfo, QueryResponse, Response, Tag};
use pgwire::error::PgWireError;
use sqlparser::ast;
use tablegate_catalog::SqlType;
use tablegate_planner::{SelectPlan, Transaction};

use super::{ConnHandler, MAX_CURSORS, Run};
use crate::analytics::EnginePlan;
use crate::cancel::Stop;
use crate::encode::{self, fields};
use crate::sqlstate::PgError;

/// What a cursor reads: a native scan, or an analytics statement (an
/// aggregate over a server-side cursor, as psycopg's named cursors send).
#[derive(Debug, Clone)]
pub enum CursorQuery {
    /// A native scan.
    Native(Arc<SelectPlan>),
    /// An analytics statement not yet planned by the engine.
    EngineSql {
        /// The query's text.
        sql: String,
        /// Why the native path does not run it.
        reason: String,
    },
    /// An analytics statement planned by the engine.
    Engine(Arc<EnginePlan>),
}

impl CursorQuery {
    /// The types of its `$n` parameters.
    pub(super) fn param_types(&self) -> &[SqlType] {
        match self {
            CursorQuery::Native(s) => &s.param_types,
            CursorQuery::Engine(plan) => &plan.param_types,
            CursorQuery::EngineSql { .. } => &[],
        }
    }
}

/// An open cursor: what it reads, and the rows it has not fetched yet.
///
/// Its rows wait as Arrow batches, not encoded rows, so each FETCH encodes
/// them in the format that FETCH asks for (tokio-postgres asks for binary,
/// psql for text), as PostgreSQL does.
pub(super) struct Cursor {
    query: CursorQuery,
    rows: Arc<tokio::sync::Mutex<CursorRows>>,
    pub(super) hold: bool,
    /// Savepoints of the transaction when it was declared: ROLLBACK TO an
    /// earlier one closes it, as in PostgreSQL.
    pub(super) depth: usize,
}

impl Cursor {
    /// Its columns, described in `format`.
    pub(super) fn fields(&self, format: Option<&Format>) -> Vec<FieldInfo> {
        match &self.query {
            CursorQuery::Native(s) => fields(&s.columns, format),
            CursorQuery::Engine(plan) => encode::arrow_fields(&plan.schema, format),
            CursorQuery::EngineSql { .. } => Vec::new(),
        }
    }
}

type BatchStream = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<arrow_array::RecordBatch, PgError>> + Send>,
>;

/// The rows of a cursor not fetched yet: its remaining batches, and the
/// batch the last FETCH stopped inside.
struct CursorRows {
    batches: BatchStream,
    /// A batch partly fetched, and how many of its rows have gone.
    partial: Option<(arrow_array::RecordBatch, usize)>,
    /// The batches have ended (a finished stream must not be polled again).
    done: bool,
}

impl CursorRows {
    /// The next `count` rows (all of them for `None`), as batch slices.
    async fn take(
        &mut self,
        count: Option<usize>,
        stop: &Stop,
    ) -> Result<Vec<arrow_array::RecordBatch>, PgError> {
        let mut out = Vec::new();
        let mut left = count.unwrap_or(usize::MAX);
        while left > 0 {
            let (batch, used) = match self.partial.take() {
                Some(p) => p,
                None if self.done => break,
                None => {
                    let next = tokio::select! {
                        n = self.batches.next() => n,
                        e = stop.wait() => return Err(e),
                    };
                    match next {
                        None => {
                            self.done = true;
                            break;
                        }
                        Some(batch) => (batch?, 0),
                    }
                }
            };
            let n = (batch.num_rows() - used).min(left);
            out.push(batch.slice(used, n));
            left -= n;
            if used + n < batch.num_rows() {
                self.partial = Some((batch, used + n));
            }
        }
        Ok(out)
    }
}

impl Debug for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor")
            .field("hold", &self.hold)
            .finish_non_exhaustive()
    }
}

/// A cursor name as PostgreSQL folds it.
pub fn cursor_name(i: &ast::Ident) -> String {
    tablegate_planner::expr::fold(i)
}

impl ConnHandler {
    /// DECLARE: starts the cursor's scan or plan.
    pub(super) async fn declare(
        &self,
        name: &str,
        query: &CursorQuery,
        hold: bool,
        run: &Run<'_>,
    ) -> Result<Response, PgError> {
        {
            let s = self.session.lock();
            // The session's record too: after BEGIN in the same
            // multi-statement query, pgwire's status is still idle.
            if !hold
                && run.status == pgwire::messages::response::TransactionStatus::Idle
                && s.txn.is_none()
            {
                return Err(PgError::no_active_sql_transaction(
                    "DECLARE CURSOR can only be used in transaction blocks",
                )
                .hint("BEGIN first, or DECLARE ... CURSOR WITH HOLD"));
            }
            if s.cursors.contains_key(name) {
                return Err(PgError::duplicate_cursor(format!(
                    "cursor \"{name}\" already exists"
                )));
            }
            // Each open cursor holds a running scan or plan and its
            // buffered batches.
            if s.cursors.len() >= MAX_CURSORS {
                return Err(PgError::program_limit_exceeded(format!(
                    "too many open cursors: a session holds at most {MAX_CURSORS}"
                ))
                .hint("CLOSE cursors no longer needed"));
            }
        }
        let batches: BatchStream = match query {
            CursorQuery::Native(select) => {
                let rows = self
                    .planner
                    .execute(select, run.params, &run.opts)
                    .map_err(|e| PgError::from(&e))?;
                Box::pin(futures::stream::unfold(rows, |mut rows| async move {
                    let batch = rows.next().await?;
                    Some((batch.map_err(|e| PgError::from(&e)), rows))
                }))
            }
            CursorQuery::Engine(plan) => {
                let engine = self.session.engine_for_run(&self.planner).await?;
                let started = engine.execute(plan, run.params, run.opts.clone());
                let batches = tokio::select! {
                    r = started => r.map_err(|e| PgError::from(&e))?,
                    e = run.stop.wait() => return Err(e),
                };
                Box::pin(batches.map(|b| b.map_err(|e| PgError::from(&e))))
            }
            CursorQuery::EngineSql { .. } => {
                return Err(PgError::internal("a cursor's query ran unplanned"));
            }
        };
        let mut s = self.session.lock();
        let depth = s.txn.as_ref().map_or(0, Transaction::depth);
        s.cursors.insert(
            name.to_owned(),
            Cursor {
                query: query.clone(),
                rows: Arc::new(tokio::sync::Mutex::new(CursorRows {
                    batches,
                    partial: None,
                    done: false,
                })),
                hold,
                depth,
            },
        );
        Ok(Response::Execution(Tag::new("DECLARE CURSOR")))
    }

    /// FETCH: the next rows, encoded in the format this FETCH asks for.
    pub(super) async fn fetch(
        &self,
        name: &str,
        count: Option<usize>,
        run: &Run<'_>,
    ) -> Result<Response, PgError> {
        let (f, rows) = {
            let s = self.session.lock();
            let c = s.cursors.get(name).ok_or_else(|| no_cursor(name))?;
            (Arc::new(c.fields(run.format)), c.rows.clone())
        };
        // The scan's own error (53000, 57014, ...) is the FETCH's.
        let batches = rows.lock().await.take(count, &run.stop).await?;
        let mut out = Vec::new();
        for b in &batches {
            match encode::encode_batch(b, &f, &mut out) {
                Ok(()) => {}
                Err(PgWireError::UserError(info)) => return Ok(Response::Error(info)),
                Err(e) => return Err(PgError::internal(e)),
            }
        }
        let mut q = QueryResponse::new(f, futures::stream::iter(out.into_iter().map(Ok)));
        q.set_command_tag("FETCH");
        Ok(Response::Query(q))
    }

    /// CLOSE name, or CLOSE ALL (`None`).
    pub(super) fn close(&self, name: Option<&str>) -> Result<Response, PgError> {
        let cursors = &mut self.session.lock().cursors;
        match name {
            None => cursors.clear(),
            Some(n) => {
                cursors.remove(n).ok_or_else(|| no_cursor(n))?;
            }
        }
        Ok(Response::Execution(Tag::new(if name.is_some() {
            "CLOSE CURSOR"
        } else {
            "CLOSE CURSOR ALL"
        })))
    }
}

fn no_cursor(name: &str) -> PgError {
    PgError::invalid_cursor_name(format!("cursor \"{name}\" does not exist"))
}
