//! Statements answered as Arrow record batches, for Arrow Flight SQL
//! (`crate::flight`): an [`ArrowSession`] is a session like a PostgreSQL
//! connection's, with the same preparation, dispatch, transactions,
//! settings and errors. What differs is the result: a native scan's or the
//! analytics engine's batches go out as they are made, never turned into
//! rows. Every other statement runs through [`ConnHandler::run`] as a
//! Query message would; the rows some of them return (SHOW, FETCH,
//! EXPLAIN, `version()`) come back as text columns. Bulk ingest writes
//! record batches through COPY FROM's path ([`super::copy`]).

use std::fmt::Debug;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use arrow_array::{ArrayRef, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::{Sink, Stream, StreamExt};
use parking_lot::Mutex;
use pgwire::api::results::{QueryResponse, Response};
use pgwire::api::{ClientInfo, DefaultClient, PgWireConnectionState};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::startup::SecretKey;
use tablegate_catalog::SqlType;
use tablegate_planner::Planner;
use tablegate_store::Value;

use super::prepare::{Prepared, prepare, resolve};
use super::{ConnHandler, Connection};
use crate::encode::{guarded, until_stopped};
use crate::sqlstate::PgError;
use crate::telemetry::{StatementClass, StatementGuard};

/// Record batches as a statement produces them.
pub type Batches = Pin<Box<dyn Stream<Item = Result<RecordBatch, PgError>> + Send>>;

/// What a statement returned.
pub enum Outcome {
    /// Rows: their schema, then their batches as they are made.
    Rows {
        /// The result's schema.
        schema: SchemaRef,
        /// Its batches; the stream ends with an error when the statement
        /// fails or is stopped part way.
        batches: Batches,
    },
    /// A command: the rows its tag counts (`INSERT 0 5` → 5).
    Done {
        /// Rows written (0 for commands that count none).
        rows: u64,
    },
}

impl Debug for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Rows { schema, .. } => f.debug_struct("Rows").field("schema", schema).finish(),
            Outcome::Done { rows } => f.debug_struct("Done").field("rows", rows).finish(),
        }
    }
}

/// A session that answers with record batches.
#[derive(Debug)]
pub struct ArrowSession {
    conn: Connection,
    /// The transaction status the PostgreSQL protocol would report
    /// (failed blocks refuse statements until ROLLBACK).
    status: Mutex<TransactionStatus>,
    /// Held while a statement starts: a Flight client may send the next
    /// before the last is answered, and a session runs one at a time (as
    /// a connection does), its transaction taken and put back by each.
    turn: tokio::sync::Mutex<()>,
}

