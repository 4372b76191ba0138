//! Who a Flight SQL request is, and which session runs it.
//!
//! The handshake takes `authorization: Basic …` (user and password, checked
//! against the same SCRAM verifiers as pgwire; any user under trust) and
//! answers with a bearer token valid for `flight_token_seconds` (an hour
//! by default). A
//! request with that token runs in the token's session (its settings,
//! its BEGIN block); one inside a Flight transaction runs in the
//! transaction's; under trust a request without a token gets a fresh
//! session. Prepared statements keep the session they were made in, and a
//! result computed before its ticket was fetched (SHOW, EXPLAIN) waits
//! here a bounded time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use base64::Engine as _;
use parking_lot::Mutex;
use tablegate_planner::Planner;
use tonic::Status;

use super::{FlightConfig, status};
use crate::auth::AuthMode;
use crate::cancel::CancelRegistry;
use crate::handler::{ArrowSession, Prepared};
use crate::sqlstate::PgError;

/// Results kept for a ticket at most this long, and at most this many.
const RESULT_TTL: Duration = Duration::from_secs(600);
const MAX_RESULTS: usize = 1_000;

/// The user when trust lets a client in without naming one.
const DEFAULT_USER: &str = "tablegate";

/// A session a bearer token stands for.
struct Token {
    expires: Instant,
    session: Arc<ArrowSession>,
}

/// A prepared statement behind a handle.
pub(super) struct Statement {
    /// Its text (planned again after DDL).
    pub sql: String,
    /// The session it runs in.
    pub session: Arc<ArrowSession>,
    /// The plan, and the catalog version it was made at.
    pub plan: Mutex<(Prepared, u64)>,
    /// Parameter rows bound by the last DoPut (none: run without).
    pub params: Mutex<Vec<RecordBatch>>,
}

/// A result waiting for its ticket: when it was kept, its schema and
/// batches.
type Kept = (Instant, SchemaRef, Vec<RecordBatch>);

/// Every session, token, transaction, prepared statement and pending
/// result of one Flight SQL server.
pub(super) struct Sessions {
    planner: Planner,
    config: FlightConfig,
    registry: Arc<CancelRegistry>,
    tokens: Mutex<HashMap<String, Token>>,
    transactions: Mutex<HashMap<Vec<u8>, Arc<ArrowSession>>>,
    statements: Mutex<HashMap<Vec<u8>, Arc<Statement>>>,
    results: Mutex<HashMap<Vec<u8>, Kept>>,
}

fn unauthenticated(message: &str) -> Status {
    status(PgError::invalid_authorization_specification(message))
}

impl Sessions {
    pub fn new(planner: Planner, config: FlightConfig) -> Self {
        Sessions {
            planner,
            config,
            registry: Arc::default(),
            tokens: Mutex::default(),
            transactions: Mutex::default(),
            statements: Mutex::default(),
            results: Mutex::default(),
        }
    }

    pub fn planner(&self) -> &Planner {
        &self.planner
    }

    /// A new session for `user`.
    fn open(&self, user: &str) -> Arc<ArrowSession> {
        let c = &self.config;
        Arc::new(ArrowSession::open(
            &self.planner,
            &self.registry,
            &c.auth,
            &c.pool,
            &c.session_defaults,
            user,
        ))
    }

    /// The handshake: a Basic `authorization` value (or none, under trust)
    /// to a bearer token.
    pub async fn handshake(&self, authorization: Option<&str>) -> Result<String, Status> {
        let (user, password) = match authorization {
            Some(a) => basic(a)?,
            None if matches!(self.config.auth, AuthMode::Trust) => {
                (DEFAULT_USER.to_owned(), String::new())
            }
            None => {
                return Err(unauthenticated(
                    "Flight SQL needs a user and password (Basic authentication in the handshake)",
                ));
            }
        };
        self.config
            .auth
            .check_password(&user, &password)
            .await
            .map_err(status)?;
        let now = Instant::now();
        let mut tokens = self.tokens.lock();
        tokens.retain(|_, t| t.expires > now);
        if tokens.len() >= self.config.max_sessions {
            return Err(status(
                PgError::too_many_connections(format!(
                    "too many Flight SQL sessions: at most {} tokens are valid at once",
                    self.config.max_sessions
                ))
                .hint("reuse the token of an earlier handshake; tokens expire after an hour"),
            ));
        }
        let token = uuid::Uuid::new_v4().simple().to_string();
        tokens.insert(
            token.clone(),
            Token {
                expires: now + self.config.token_lifetime,
                session: self.open(&user),
            },
        );
        Ok(token)
    }

