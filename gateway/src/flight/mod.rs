//! Arrow Flight SQL beside the PostgreSQL protocol (`tablegate serve
//! --flight-listen ADDR`): analytics clients (ADBC, pyarrow, polars,
//! DuckDB) get the store's record batches without a row format in
//! between.
//!
//! The same planner, store, analytics engine, settings, throttling,
//! guardrails and SQLSTATE-bearing errors as pgwire: every statement runs
//! in a [`crate::handler::ArrowSession`]. This module owns only what is
//! Flight's own:
//! - [`sessions`] — who a request is (the Basic-auth handshake against the
//!   same SCRAM verifiers, bearer tokens with an expiry; trust on loopback
//!   only), which session runs it (the token's, a Flight transaction's, or
//!   a fresh one), prepared statement handles and results kept for a
//!   ticket;
//! - [`service`] — the Flight SQL commands (`arrow_flight::sql`'s
//!   `FlightSqlService`), queries streamed batch by batch as the scan or
//!   DataFusion makes them, bulk ingest through COPY's write path;
//! - [`metadata`] — GetTables, GetPrimaryKeys, GetSqlInfo,
//!   GetXdbcTypeInfo from the catalog;
//! - [`status`] — a [`PgError`] as a gRPC status: the SQLSTATE in the
//!   message and in the `x-postgres-sqlstate` metadata entry.

mod metadata;
mod service;
mod sessions;

use std::net::SocketAddr;
use std::time::Duration;

use arrow_flight::flight_service_server::FlightServiceServer;
use tablegate_planner::Planner;
use tokio::net::TcpListener;
use tonic::{Code, Status};

use crate::auth::AuthMode;
use crate::sqlstate::PgError;

/// Largest gRPC message a client may send (a DoPut batch), as pgwire's
/// message limit.
const MAX_MESSAGE_BYTES: usize = 64 << 20;

/// What the Flight SQL server needs besides the planner.
#[derive(Debug, Clone)]
pub struct FlightConfig {
    /// How clients authenticate (as for pgwire).
    pub auth: AuthMode,
    /// TLS certificate chain and key (PEM text); when set, TLS is required.
    pub tls: Option<(String, String)>,
    /// Settings every session starts with.
    pub session_defaults: Vec<(String, String)>,
    /// The analytics engine's pool (shared with pgwire).
    pub pool: crate::analytics::Pool,
    /// How long a bearer token is valid.
    pub token_lifetime: Duration,
    /// Most sessions (tokens and open transactions) held at once.
    pub max_sessions: usize,
}

/// A bound Flight SQL listener.
#[derive(Debug)]
pub struct FlightServer {
    listener: TcpListener,
    planner: Planner,
    config: FlightConfig,
}

impl FlightServer {
    /// Binds `addr`. Trust authentication is allowed on loopback addresses
    /// only, as for pgwire.
    pub async fn bind(
        addr: SocketAddr,
        planner: Planner,
        config: FlightConfig,
    ) -> std::io::Result<FlightServer> {
        config.auth.check_address(addr, "serve Flight SQL")?;
        let listener = TcpListener::bind(addr).await?;
        Ok(FlightServer {
            listener,
            planner,
            config,
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send,
    ) -> Result<(), String> {
        let tls = self.config.tls.clone();
        let service = service::FlightSql::new(self.planner, self.config);
        let svc = FlightServiceServer::new(service)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let mut builder = tonic::transport::Server::builder();
        if let Some((cert, key)) = tls {
            let identity = tonic::transport::Identity::from_pem(cert, key);
            builder = builder
                .tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))
                .map_err(|e| format!("Flight SQL TLS configuration: {e}"))?;
        }
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(self.listener);
        builder
            .add_service(svc)
            .serve_with_incoming_shutdown(incoming, shutdown)
            .await
            .map_err(|e| format!("Flight SQL server: {e}"))
    }
}

/// A [`PgError`] as the gRPC status a Flight SQL client receives: a code
/// by the SQLSTATE's class, the message with its SQLSTATE, DETAIL and
/// HINT, and the SQLSTATE alone in `x-postgres-sqlstate`.
pub fn status(e: PgError) -> Status {
    let class = e.code.get(..2).unwrap_or("");
    let code = match (class, e.code) {
        ("28", _) => Code::Unauthenticated,
        (_, "42501") => Code::PermissionDenied,
        (_, "42P01" | "42703" | "42704" | "42883" | "3D000" | "26000" | "34000") => Code::NotFound,
        (_, "23505" | "42P07") => Code::AlreadyExists,
        (_, "57014") => Code::Cancelled,
        ("0A", _) => Code::Unimplemented,
        ("22" | "42" | "2B" | "08", _) => Code::InvalidArgument,
        ("23" | "25" | "55" | "TG" | "2D", _) => Code::FailedPrecondition,
        ("40", _) => Code::Aborted,
        ("53" | "54", _) => Code::ResourceExhausted,
        ("57" | "58", _) => Code::Unavailable,
        _ => Code::Internal,
    };
    let mut message = format!("{} (SQLSTATE {})", e.message, e.code);
    if let Some(d) = &e.detail {
        message.push_str("\nDETAIL: ");
        message.push_str(d);
    }
    if let Some(h) = &e.hint {
        message.push_str("\nHINT: ");
        message.push_str(h);
    }
    let mut s = Status::new(code, message);
    if let Ok(v) = e.code.parse() {
        s.metadata_mut().insert("x-postgres-sqlstate", v);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_status_carries_the_sqlstate_detail_and_hint() {
        let s = status(
            PgError::new("42P01", "relation \"nope\" does not exist")
                .detail("d")
                .hint("h"),
        );
        assert_eq!(s.code(), Code::NotFound);
        assert_eq!(
            s.message(),
            "relation \"nope\" does not exist (SQLSTATE 42P01)\nDETAIL: d\nHINT: h"
        );
        assert_eq!(s.metadata().get("x-postgres-sqlstate").unwrap(), "42P01");
    }

    #[test]
    fn codes_follow_the_sqlstate_class() {
        for (sqlstate, code) in [
            ("28P01", Code::Unauthenticated),
            ("23505", Code::AlreadyExists),
            ("23502", Code::FailedPrecondition),
            ("TG001", Code::FailedPrecondition),
            ("0A000", Code::Unimplemented),
            ("22P02", Code::InvalidArgument),
            ("40001", Code::Aborted),
            ("53000", Code::ResourceExhausted),
            ("57014", Code::Cancelled),
            ("XX000", Code::Internal),
        ] {
            assert_eq!(
                status(PgError::new(sqlstate, "m")).code(),
                code,
                "{sqlstate}"
            );
        }
    }
}