impl ArrowSession {
    /// A fresh session for `user` (already authenticated) over `conn`'s
    /// planner, settings and analytics pool.
    pub fn new(conn: Connection, user: &str) -> Self {
        conn.handler.session.set_user(user);
        ArrowSession {
            conn,
            status: Mutex::new(TransactionStatus::Idle),
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// A fresh session for `user` on a side protocol (Flight SQL, the
    /// console): a connection over the server's planner, users, analytics
    /// pool and session defaults, as pgwire makes one per client.
    pub fn open(
        planner: &Planner,
        registry: &Arc<crate::cancel::CancelRegistry>,
        auth: &crate::auth::AuthMode,
        pool: &crate::analytics::Pool,
        defaults: &[(String, String)],
        user: &str,
    ) -> Self {
        let conn = Connection::new(planner.clone(), registry.clone(), auth.clone())
            .analytics_pool(pool.clone())
            .session_defaults(defaults);
        ArrowSession::new(conn, user)
    }

    fn h(&self) -> &ConnHandler {
        &self.conn.handler
    }

    /// The planner the session runs on.
    pub fn planner(&self) -> &Planner {
        &self.h().planner
    }

    /// Parses and prepares one SQL statement.
    pub async fn prepare(&self, sql: &str) -> Result<Prepared, PgError> {
        let h = self.h();
        let stmts = Planner::parse(sql).map_err(|e| PgError::from(&e))?;
        let [stmt] = stmts.as_slice() else {
            return Err(PgError::syntax_error(format!(
                "one SQL statement is expected here; this text holds {}",
                stmts.len()
            ))
            .hint("send the statements one at a time"));
        };
        let p = prepare(&h.planner, stmt, sql, true)?;
        resolve(&h.planner, &h.session, p).await
    }

    /// The schema of a statement's rows when it is known before it runs
    /// (queries); `None` for everything else.
    pub fn result_schema(p: &Prepared) -> Option<SchemaRef> {
        match p {
            Prepared::Select(s) => Some(s.plan.result_schema()),
            Prepared::Engine {
                plan,
                explain: None,
            } => Some(plan.schema.clone()),
            _ => None,
        }
    }

    /// The types of a statement's `$n` parameters.
    pub fn param_types(p: &Prepared) -> &[SqlType] {
        p.param_types()
    }

    /// Parameter rows from record batches (one row per execution, one
    /// column per `$n`), each value read as its parameter's type.
    pub fn param_rows(
        batches: &[RecordBatch],
        types: &[SqlType],
    ) -> Result<Vec<Vec<Option<Value>>>, PgError> {
        let mut rows = Vec::new();
        for batch in batches {
            if batch.num_columns() != types.len() {
                return Err(PgError::protocol_violation(format!(
                    "bind message supplies {} parameters, but prepared statement requires {}",
                    batch.num_columns(),
                    types.len()
                )));
            }
            let texts = super::copy::batch_text(batch)?;
            for r in 0..batch.num_rows() {
                let mut row = Vec::with_capacity(types.len());
                for (i, (column, ty)) in texts.iter().zip(types).enumerate() {
                    row.push(match &column[r] {
                        None => None,
                        Some(text) => Some(ty.parse_text(text).map_err(|e| {
                            let mut pg = PgError::from(&e);
                            pg.message = format!("parameter ${}: {}", i + 1, pg.message);
                            pg
                        })?),
                    });
                }
                rows.push(row);
            }
        }
        Ok(rows)
    }

    /// Runs a prepared statement with its parameters; `sql` is its text
    /// (for the statement log).
    pub async fn run(
        &self,
        p: &Prepared,
        params: &[Option<Value>],
        sql: &str,
    ) -> Result<Outcome, PgError> {
        let _turn = self.turn.lock().await;
        let status = *self.status.lock();
        let ends_block = matches!(
            p,
            Prepared::Commit | Prepared::Rollback | Prepared::RollbackTo(_)
        );
        if status == TransactionStatus::Error && !ends_block {
            return Err(PgError::aborted());
        }
        let text: Arc<str> = crate::statements::normalize(sql).into();
        let (result, derived) = self.dispatch(p, params, text, status).await;
        let h = self.h();
        let derived = if h.session.take_restored() {
            TransactionStatus::Transaction
        } else {
            derived
        };
        let derived = match &result {
            Err(_) => derived.to_error_state(),
            Ok(_) => derived,
        };
        *self.status.lock() = super::simple::settle_status(h.session.in_transaction(), derived);
        result
    }

    async fn dispatch(
        &self,
        p: &Prepared,
        params: &[Option<Value>],
        text: Arc<str>,
        status: TransactionStatus,
    ) -> (Result<Outcome, PgError>, TransactionStatus) {
        let h = self.h();
        match p {
            Prepared::Select(select) => {
                let r = self.select(select, params, text, status).await;
                return (r, status);
            }
            Prepared::Engine {
                plan,
                explain: None,
            } => {
                let r = self.analytics(plan, params, text, status).await;
                return (r, status);
            }
            Prepared::CopyIn { .. } | Prepared::CopyOut { .. } => {
                let e = PgError::feature_not_supported("COPY is not available through Flight SQL")
                    .hint("load record batches with bulk ingest (adbc_ingest); read with SELECT");
                return (Err(e), status);
            }
            _ => {}
        }
        // Everything else runs as a Query message would run it.
        let mut client = ArrowClient::new(status);
        let result = h.run(&mut client, p, params, None, Some(text)).await;
        let mut derived = status;
        let outcome = match result {
            Err(e) => Err(e),
            Ok(Response::Error(info)) => Err(PgError::from_info(*info)),
            Ok(Response::Query(q)) => text_rows(q).await,
            Ok(Response::Execution(tag)) => Ok(Outcome::Done {
                rows: super::tag_rows(&tag),
            }),
            Ok(Response::TransactionStart(_)) => {
                derived = derived.to_in_transaction_state();
                Ok(Outcome::Done { rows: 0 })
            }
            Ok(Response::TransactionEnd(_)) => {
                derived = derived.to_idle_state();
                Ok(Outcome::Done { rows: 0 })
            }
            Ok(Response::EmptyQuery) => Ok(Outcome::Done { rows: 0 }),
            Ok(Response::CopyIn(_) | Response::CopyOut(_) | Response::CopyBoth(_)) => Err(
                PgError::feature_not_supported("COPY is not available through Flight SQL"),
            ),
        };
        (outcome, derived)
    }

    /// A read starting now: inside a transaction it sees the staged
    /// writes.
    async fn start_read<'a>(
        &self,
        params: &'a [Option<Value>],
        status: TransactionStatus,
    ) -> Result<super::Run<'a>, PgError> {
        let h = self.h();
        let mut run = h.start_run(params, None, status);
        run.opts.overlay = h.overlay(&run.opts).await?;
        Ok(run)
    }

