//! The protocol handlers: one [`Connection`] per client socket, holding
//! its [`Session`], answering the simple and extended query protocols.
//!
//! # The life of a statement in the gateway
//!
//! 1. **Wire.** pgwire reads a Query message ([`simple`]) or Parse / Bind /
//!    Execute ([`extended`]); startup and authentication are [`startup`].
//! 2. **Prepare.** [`prepare::prepare`] turns one parsed statement into a
//!    [`Prepared`]: session commands are recognized here, everything else
//!    is the planner's [`tablegate_planner::Plan`], which already says
//!    whether the native path or the analytics engine runs it (**where a
//!    statement is routed**: `Planner::plan`). Analytics statements are
//!    planned by DataFusion once, at prepare time ([`prepare::resolve`]).
//! 3. **Parameters.** An extended Execute decodes its portal's values as
//!    the planner's types ([`params`]); EXECUTE takes constants.
//! 4. **Run.** [`ConnHandler::run`] times and counts the statement and
//!    dispatches it, once, to its family: queries, EXPLAIN and analytics
//!    ([`query`]), writes and DDL ([`write`]), transactions
//!    ([`transaction`]), settings ([`set`]), cursors ([`cursor`]),
//!    PREPARE / EXECUTE ([`prepared`]), COPY ([`copy`]).
//! 5. **Results stream.** A simple query's rows are produced as pgwire sends
//!    them; an extended Execute without a row limit writes DataRows as
//!    store pages arrive, and one with a row limit leaves the live scan in
//!    the suspended portal, so the next Execute resumes it (pgwire's
//!    default would collect every row first).

mod advise;
mod arrow;
pub mod copy;
mod cursor;
mod extended;
mod params;
mod prepare;
mod prepared;
mod query;
mod session;
mod set;
mod simple;
mod startup;
mod transaction;
mod write;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Instant;

use futures::{Sink, SinkExt};
use parking_lot::Mutex;
use pgwire::api::portal::Format;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{DataRowEncoder, QueryResponse, Response, Tag};
use pgwire::api::{ClientInfo, PgWireServerHandlers};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::response::{NoticeResponse, TransactionStatus};
use tablegate_planner::{ExecOptions, Planner};
use tablegate_store::Value;
use tracing::Instrument;

use crate::auth::{AuthMode, ScramStartup};
use crate::cancel::{CancelRegistry, CancelSignal, RegistryCancelHandler, Stop};
use crate::encode::text_field;
use crate::sqlstate::{PgError, error_info};
use crate::telemetry::{StatementClass, StatementGuard};

pub use arrow::{ArrowSession, Batches, Outcome};
pub use cursor::CursorQuery;
pub use extended::StatementParser;
pub use prepare::{NativeSelect, Prepared, prepare};
pub use session::{MAX_CURSORS, MAX_NAMED_STATEMENTS, MAX_PREPARED_BYTES, Session};
pub use startup::{Startup, StartupMode};

/// Rows one Execute message sends at most before PortalSuspended
/// (pgwire reserves room for the count the client asks for).
const MAX_ROWS_PER_EXECUTE: i32 = 100_000;

/// One client connection's handlers and session.
#[derive(Debug)]
pub struct ConnHandler {
    planner: Planner,
    session: Arc<Session>,
    parser: Arc<StatementParser>,
    cancel: Arc<CancelSignal>,
    registry: Arc<CancelRegistry>,
    /// Process id given at startup (for cancel requests).
    pid: Arc<Mutex<Option<i32>>>,
    auth: AuthMode,
    /// Refuse sessions that did not negotiate TLS.
    tls_required: bool,
    /// Where the session's slot comes from (none outside a server).
    admission: Option<Arc<crate::admission::Admission>>,
    /// The session's slot, taken at the end of authentication.
    slot: Arc<Mutex<Option<crate::admission::SessionSlot>>>,
}