    /// The session a request runs in: its Flight transaction's, its bearer
    /// token's, or (under trust, or with Basic credentials on the call) a
    /// fresh one.
    pub async fn session(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        transaction: Option<&[u8]>,
    ) -> Result<Arc<ArrowSession>, Status> {
        let authorization = metadata
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let from_token = match authorization.as_deref() {
            Some(a) if a.len() > 7 && a[..7].eq_ignore_ascii_case("bearer ") => {
                let token = a[7..].trim();
                let mut tokens = self.tokens.lock();
                match tokens.get(token) {
                    Some(t) if t.expires > Instant::now() => Some(t.session.clone()),
                    Some(_) => {
                        tokens.remove(token);
                        return Err(unauthenticated(
                            "the Flight SQL token has expired: authenticate again",
                        ));
                    }
                    None => {
                        return Err(unauthenticated(
                            "unknown Flight SQL token: authenticate again",
                        ));
                    }
                }
            }
            _ => None,
        };
        if let Some(id) = transaction.filter(|t| !t.is_empty()) {
            return self.transactions.lock().get(id).cloned().ok_or_else(|| {
                status(PgError::no_active_sql_transaction(
                    "no Flight SQL transaction with this id is open",
                ))
            });
        }
        if let Some(s) = from_token {
            return Ok(s);
        }
        match authorization.as_deref() {
            Some(a) if a.len() > 6 && a[..6].eq_ignore_ascii_case("basic ") => {
                let (user, password) = basic(a)?;
                self.config
                    .auth
                    .check_password(&user, &password)
                    .await
                    .map_err(status)?;
                Ok(self.open(&user))
            }
            _ if matches!(self.config.auth, AuthMode::Trust) => Ok(self.open(DEFAULT_USER)),
            _ => Err(unauthenticated(
                "Flight SQL needs authentication: a handshake with a user and password",
            )),
        }
    }

    /// Opens a Flight transaction in `session`: its id.
    pub fn begin(&self, session: Arc<ArrowSession>) -> Result<Vec<u8>, Status> {
        let mut transactions = self.transactions.lock();
        if transactions.len() >= self.config.max_sessions {
            return Err(status(PgError::too_many_connections(
                "too many open Flight SQL transactions",
            )));
        }
        let id = uuid::Uuid::new_v4().as_bytes().to_vec();
        transactions.insert(id.clone(), session);
        Ok(id)
    }

    /// Ends a Flight transaction: its session.
    pub fn end(&self, id: &[u8]) -> Result<Arc<ArrowSession>, Status> {
        self.transactions.lock().remove(id).ok_or_else(|| {
            status(PgError::no_active_sql_transaction(
                "no Flight SQL transaction with this id is open",
            ))
        })
    }

    /// Keeps a prepared statement: its handle.
    pub fn keep_statement(&self, statement: Statement) -> Result<Vec<u8>, Status> {
        let mut statements = self.statements.lock();
        if statements.len() >= crate::handler::MAX_NAMED_STATEMENTS * 16 {
            return Err(status(
                PgError::program_limit_exceeded("too many Flight SQL prepared statements are open")
                    .hint("close prepared statements when done with them"),
            ));
        }
        let handle = uuid::Uuid::new_v4().as_bytes().to_vec();
        statements.insert(handle.clone(), Arc::new(statement));
        Ok(handle)
    }

    pub fn statement(&self, handle: &[u8]) -> Result<Arc<Statement>, Status> {
        self.statements.lock().get(handle).cloned().ok_or_else(|| {
            status(PgError::invalid_sql_statement_name(
                "prepared statement handle does not exist (closed, or from another server)",
            ))
        })
    }

    pub fn close_statement(&self, handle: &[u8]) {
        self.statements.lock().remove(handle);
    }

    /// Keeps a finished result until its ticket is fetched: its key.
    pub fn keep_result(&self, schema: SchemaRef, batches: Vec<RecordBatch>) -> Vec<u8> {
        let now = Instant::now();
        let mut results = self.results.lock();
        results.retain(|_, (at, ..)| now.duration_since(*at) < RESULT_TTL);
        if results.len() >= MAX_RESULTS
            && let Some(oldest) = results
                .iter()
                .min_by_key(|(_, (at, ..))| *at)
                .map(|(k, _)| k.clone())
        {
            results.remove(&oldest);
        }
        let key = uuid::Uuid::new_v4().as_bytes().to_vec();
        results.insert(key.clone(), (now, schema, batches));
        key
    }

    /// Takes a kept result (a ticket is fetched once).
    pub fn take_result(&self, key: &[u8]) -> Result<(SchemaRef, Vec<RecordBatch>), Status> {
        self.results
            .lock()
            .remove(key)
            .map(|(_, s, b)| (s, b))
            .ok_or_else(|| {
                status(PgError::invalid_cursor_name(
                    "this ticket's result was already fetched or has expired",
                ))
            })
    }
}

/// User and password of a Basic `authorization` value.
fn basic(authorization: &str) -> Result<(String, String), Status> {
    let encoded = authorization
        .get(6..)
        .filter(|_| authorization[..6].eq_ignore_ascii_case("basic "))
        .ok_or_else(|| unauthenticated("Flight SQL authenticates with Basic user:password"))?;
    // With or without padding: Arrow's Go client (under ADBC) sends none.
    let bytes = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(encoded.trim().trim_end_matches('='))
        .map_err(|_| unauthenticated("the Basic credentials are not base64"))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| unauthenticated("the Basic credentials are not UTF-8"))?;
    let (user, password) = text
        .split_once(':')
        .ok_or_else(|| unauthenticated("the Basic credentials are not user:password"))?;
    Ok((user.to_owned(), password.to_owned()))
}