    /// A native SELECT: the scan's batches as they are made.
    async fn select(
        &self,
        select: &super::NativeSelect,
        params: &[Option<Value>],
        text: Arc<str>,
        status: TransactionStatus,
    ) -> Result<Outcome, PgError> {
        let h = self.h();
        let run = self.start_read(params, status).await?;
        let guard = StatementGuard::start(StatementClass::Other).with_text(Some(text));
        let rows = h
            .planner
            .execute(&select.plan, params, &run.opts)
            .map_err(|e| PgError::from(&e))?;
        let schema = rows.schema();
        let batches = until_stopped(Box::pin(guarded(rows, Some(guard))), run.stop);
        Ok(Outcome::Rows {
            schema,
            batches: Box::pin(batches),
        })
    }

    /// A query the analytics engine runs: DataFusion's batches as they are
    /// made.
    async fn analytics(
        &self,
        plan: &Arc<crate::analytics::EnginePlan>,
        params: &[Option<Value>],
        text: Arc<str>,
        status: TransactionStatus,
    ) -> Result<Outcome, PgError> {
        let h = self.h();
        let run = self.start_read(params, status).await?;
        let mut guard =
            Some(StatementGuard::start(StatementClass::Analytics).with_text(Some(text)));
        let engine = h.session.engine_for_run(&h.planner).await?;
        let batches = h.analytics_batches(&engine, plan, &run, &mut guard).await?;
        Ok(Outcome::Rows {
            schema: plan.schema.clone(),
            batches: Box::pin(until_stopped(batches, run.stop)),
        })
    }

    /// Writes record batches into `table` through COPY FROM's path: the
    /// batches' columns by name, rows as entity-group transactions per
    /// PartitionKey (staged, inside a transaction). Returns the rows
    /// written.
    pub async fn ingest(&self, table: &str, batches: Batches) -> Result<u64, PgError> {
        let _turn = self.turn.lock().await;
        if *self.status.lock() == TransactionStatus::Error {
            return Err(PgError::aborted());
        }
        let r = self.h().ingest(table, batches).await;
        if r.is_err() && self.h().session.in_transaction() {
            *self.status.lock() = TransactionStatus::Error;
        }
        r
    }
}