impl Drop for ConnHandler {
    fn drop(&mut self) {
        if let Some(pid) = *self.pid.lock() {
            self.registry.unregister(pid, &self.cancel);
        }
    }
}

/// The handler set pgwire drives for one socket.
#[derive(Debug, Clone)]
pub struct Connection {
    handler: Arc<ConnHandler>,
}

impl Connection {
    /// The session's cancel signal (fired by cancel requests, and by the
    /// server when the client hangs up mid-statement).
    pub fn cancel_signal(&self) -> Arc<CancelSignal> {
        self.handler.cancel.clone()
    }

    /// A fresh session over `planner`, cancellable through `registry`.
    pub fn new(planner: Planner, registry: Arc<CancelRegistry>, auth: AuthMode) -> Self {
        let session = Arc::new(Session::default());
        Connection {
            handler: Arc::new(ConnHandler {
                parser: Arc::new(StatementParser::new(planner.clone(), session.clone())),
                session,
                planner,
                cancel: Arc::new(CancelSignal::default()),
                registry,
                pid: Arc::new(Mutex::new(None)),
                auth,
                tls_required: false,
                admission: None,
                slot: Arc::default(),
            }),
        }
    }
}

impl Connection {
    /// Where the session's analytics run (the server's pool); without it,
    /// on a pool of the caller's runtime.
    #[must_use]
    pub fn analytics_pool(self, pool: crate::analytics::Pool) -> Self {
        self.handler.session.set_pool(pool);
        self
    }

    /// Whether clients are trusted (no password): authentication is over
    /// with the startup packet.
    pub fn trusts(&self) -> bool {
        matches!(self.handler.auth, AuthMode::Trust)
    }

    /// Admission: the session takes a slot at the end of authentication,
    /// or is refused with FATAL 53300.
    #[must_use]
    pub fn admission(mut self, admission: Arc<crate::admission::Admission>) -> Self {
        if let Some(h) = Arc::get_mut(&mut self.handler) {
            h.admission = Some(admission);
        }
        self
    }

    /// Starts the session with the server's configured settings (already
    /// validated by `Server::bind`; invalid ones are ignored here).
    #[must_use]
    pub fn session_defaults(self, defaults: &[(String, String)]) -> Self {
        if !defaults.is_empty()
            && let Ok(s) = crate::settings::Settings::with_defaults(defaults)
        {
            self.handler.session.lock().settings = s;
        }
        self
    }

    /// Requires TLS: a client that did not negotiate it is refused (28000).
    #[must_use]
    pub fn require_tls(mut self, required: bool) -> Self {
        if let Some(h) = Arc::get_mut(&mut self.handler) {
            h.tls_required = required;
        }
        self
    }
}

impl PgWireServerHandlers for Connection {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.handler.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.handler.clone()
    }

    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        let h = &self.handler;
        let mode = match &h.auth {
            AuthMode::Trust => StartupMode::Trust(h.clone()),
            AuthMode::Scram(users) => StartupMode::Scram(ScramStartup::new(
                users.clone(),
                h.registry.clone(),
                h.cancel.clone(),
                h.pid.clone(),
            )),
        };
        Arc::new(Startup {
            mode,
            session: h.session.clone(),
            tls_required: h.tls_required,
            admission: h.admission.clone(),
            slot: h.slot.clone(),
        })
    }

    fn copy_handler(&self) -> Arc<impl pgwire::api::copy::CopyHandler> {
        self.handler.clone()
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        Arc::new(RegistryCancelHandler(self.handler.registry.clone()))
    }
}

fn one_text_row(name: &str, values: &[String]) -> Response {
    let f = Arc::new(text_field(name));
    let mut enc = DataRowEncoder::new(f.clone());
    let rows: Vec<_> = values
        .iter()
        .map(|v| enc.encode_field(&v.as_str()).map(|_| enc.take_row()))
        .collect();
    Response::Query(QueryResponse::new(f, futures::stream::iter(rows)))
}

