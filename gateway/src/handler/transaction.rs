//! Transactions: BEGIN, COMMIT, ROLLBACK and savepoints, and the staged
//! writes that reads inside a transaction see.
//!
//! Writes inside `BEGIN` are staged in the session's
//! [`tablegate_planner::Transaction`]; COMMIT sends them all as one
//! entity-group transaction (the planner's `commit`). The session's own
//! record of the transaction has the last word over the status pgwire
//! derives from responses ([`super::simple::settle_status`]).

use std::sync::Arc;

use pgwire::api::results::{Response, Tag};
use pgwire::messages::response::TransactionStatus;
use tablegate_planner::{ExecOptions, Transaction};

use super::prepare::Prepared;
use super::{ConnHandler, Run};
use crate::sqlstate::PgError;

impl ConnHandler {
    /// The open transaction's staged writes, for a read to see.
    pub(super) async fn overlay(
        &self,
        opts: &ExecOptions,
    ) -> Result<Option<Arc<tablegate_planner::txn::Overlay>>, PgError> {
        let Some(mut t) = self.session.lock().txn.take() else {
            return Ok(None);
        };
        let overlay = if t.is_empty() {
            Ok(None)
        } else {
            t.overlay(self.planner.store(), &opts.retry).await
        };
        self.session.lock().txn = Some(t);
        overlay.map_err(|e| PgError::from(&e))
    }

    /// BEGIN, COMMIT, ROLLBACK, SAVEPOINT, RELEASE, ROLLBACK TO.
    pub(super) async fn transaction(
        &self,
        p: &Prepared,
        run: &mut Run<'_>,
    ) -> Result<Response, PgError> {
        match p {
            Prepared::Begin { read_only } => {
                // The session's own record, not pgwire's status: in a
                // multi-statement simple query that status is the one from
                // before the query.
                let mut s = self.session.lock();
                if s.txn.is_some() {
                    run.notices.push(PgError::active_sql_transaction(
                        "there is already a transaction in progress",
                    ));
                } else {
                    s.txn = Some(Transaction::new());
                    s.read_only = read_only.unwrap_or(s.settings.default_read_only());
                }
                Ok(Response::TransactionStart(Tag::new("BEGIN")))
            }
            Prepared::SetTransaction { read_only, session } => {
                let mut s = self.session.lock();
                if *session {
                    if let Some(ro) = read_only {
                        s.settings.set(
                            "default_transaction_read_only",
                            if *ro { "on" } else { "off" },
                        )?;
                    }
                } else if s.txn.is_none() {
                    run.notices.push(PgError::no_active_sql_transaction(
                        "SET TRANSACTION can only be used in transaction blocks",
                    ));
                } else if let Some(ro) = read_only {
                    s.read_only = *ro;
                }
                Ok(Response::Execution(Tag::new("SET")))
            }
            Prepared::Commit | Prepared::Rollback => {
                let (txn, restored) = {
                    let mut s = self.session.lock();
                    // Cursors without HOLD end with their transaction.
                    s.cursors.retain(|_, c| c.hold);
                    s.read_only = false;
                    (s.txn.take(), s.restored)
                };
                // A ROLLBACK TO earlier in this same Query message ended the
                // failed state pgwire still reports.
                let failed = run.status == TransactionStatus::Error && !restored;
                if txn.is_none() && run.status == TransactionStatus::Idle {
                    run.notices.push(PgError::no_active_sql_transaction(
                        "there is no transaction in progress",
                    ));
                }
                let commit = matches!(p, Prepared::Commit) && !failed;
                if commit && let Some(t) = txn {
                    let _writing = self.cancel.writing();
                    // The transaction is over whatever COMMIT answers: a
                    // failed one (40001, 53000) applied nothing, and the
                    // session goes back to idle, as in PostgreSQL.
                    self.planner
                        .commit(t, &run.opts)
                        .await
                        .map_err(|e| PgError::from(&e))?;
                }
                let tag = if commit { "COMMIT" } else { "ROLLBACK" };
                Ok(Response::TransactionEnd(Tag::new(tag)))
            }
            Prepared::Savepoint(name) | Prepared::Release(name) | Prepared::RollbackTo(name) => {
                let (verb, tag) = match p {
                    Prepared::Savepoint(_) => ("SAVEPOINT", "SAVEPOINT"),
                    Prepared::Release(_) => ("RELEASE SAVEPOINT", "RELEASE"),
                    _ => ("ROLLBACK TO SAVEPOINT", "ROLLBACK"),
                };
                let mut s = self.session.lock();
                let s = &mut *s;
                let Some(t) = s.txn.as_mut() else {
                    return Err(PgError::no_active_sql_transaction(format!(
                        "{verb} can only be used in transaction blocks"
                    )));
                };
                match p {
                    Prepared::Savepoint(_) => t.savepoint(name),
                    Prepared::Release(_) => t.release(name),
                    _ => t.rollback_to(name).map(|kept| {
                        // Cursors declared after the savepoint go with it.
                        s.cursors.retain(|_, c| c.hold || c.depth < kept);
                        s.restored = true;
                    }),
                }
                .map_err(|e| PgError::from(&e))?;
                Ok(Response::Execution(Tag::new(tag)))
            }
            _ => Err(PgError::internal("not a transaction statement")),
        }
    }
}