/// A result of text rows (what the PostgreSQL protocol sends for SHOW,
/// FETCH, EXPLAIN) as one batch of text columns.
async fn text_rows(mut q: QueryResponse) -> Result<Outcome, PgError> {
    let fields = q.row_schema();
    let mut columns: Vec<Vec<Option<String>>> = vec![Vec::new(); fields.len()];
    while let Some(row) = q.data_rows().next().await {
        let row = row.map_err(|e| PgError::from_wire(&e))?;
        let mut data = &row.data[..];
        for column in &mut columns {
            let Some((len, rest)) = data.split_first_chunk::<4>() else {
                return Err(PgError::internal("a DataRow ended early"));
            };
            let len = i32::from_be_bytes(*len);
            data = rest;
            if len < 0 {
                column.push(None);
                continue;
            }
            let (value, rest) = data.split_at(len as usize);
            data = rest;
            column.push(Some(String::from_utf8_lossy(value).into_owned()));
        }
    }
    let schema = Arc::new(Schema::new(
        fields
            .iter()
            .map(|f| Field::new(f.name(), DataType::Utf8, true))
            .collect::<Vec<_>>(),
    ));
    let arrays: Vec<ArrayRef> = columns
        .into_iter()
        .map(|c| Arc::new(StringArray::from(c)) as ArrayRef)
        .collect();
    let batch = RecordBatch::try_new(schema.clone(), arrays).map_err(PgError::internal)?;
    Ok(Outcome::Rows {
        schema,
        batches: Box::pin(futures::stream::iter([Ok(batch)])),
    })
}

/// The client a statement run for Arrow writes to: the transaction status
/// it starts from, and a sink for NOTICEs (Flight SQL has no channel for
/// them: they are logged).
struct ArrowClient {
    info: DefaultClient<()>,
}

impl ArrowClient {
    fn new(status: TransactionStatus) -> Self {
        let mut info = DefaultClient::new(([127, 0, 0, 1], 0).into(), false);
        info.transaction_status = status;
        info.state = PgWireConnectionState::ReadyForQuery;
        ArrowClient { info }
    }
}

impl ClientInfo for ArrowClient {
    fn socket_addr(&self) -> std::net::SocketAddr {
        self.info.socket_addr()
    }
    fn is_secure(&self) -> bool {
        self.info.is_secure()
    }
    fn protocol_version(&self) -> pgwire::messages::ProtocolVersion {
        self.info.protocol_version()
    }
    fn set_protocol_version(&mut self, version: pgwire::messages::ProtocolVersion) {
        self.info.set_protocol_version(version);
    }
    fn pid_and_secret_key(&self) -> (i32, SecretKey) {
        self.info.pid_and_secret_key()
    }
    fn set_pid_and_secret_key(&mut self, pid: i32, secret_key: SecretKey) {
        self.info.set_pid_and_secret_key(pid, secret_key);
    }
    fn state(&self) -> PgWireConnectionState {
        self.info.state()
    }
    fn set_state(&mut self, new_state: PgWireConnectionState) {
        self.info.set_state(new_state);
    }
    fn transaction_status(&self) -> TransactionStatus {
        self.info.transaction_status()
    }
    fn set_transaction_status(&mut self, new_status: TransactionStatus) {
        self.info.set_transaction_status(new_status);
    }
    fn metadata(&self) -> &std::collections::HashMap<String, String> {
        self.info.metadata()
    }
    fn metadata_mut(&mut self) -> &mut std::collections::HashMap<String, String> {
        self.info.metadata_mut()
    }
    fn session_extensions(&self) -> &pgwire::api::SessionExtensions {
        self.info.session_extensions()
    }
    fn sni_server_name(&self) -> Option<&str> {
        None
    }
    fn client_certificates<'a>(
        &self,
    ) -> Option<&[pgwire::tokio::tokio_rustls::rustls::pki_types::CertificateDer<'a>]> {
        None
    }
}

impl Sink<PgWireBackendMessage> for ArrowClient {
    type Error = std::io::Error;

    fn poll_ready(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn start_send(self: Pin<&mut Self>, item: PgWireBackendMessage) -> Result<(), Self::Error> {
        if let PgWireBackendMessage::NoticeResponse(n) = item {
            tracing::debug!(notice = ?n, "a NOTICE Flight SQL cannot carry");
        }
        Ok(())
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn poll_close(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }
}