/// Sends a NOTICE (code 00000) or, for any other SQLSTATE, a WARNING: as
/// PostgreSQL does for COMMIT outside a transaction (25P01).
async fn notice<C>(client: &mut C, notice: PgError) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let severity = if notice.code == "00000" {
        "NOTICE"
    } else {
        "WARNING"
    };
    let mut info = error_info(notice);
    info.severity = severity.to_owned();
    client
        .feed(PgWireBackendMessage::NoticeResponse(NoticeResponse::from(
            info,
        )))
        .await?;
    Ok(())
}

/// The row count a command tag carries (`INSERT 0 5` → 5).
fn tag_rows(tag: &Tag) -> u64 {
    pgwire::messages::response::CommandComplete::from(tag.clone())
        .tag
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// What one run of a statement carries besides the statement: its
/// parameters and result format, the settings it runs by, when it must
/// stop, and the NOTICEs it leaves for the client (sent before its
/// result).
pub(crate) struct Run<'a> {
    params: &'a [Option<Value>],
    format: Option<&'a Format>,
    opts: ExecOptions,
    stop: Stop,
    /// The transaction status pgwire reports (from before this message).
    status: TransactionStatus,
    /// NOTICEs (code 00000) and WARNINGs (any other code).
    notices: Vec<PgError>,
}

