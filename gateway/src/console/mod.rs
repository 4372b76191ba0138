//! The web console (`tablegate serve --http ADDR`): what the partition
//! layer does, drawn, and a JSON API other tools can read the same way.
//!
//! - Pages ([`assets`]): the key visualizer (a heat map of PartitionKey
//!   ranges × time), partitions and servers, and an EXPLAIN view. Plain
//!   HTML, CSS and JavaScript compiled into the binary: no framework, no
//!   build step, nothing fetched at run time.
//! - The API ([`api`]) under `/api`: the key visualizer's history, every
//!   system view as JSON, EXPLAIN as JSON. The pages use nothing else.
//! - Who may look: as for pgwire, trust is served on loopback addresses
//!   only; with SCRAM users every request carries HTTP Basic credentials,
//!   checked against the same verifiers. With TLS configured the console
//!   speaks HTTPS with the same certificate.
//!
//! Statements the console runs (system views, EXPLAIN) run in a fresh
//! [`ArrowSession`] as the authenticated user, with the server's session
//! defaults: the same planner, guardrails and SQLSTATEs as any client.

mod api;
mod assets;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use base64::Engine as _;
use tablegate_planner::Planner;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::auth::AuthMode;
use crate::cancel::CancelRegistry;
use crate::handler::ArrowSession;
use crate::sqlstate::PgError;
use crate::tls::Tls;

/// The user a trusted console request runs as.
const DEFAULT_USER: &str = "tablegate";
/// How long a client has for the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the console needs besides the planner.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// How requests authenticate (as for pgwire).
    pub auth: AuthMode,
    /// When set, the console speaks HTTPS only.
    pub tls: Option<Tls>,
    /// Settings every statement's session starts with.
    pub session_defaults: Vec<(String, String)>,
    /// The analytics engine's pool (shared with pgwire).
    pub pool: crate::analytics::Pool,
    /// Most rows of the key visualizer's heat map.
    pub keyviz_buckets: usize,
}

#[derive(Debug)]
struct Console {
    planner: Planner,
    config: ConsoleConfig,
    registry: Arc<CancelRegistry>,
}

/// Who a request is.
#[derive(Debug, Clone)]
struct User(String);

impl Console {
    /// A fresh session for one request.
    fn session(&self, user: &str) -> ArrowSession {
        let c = &self.config;
        ArrowSession::open(
            &self.planner,
            &self.registry,
            &c.auth,
            &c.pool,
            &c.session_defaults,
            user,
        )
    }
}

/// A bound console listener.
#[derive(Debug)]
pub struct ConsoleServer {
    listener: TcpListener,
    console: Arc<Console>,
}

impl ConsoleServer {
    /// Binds `addr`. Trust authentication is allowed on loopback addresses
    /// only, as for pgwire.
    pub async fn bind(
        addr: SocketAddr,
        planner: Planner,
        config: ConsoleConfig,
    ) -> std::io::Result<ConsoleServer> {
        config.auth.check_address(addr, "serve the console")?;
        if config.tls.is_none() && !addr.ip().is_loopback() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "refusing to serve the console on {addr} without TLS: passwords (HTTP Basic) would cross the network in clear (use --tls-cert and --tls-key, or a loopback address)"
                ),
            ));
        }
        let listener = TcpListener::bind(addr).await?;
        Ok(ConsoleServer {
            listener,
            console: Arc::new(Console {
                planner,
                config,
                registry: Arc::default(),
            }),
        })
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes.
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), String> {
        let app = router(self.console.clone());
        let served = match self.console.config.tls.clone() {
            None => {
                axum::serve(self.listener, app)
                    .with_graceful_shutdown(shutdown)
                    .await
            }
            Some(tls) => {
                let listener = TlsListener::start(self.listener, tls);
                axum::serve(listener, app)
                    .with_graceful_shutdown(shutdown)
                    .await
            }
        };
        served.map_err(|e| format!("console: {e}"))
    }
}

fn router(console: Arc<Console>) -> Router {
    Router::new()
        .route("/", get(assets::index))
        .route("/console.js", get(assets::script))
        .route("/console.css", get(assets::style))
        .route("/api", get(api::index))
        .route("/api/keyviz", get(api::keyviz))
        .route("/api/keyviz/statements", get(api::keyviz_statements))
        .route("/api/views/{name}", get(api::view))
        .route("/api/explain", post(api::explain))
        .fallback(|| async { api::not_found("no such page or API path") })
        .layer(middleware::from_fn_with_state(
            console.clone(),
            authenticate,
        ))
        .with_state(console)
}

