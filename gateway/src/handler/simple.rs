//! The simple query protocol: one Query message, any number of
//! statements, each prepared and run in turn until the first error.

use std::fmt::Debug;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::query::{
    SimpleQueryHandler, send_execution_response, send_query_response, send_ready_for_query,
};
use pgwire::api::results::Response;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::response::{EmptyQueryResponse, TransactionStatus};
use pgwire::messages::simplequery::Query;
use sqlparser::ast::Statement;
use tablegate_planner::Planner;

use super::ConnHandler;
use super::prepare::{prepare, resolve};
use crate::sqlstate::{PgError, error_info};

/// The transaction status to report after a message: pgwire derives it
/// from the responses (an error inside a transaction aborts it), but the
/// session's own record has the last word. A COMMIT that fails has already
/// ended its transaction, as in PostgreSQL, where pgwire would leave the
/// session aborted (25P02 until ROLLBACK).
pub(super) fn settle_status(txn_open: bool, derived: TransactionStatus) -> TransactionStatus {
    if txn_open {
        derived
    } else {
        TransactionStatus::Idle
    }
}

#[async_trait]
impl SimpleQueryHandler for ConnHandler {
    /// The Query message, written out here rather than pgwire's default
    /// only so that the ReadyForQuery it ends with carries the session's
    /// transaction status ([`settle_status`]). Cancel requests reach the
    /// statements through the session's own [`Stop`].
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        let mut status = client.transaction_status();
        client.set_state(PgWireConnectionState::QueryInProgress);
        if query.query.chars().all(|c| c == ';' || c.is_whitespace()) {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
        } else {
            let responses = SimpleQueryHandler::do_query(self, client, &query.query).await?;
            // A ROLLBACK TO among them ended a failed state; any later
            // response comes after it and moves the status on from there.
            if self.session.take_restored() {
                status = TransactionStatus::Transaction;
            }
            for r in responses {
                match r {
                    Response::EmptyQuery => {
                        client
                            .feed(PgWireBackendMessage::EmptyQueryResponse(
                                EmptyQueryResponse::new(),
                            ))
                            .await?;
                    }
                    Response::Query(q) => send_query_response(client, q, true).await?,
                    Response::Execution(tag) => send_execution_response(client, tag).await?,
                    Response::TransactionStart(tag) => {
                        send_execution_response(client, tag).await?;
                        status = status.to_in_transaction_state();
                    }
                    Response::TransactionEnd(tag) => {
                        send_execution_response(client, tag).await?;
                        status = status.to_idle_state();
                    }
                    Response::Error(e) => {
                        client
                            .feed(PgWireBackendMessage::ErrorResponse((*e).into()))
                            .await?;
                        status = status.to_error_state();
                    }
                    Response::CopyIn(r) => {
                        pgwire::api::copy::send_copy_in_response(client, r).await?;
                        client.set_state(PgWireConnectionState::CopyInProgress(false));
                    }
                    Response::CopyOut(r) => {
                        pgwire::api::copy::send_copy_out_response(client, r).await?;
                    }
                    Response::CopyBoth(r) => {
                        pgwire::api::copy::send_copy_both_response(client, r).await?;
                        client.set_state(PgWireConnectionState::CopyInProgress(false));
                    }
                }
            }
        }
        // During COPY FROM, the copy handler sends ReadyForQuery at the end.
        if !matches!(client.state(), PgWireConnectionState::CopyInProgress(_)) {
            let status = settle_status(self.session.in_transaction(), status);
            client.set_state(PgWireConnectionState::ReadyForQuery);
            client.set_transaction_status(status);
            send_ready_for_query(client, status).await?;
        }
        Ok(())
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let error = |e: PgError| Response::Error(Box::new(error_info(e)));
        let stmts = match Planner::parse(query) {
            Ok(s) => s,
            Err(e) => return Ok(vec![error(PgError::from(&e))]),
        };
        let mut failed = client.transaction_status() == TransactionStatus::Error;
        let mut out = Vec::with_capacity(stmts.len());
        for stmt in &stmts {
            let is_end = matches!(stmt, Statement::Commit { .. } | Statement::Rollback { .. });
            if failed && !is_end {
                out.push(error(PgError::aborted()));
                break;
            }
            // (COMMIT of a failed transaction rolls it back: `run` knows.)
            let prepared = match prepare(&self.planner, stmt, query, stmts.len() == 1) {
                Ok(p) => resolve(&self.planner, &self.session, p).await,
                Err(e) => Err(e),
            };
            // The statement's own text, for the statement log.
            let text = match stmts.len() {
                1 => crate::statements::normalize(query),
                _ => crate::statements::normalize(&stmt.to_string()),
            };
            let result = match prepared {
                Ok(p) => self.run(client, &p, &[], None, Some(text.into())).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(r) => out.push(r),
                Err(e) => {
                    out.push(error(e));
                    break;
                }
            }
            failed = false;
        }
        Ok(out)
    }
}