impl ConnHandler {
    /// A run of a statement starting now, by the session's settings as
    /// they are now (its statement_timeout counts from here).
    fn start_run<'a>(
        &self,
        params: &'a [Option<Value>],
        format: Option<&'a Format>,
        status: TransactionStatus,
    ) -> Run<'a> {
        let (opts, deadline) = {
            let s = self.session.lock();
            (
                s.settings.exec_options(),
                s.settings.statement_timeout().map(|t| Instant::now() + t),
            )
        };
        Run {
            params,
            format,
            opts,
            stop: Stop {
                deadline,
                cancel: self.cancel.clone(),
                since: self.cancel.generation(),
            },
            status,
            notices: Vec::new(),
        }
    }

    /// Runs one planned statement, timed and counted by a
    /// [`StatementGuard`] inside a `statement` tracing span, and recorded
    /// in the statement log under `text` (normalized). A streaming
    /// result carries the guard, so the statement is recorded when its
    /// last row has gone (or the portal is dropped).
    async fn run<C>(
        &self,
        client: &mut C,
        p: &Prepared,
        params: &[Option<Value>],
        format: Option<&Format>,
        text: Option<Arc<str>>,
    ) -> Result<Response, PgError>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let class = match p {
            Prepared::Write(_) | Prepared::Commit | Prepared::CopyIn { .. } => {
                StatementClass::Write
            }
            Prepared::Engine { explain: None, .. } => StatementClass::Analytics,
            _ => StatementClass::Other,
        };
        let mut guard = Some(StatementGuard::start(class).with_text(text));
        let span = guard
            .as_ref()
            .map_or_else(tracing::Span::none, |g| g.span().clone());
        // The store's key visualizer counts what it does against the
        // statement.
        let tag = guard.as_ref().map_or(0, StatementGuard::tag);
        let result = tablegate_store::api::statement_scope(
            tag,
            self.run_statement(client, p, params, format, &mut guard)
                .instrument(span),
        )
        .await;
        if let Some(g) = guard.as_mut() {
            match &result {
                Err(_) | Ok(Response::Error(_)) => g.fail(),
                Ok(Response::Execution(tag)) if class == StatementClass::Write => {
                    g.set_rows(tag_rows(tag));
                }
                _ => {}
            }
        }
        result
    }

    async fn run_statement<C>(
        &self,
        client: &mut C,
        p: &Prepared,
        params: &[Option<Value>],
        format: Option<&Format>,
        guard: &mut Option<StatementGuard>,
    ) -> Result<Response, PgError>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut run = self.start_run(params, format, client.transaction_status());
        let deadline = run.stop.deadline;
        if let Some(command) = p.writes()
            && self.session.lock().read_only_now()
        {
            return Err(PgError::read_only_sql_transaction(format!(
                "cannot execute {command} in a read-only transaction"
            )));
        }
        // Reads inside a transaction see its staged writes.
        if matches!(
            p,
            Prepared::Select(_)
                | Prepared::Explain(_)
                | Prepared::Declare { .. }
                | Prepared::Engine { .. }
        ) {
            run.opts.overlay = self.overlay(&run.opts).await?;
        }
        let response = match p {
            Prepared::Select(select) => self.select(select, &run, guard)?,
            Prepared::Explain(e) => self.explain(e, &run).await?,
            Prepared::Engine { plan, explain } => {
                self.analytics(plan, *explain, &run, guard).await?
            }
            Prepared::Version => query::version(),
            Prepared::Sleep(d) => {
                tokio::select! {
                    _ = tokio::time::sleep(*d) => one_text_row("pg_sleep", &[String::new()]),
                    e = run.stop.wait() => return Err(e),
                }
            }
            Prepared::Advise(call) => self.advise(call, &run).await?,
            Prepared::Ddl(plan) => {
                // A CREATE INDEX backfill reports its progress as NOTICEs
                // while it runs, as PostgreSQL's long commands do.
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
                let report = move |m: String| drop(tx.send(m));
                let ddl = self.ddl(plan, &mut run, &report);
                tokio::pin!(ddl);
                // A client gone mid-build does not stop the build (half an
                // index would stay `building`): it runs to its end.
                let mut gone: Option<PgWireError> = None;
                let done = loop {
                    tokio::select! {
                        biased;
                        Some(m) = rx.recv(), if gone.is_none() => {
                            let sent: PgWireResult<()> = async {
                                notice(client, PgError::notice(m)).await?;
                                client.flush().await?;
                                Ok(())
                            }
                            .await;
                            gone = sent.err();
                        }
                        done = &mut ddl => break done,
                    }
                };
                match gone {
                    Some(e) => return Err(PgError::connection_lost(e)),
                    None => done?,
                }
            }
            Prepared::Write(w) => self.write(w, &mut run).await?,
            Prepared::Set(..) | Prepared::Reset(_) | Prepared::Show(_) => self.setting(p)?,
            Prepared::Begin { .. }
            | Prepared::SetTransaction { .. }
            | Prepared::Commit
            | Prepared::Rollback
            | Prepared::Savepoint(_)
            | Prepared::Release(_)
            | Prepared::RollbackTo(_) => self.transaction(p, &mut run).await?,
            Prepared::Declare { name, query, hold } => {
                self.declare(name, query, *hold, &run).await?
            }
            Prepared::Fetch { name, count } => self.fetch(name, *count, &run).await?,
            Prepared::Close(name) => self.close(name.as_deref())?,
            Prepared::PrepareSql {
                name,
                stmt,
                sql,
                version,
            } => self.prepare_sql(name, stmt, sql, *version)?,
            Prepared::Deallocate(name) => self.deallocate(name.as_deref()),
            Prepared::ExecuteSql { .. } | Prepared::ExplainExecute { .. } => {
                let (stmt, params) = self.execute_sql(p).await?;
                return Box::pin(self.run_statement(client, &stmt, &params, format, guard)).await;
            }
            Prepared::CopyIn {
                plan,
                columns,
                format,
            } => {
                self.copy_in(plan, columns, format, run.opts.clone(), deadline)
                    .await
            }
            Prepared::CopyOut { select, format } => {
                self.copy_out(client, select, format, &run).await?
            }
            Prepared::EngineSql { .. } => {
                return Err(PgError::internal("an analytics statement ran unplanned"));
            }
        };
        for n in run.notices {
            notice(client, n).await.map_err(PgError::connection_lost)?;
        }
        Ok(response)
    }
}