/// Lets a request through as its user: anyone as `tablegate` under trust,
/// else the user whose HTTP Basic credentials match a SCRAM verifier.
async fn authenticate(
    State(console): State<Arc<Console>>,
    mut req: Request,
    next: Next,
) -> Response {
    let user = match &console.config.auth {
        // Trust is served on loopback only; a page of another site that
        // reaches it through a name resolving to loopback (DNS rebinding)
        // sends that name as its Host, and is turned away.
        AuthMode::Trust if !loopback_host(&req) => {
            return (
                StatusCode::FORBIDDEN,
                axum::Json(serde_json::json!({
                    "error": "under trust authentication the console answers only requests addressed to a loopback host (localhost, 127.0.0.1, [::1])",
                    "sqlstate": "28000",
                })),
            )
                .into_response();
        }
        AuthMode::Trust => DEFAULT_USER.to_owned(),
        auth => {
            let Some((user, password)) = req
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(basic)
            else {
                return challenge("the console needs a user and password (HTTP Basic)");
            };
            match auth.check_password(&user, &password).await {
                Ok(()) => {}
                Err(e) if e.code.starts_with("28") => return challenge(&e.message),
                // The users table could not be read: not the password's fault.
                Err(e) => return error_response(&e),
            }
            user
        }
    };
    req.extensions_mut().insert(User(user));
    next.run(req).await
}

/// Whether the request's Host names a loopback address.
fn loopback_host(req: &Request) -> bool {
    let Some(host) = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
    else {
        // HTTP/1.0 without Host: no name was resolved to reach us.
        return true;
    };
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => host.rsplit_once(':').map_or(host, |(h, _)| h),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// 401 with a Basic challenge, so that a browser asks for the password.
fn challenge(message: &str) -> Response {
    let mut r = (
        StatusCode::UNAUTHORIZED,
        axum::Json(serde_json::json!({ "error": message, "sqlstate": "28000" })),
    )
        .into_response();
    r.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"tablegate\", charset=\"UTF-8\""),
    );
    r
}

/// A `Basic` authorization value's user and password.
fn basic(value: &str) -> Option<(String, String)> {
    let (scheme, rest) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (user, password) = text.split_once(':')?;
    Some((user.to_owned(), password.to_owned()))
}

/// TLS connections, handshaken off the accept loop (a slow client must not
/// hold up the next), as axum's listener.
struct TlsListener {
    ready: mpsc::Receiver<(tokio_rustls_stream::Stream, SocketAddr)>,
    addr: std::io::Result<SocketAddr>,
}

/// The TLS stream type of the acceptor pgwire also uses.
mod tokio_rustls_stream {
    pub type Stream = pgwire::tokio::tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
}

impl TlsListener {
    fn start(listener: TcpListener, tls: Tls) -> TlsListener {
        let addr = listener.local_addr();
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (tcp, peer): (TcpStream, SocketAddr) = match listener.accept().await {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!(error = %e, "console accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                if tx.is_closed() {
                    return;
                }
                let (acceptor, tx) = (tls.0.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let _ = tx.send((stream, peer)).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%peer, error = %e, "console TLS handshake failed")
                        }
                        Err(_) => tracing::debug!(%peer, "console TLS handshake timed out"),
                    }
                });
            }
        });
        TlsListener { ready, addr }
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls_stream::Stream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(c) => c,
            // The accept loop ended: nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        match &self.addr {
            Ok(a) => Ok(*a),
            Err(e) => Err(std::io::Error::new(e.kind(), e.to_string())),
        }
    }
}

/// A [`PgError`] as an HTTP error: the status by the SQLSTATE's class, the
/// body the error's fields.
fn error_response(e: &PgError) -> Response {
    let status = match &e.code[..2] {
        "28" => StatusCode::UNAUTHORIZED,
        "42" | "22" | "0A" | "26" | "34" => StatusCode::BAD_REQUEST,
        "53" | "57" | "TG" => StatusCode::SERVICE_UNAVAILABLE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    let status = if e.code == "42P01" {
        StatusCode::NOT_FOUND
    } else {
        status
    };
    (
        status,
        axum::Json(serde_json::json!({
            "error": e.message,
            "sqlstate": e.code,
            "detail": e.detail,
            "hint": e.hint,
        })),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_credentials_parse() {
        let v = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("ann:pa:ss")
        );
        assert_eq!(basic(&v), Some(("ann".into(), "pa:ss".into())));
        assert_eq!(basic("Bearer abc"), None);
        assert_eq!(basic("Basic !!!"), None);
    }

    #[test]
    fn only_loopback_hosts_pass_under_trust() {
        let req = |host: Option<&str>| {
            let mut b = Request::builder().uri("/");
            if let Some(h) = host {
                b = b.header(header::HOST, h);
            }
            loopback_host(&b.body(axum::body::Body::empty()).unwrap())
        };
        for ok in [
            None,
            Some("localhost:8080"),
            Some("127.0.0.1:1"),
            Some("[::1]:80"),
            Some("LOCALHOST"),
        ] {
            assert!(req(ok), "{ok:?}");
        }
        for bad in [
            Some("evil.example:8080"),
            Some("10.0.0.1"),
            Some("localhost.evil.example"),
        ] {
            assert!(!req(bad), "{bad:?}");
        }
    }

    #[test]
    fn errors_map_to_http_statuses() {
        let s = |code: &'static str| {
            let mut e = PgError::syntax_error("x");
            e.code = code;
            error_response(&e).status()
        };
        assert_eq!(s("42601"), StatusCode::BAD_REQUEST);
        assert_eq!(s("42P01"), StatusCode::NOT_FOUND);
        assert_eq!(s("TG001"), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(s("XX000"), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
