//! The listener: accepts sockets, runs each connection on a thread of its
//! own (with a single-threaded runtime) under the admission budgets
//! (`admission`: starting connections apart, session slots after
//! authentication), and shuts down gracefully: on the shutdown signal it
//! stops accepting, ends idle sessions with FATAL 57P01 (as PostgreSQL's
//! fast shutdown does), waits for the others to finish their statements,
//! up to a grace period (TLS sessions are not drained: see `conn_io`), and
//! stops the analytics pool.
//!
//! A socket the server has no thread for is answered on the listener's
//! runtime ([`refuse`]): its first packet is read, a CancelRequest is
//! served (cancels are never refused), anything else gets FATAL 53300.
//! Analytics run on a pool of their own (`analytics::Pool`), so however
//! busy they keep the cores, this loop still accepts.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tablegate_planner::Planner;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{Framed, FramedParts};

use crate::admission::{Admission, Limits, Starting};
use crate::auth::AuthMode;
use crate::cancel::CancelRegistry;
use crate::conn_io::{ConnIo, Sockets};
use crate::handler::Connection;

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Connection budgets: sessions, reserved slots, starting connections,
    /// authentication timeout, message size (see [`crate::admission`]).
    pub limits: Limits,
    /// How long shutdown waits for connections to finish.
    pub shutdown_grace: Duration,
    /// How clients authenticate.
    pub auth: AuthMode,
    /// TLS (then required for every connection).
    pub tls: Option<crate::tls::Tls>,
    /// Bytes the analytics engine may hold, all sessions together.
    pub engine_memory: usize,
    /// Analytics statements running at once; more wait in a queue.
    pub analytics_running: usize,
    /// How long an analytics statement may wait for its turn before it is
    /// refused with 53000.
    pub analytics_queue_wait: Duration,
    /// Session settings every connection starts with (and RESET returns
    /// to), e.g. `tablegate.page_size`; checked by [`Server::bind`].
    pub session_defaults: Vec<(String, String)>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            limits: Limits::default(),
            shutdown_grace: Duration::from_secs(10),
            auth: AuthMode::Trust,
            tls: None,
            engine_memory: crate::analytics::MEMORY_LIMIT,
            analytics_running: 4,
            analytics_queue_wait: Duration::from_secs(10),
            session_defaults: Vec::new(),
        }
    }
}

/// A bound server.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    planner: Planner,
    config: ServerConfig,
    analytics: crate::analytics::Pool,
}

impl Server {
    /// Binds `addr`. Trust authentication is allowed on loopback
    /// addresses only; invalid session defaults are refused here, before
    /// any client connects.
    pub async fn bind(
        addr: SocketAddr,
        planner: Planner,
        config: ServerConfig,
    ) -> std::io::Result<Server> {
        if let Err(e) = crate::settings::Settings::with_defaults(&config.session_defaults) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("invalid setting: {}", e.message),
            ));
        }
        config.auth.check_address(addr, "listen")?;
        let listener = TcpListener::bind(addr).await?;
        // Analytics run on a runtime of their own: however busy they keep
        // it, the accept loop (and with it cancel requests, which arrive as
        // new connections) runs on this one.
        let analytics = crate::analytics::Pool::new(
            config.engine_memory,
            config.analytics_running,
            config.analytics_queue_wait,
        )?;
        Ok(Server {
            listener,
            planner,
            config,
            analytics,
        })
    }

    /// The analytics engine's pool, for other front ends of the same
    /// server (Flight SQL) to share its threads and memory limit.
    pub fn analytics_pool(&self) -> crate::analytics::Pool {
        self.analytics.clone()
    }

    /// The planner it serves.
    pub fn planner(&self) -> &Planner {
        &self.planner
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then drains connections.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let admission = Admission::new(self.config.limits.clone());
        let registry = Arc::new(CancelRegistry::default());
        let analytics = self.analytics.clone();
        let threads = ConnectionThreads::new();
        // Connections whose thread is running, starting or not.
        let open = Arc::new(AtomicUsize::new(0));
        // Sockets being refused (on this runtime, without a thread).
        let refusing = Arc::new(AtomicUsize::new(0));
        // A connection thread for each session slot and each starting
        // connection, and a few for those on their way out.
        let max_threads =
            self.config.limits.max_connections + self.config.limits.max_starting.max(1) + 8;
        // Past the open-file budget, connections are refused before they
        // take a descriptor the engine needs.
        let fd_cap = connections_within_open_file_limit();
        let max_open = fd_cap.map_or(max_threads, |(n, _)| n.min(max_threads));
        if let Some((n, limit)) = fd_cap
            && n < max_threads
        {
            tracing::warn!(
                open_file_limit = limit,
                connections = n,
                "the open-file limit ({limit}) leaves room for {n} connections, fewer than \
                 max_connections and starting connections allow; raise it (ulimit -n, \
                 LimitNOFILE= in systemd)"
            );
        }
        let too_many = if max_open < max_threads {
            "sorry, too many clients already: the server is short of file handles (its open-file limit)"
        } else {
            "sorry, too many clients already"
        };
        // The statement log carries on from the last run, and is written
        // back while the server runs and once more at the end.
        let system = self.planner.store().system();
        match crate::statements::statements().load(&*system).await {
            Ok(n) => tracing::debug!(statements = n, "statement log loaded"),
            Err(e) => tracing::warn!(error = %e, "cannot load the statement log; starting empty"),
        }
        let (stop_flusher, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let flusher = tokio::spawn(async move {
            let mut every = tokio::time::interval(STATEMENT_LOG_FLUSH);
            every.tick().await;
            loop {
                tokio::select! {
                    _ = every.tick() => flush_statements(&*system).await,
                    _ = &mut stopped => break,
                }
            }
            flush_statements(&*system).await;
        });
        let mut gauges = tokio::time::interval(Duration::from_secs(1));
        let mut accept_errors = EveryMinute::default();
        let mut refusals = EveryMinute::default();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = gauges.tick() => {
                    metrics::gauge!("tablegate_connections", "state" => "open")
                        .set(open.load(Ordering::Relaxed) as f64);
                    metrics::gauge!("tablegate_connections", "state" => "session")
                        .set(admission.sessions() as f64);
                    metrics::gauge!("tablegate_connections", "state" => "starting")
                        .set(admission.starting() as f64);
                }
                accepted = self.listener.accept() => {
                    let (socket, _) = match accepted {
                        Ok(s) => s,
                        // Transient accept errors (e.g. too many open files)
                        // must not stop the server.
                        Err(e) => {
                            metrics::counter!("tablegate_connections_refused_total", "reason" => "accept_failed")
                                .increment(1);
                            let short_of_files = matches!(e.raw_os_error(), Some(23 | 24));
                            accept_errors.note(|n| tracing::warn!(
                                error = %e,
                                failed_accepts = n,
                                "cannot accept connections{}",
                                if short_of_files {
                                    ": out of file handles (raise the open-file limit, or lower max_connections)"
                                } else {
                                    ""
                                }
                            ));
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = socket.set_nodelay(true);
                    if open.load(Ordering::SeqCst) >= max_open {
                        let reason = if max_open < max_threads { "file_handles" } else { "threads" };
                        metrics::counter!("tablegate_connections_refused_total", "reason" => reason)
                            .increment(1);
                        refusals.note(|n| tracing::warn!(
                            refused = n,
                            open = max_open,
                            "refusing new connections (FATAL 53300): {}",
                            if reason == "file_handles" {
                                "the open-file limit is reached; raise it (ulimit -n, LimitNOFILE= in systemd)"
                            } else {
                                "every connection thread is taken"
                            }
                        ));
                        // Refusals are bounded too: past the cap a socket
                        // is closed unread.
                        if refusing.load(Ordering::SeqCst) < MAX_REFUSING {
                            refusing.fetch_add(1, Ordering::SeqCst);
                            let guard = ActiveGuard(refusing.clone());
                            let registry = registry.clone();
                            tokio::spawn(async move {
                                let _guard = guard;
                                refuse(socket, registry, too_many).await;
                            });
                        }
                        continue;
                    }
                    open.fetch_add(1, Ordering::SeqCst);
                    let guard = ActiveGuard(open.clone());
                    let starting = admission.start();
                    let handlers = Connection::new(self.planner.clone(), registry.clone(), self.config.auth.clone())
                        .session_defaults(&self.config.session_defaults)
                        .require_tls(self.config.tls.is_some())
                        .admission(admission.clone())
                        .analytics_pool(analytics.clone());
                    let tls = self.config.tls.clone().map(|t| t.0);
                    // Its socket leaves this runtime's reactor for the
                    // connection thread's.
                    let Ok(socket) = socket.into_std() else { continue };
                    threads.run(Job { socket, tls, handlers, guard, starting, limits: admission.limits().clone() });
                }
            }
        }
        // Idle connections end now (FATAL 57P01); busy ones after their
        // statement.
        threads.sockets.drain();
        let deadline = tokio::time::Instant::now() + self.config.shutdown_grace;
        while open.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Whatever analytics still run stop at their next yield.
        analytics.shutdown();
        let _ = stop_flusher.send(());
        let _ = flusher.await;
        Ok(())
    }
}

/// How often the statement log is written to the store.
const STATEMENT_LOG_FLUSH: Duration = Duration::from_secs(5);

async fn flush_statements(system: &dyn tablegate_store::TableStore) {
    if let Err(e) = crate::statements::statements().flush(system).await {
        tracing::warn!(error = %e, "cannot write the statement log");
    }
}

/// Descriptors kept out of the connections' budget: the storage engine's
/// files (fjall keeps a bounded cache of open table files), logs, the
/// listeners, and sockets being refused.
const RESERVED_FDS: usize = 256 + MAX_REFUSING;

/// Descriptors one connection holds: its socket and its thread's runtime
/// (epoll, wakers), as measured under the soak (bench/results).
const FDS_PER_CONNECTION: usize = 6;

/// How many connections the soft open-file limit leaves room for, and
/// the limit; `None` if it cannot be read or is unlimited.
fn connections_within_open_file_limit() -> Option<(usize, u64)> {
    let (soft, _) = rlimit::getrlimit(rlimit::Resource::NOFILE).ok()?;
    if soft == rlimit::INFINITY {
        return None;
    }
    let room = usize::try_from(soft).ok()?.saturating_sub(RESERVED_FDS);
    Some((room / FDS_PER_CONNECTION, soft))
}

/// A warning logged at most once a minute, with how many events it
/// stands for (failed accepts, refused connections).
#[derive(Default)]
struct EveryMinute {
    since_log: u64,
    logged: Option<std::time::Instant>,
}

impl EveryMinute {
    fn note(&mut self, log: impl FnOnce(u64)) {
        self.since_log += 1;
        if self
            .logged
            .is_some_and(|t| t.elapsed() < Duration::from_secs(60))
        {
            return;
        }
        log(self.since_log);
        self.since_log = 0;
        self.logged = Some(std::time::Instant::now());
    }
}

/// Bytes of responses buffered before a write reaches the socket.
///
/// pgwire's own loop keeps tokio-util's 8 KiB default: a 100-row answer
/// (~15 KB) then leaves in two `sendto`s, each a trip through the kernel's
/// loopback path. Responses are
/// flushed at every Sync/Flush/ReadyForQuery anyway, so a larger boundary
/// only bounds the memory a large result holds per connection.
const WRITE_BOUNDARY: usize = 64 * 1024;

/// One connection, start to end: pgwire's `process_socket` with a larger
/// write buffer ([`WRITE_BOUNDARY`]), which pgwire does not let us set.
/// The dispatch is pgwire's own (`process_message`, `process_error`); only
/// the loop around it is here.
async fn serve_connection(
    socket: TcpStream,
    tls: Option<pgwire::tokio::TlsAcceptor>,
    handlers: Connection,
    sockets: &Sockets,
    starting: Starting,
    limits: &Limits,
) -> std::io::Result<()> {
    use futures::{SinkExt, StreamExt};
    use pgwire::api::{ClientInfo, ErrorHandler, PgWireConnectionState, PgWireServerHandlers};
    use pgwire::messages::PgWireFrontendMessage;
    use pgwire::tokio::server::{negotiate_tls, process_error, process_message};

    // The deadline lives through startup only. A timer left in the
    // connection's runtime makes every wait for the next message a timed
    // one (an hrtimer armed and cancelled in the kernel, the timer wheel
    // turned, per statement) for the connection's first minute; without
    // one the thread waits as a PostgreSQL backend does, for as long as it
    // takes.
    let mut deadline = Box::pin(tokio::time::sleep(limits.authentication_timeout));
    let socket = tokio::select! {
        _ = &mut deadline => return Ok(()),
        _ = starting.evicted() => return Ok(()),
        s = negotiate_tls(socket, tls) => s?,
    };
    let mut starting = Some(starting);
    let mut startup_deadline = Some(deadline);
    // `None`: a direct TLS handshake without TLS configured.
    let Some(socket) = socket else {
        return Ok(());
    };
    // The same codec and buffers over a transport that can leave the
    // reactor once startup is done (see `conn_io`).
    let parts = socket.into_parts();
    // Bytes sent in plaintext after the SSLRequest must not be read as if
    // they came through TLS (as PostgreSQL refuses them since
    // CVE-2021-23214).
    if matches!(parts.io, pgwire::tokio::server::MaybeTls::Tls(_)) && !parts.read_buf.is_empty() {
        return Ok(());
    }
    let trusted = handlers.trusts().then_some(limits.max_message_bytes);
    let mut read_buf = parts.read_buf;
    let mut io = FramedParts::new(ConnIo::new(parts.io, &mut read_buf, trusted), parts.codec);
    io.read_buf = read_buf;
    io.write_buf = parts.write_buf;
    let mut socket = Framed::from_parts(io);
    socket.set_backpressure_boundary(WRITE_BOUNDARY);

    let startup = handlers.startup_handler();
    let simple = handlers.simple_query_handler();
    let extended = handlers.extended_query_handler();
    let copy = handlers.copy_handler();
    let cancel = handlers.cancel_handler();
    let errors = handlers.error_handler();
    loop {
        let starting_now = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        let msg = match (startup_deadline.as_mut(), starting.as_ref()) {
            (Some(deadline), Some(ticket)) if starting_now => tokio::select! {
                _ = deadline => None,
                _ = ticket.evicted() => None,
                m = socket.next() => m,
            },
            _ => {
                startup_deadline = None;
                socket.next().await
            }
        };
        // End of stream, a frame that does not decode, or Terminate: the
        // client is gone or leaving; dropping the socket closes it (asyncpg
        // waits for that after its Terminate). Unless the server is
        // shutting down and ended the stream itself: then the client is
        // told why, as PostgreSQL tells it.
        let msg = match msg {
            Some(Ok(msg)) => Some(msg),
            // A message the frame guard refused (too long, malformed):
            // say so before closing.
            Some(Err(e)) => {
                if let Some(refused) = crate::conn_io::refusal(&e) {
                    let _ = socket.send(fatal(refused)).await;
                }
                None
            }
            None => None,
        };
        let Some(msg) = msg else {
            if socket.get_ref().is_blocking() && sockets.draining() {
                let _ = socket.send(administrator_shutdown()).await;
            }
            break;
        };
        if matches!(msg, PgWireFrontendMessage::Terminate(_)) {
            break;
        }
        let in_extended = match socket.state() {
            PgWireConnectionState::CopyInProgress(extended) => extended,
            _ => msg.is_extended_query(),
        };
        // A CancelRequest arrives on a connection of its own, which ends
        // once it is handled.
        let is_cancel = matches!(msg, PgWireFrontendMessage::CancelRequest(_));
        if let Err(mut e) = process_message(
            msg,
            &mut socket,
            startup.clone(),
            simple.clone(),
            extended.clone(),
            copy.clone(),
            cancel.clone(),
        )
        .await
        {
            errors.on_error(&socket, &mut e);
            // FATAL ends the session, as in PostgreSQL.
            let fatal = e.is_fatal();
            process_error(&mut socket, e, in_extended).await?;
            if fatal {
                break;
            }
        }
        if is_cancel {
            break;
        }
        if startup_deadline.is_some()
            && matches!(socket.state(), PgWireConnectionState::ReadyForQuery)
        {
            // Startup is over (authenticated, ReadyForQuery sent): the
            // deadline and the starting ticket go, messages may be as long
            // as the limit after authentication, and from here a plain TCP
            // connection waits in blocking reads.
            startup_deadline = None;
            starting = None;
            socket.get_mut().authenticated(limits.max_message_bytes);
            socket.get_mut().make_blocking(sockets)?;
        }
        // The frame guard follows the boundary pgwire decoded to.
        let mut buffered = std::mem::take(socket.read_buffer_mut());
        let untyped = matches!(socket.state(), PgWireConnectionState::AwaitingStartup);
        socket.get_mut().resync(&mut buffered, untyped);
        *socket.read_buffer_mut() = buffered;
    }
    Ok(())
}

/// FATAL 57P01: the session ends because the server is shutting down.
fn administrator_shutdown() -> pgwire::messages::PgWireBackendMessage {
    fatal(crate::sqlstate::PgError::admin_shutdown())
}

/// An error that ends the session.
fn fatal(e: crate::sqlstate::PgError) -> pgwire::messages::PgWireBackendMessage {
    let mut info = crate::sqlstate::error_info(e);
    info.severity = "FATAL".to_owned();
    pgwire::messages::PgWireBackendMessage::ErrorResponse(info.into())
}

/// One accepted connection on its way to a connection thread.
struct Job {
    socket: std::net::TcpStream,
    tls: Option<pgwire::tokio::TlsAcceptor>,
    handlers: Connection,
    guard: ActiveGuard,
    starting: Starting,
    limits: Limits,
}

/// The threads connections run on: one thread, with its own
/// single-threaded tokio runtime, per connection (PostgreSQL's process per
/// connection, as a thread).
///
/// Why a thread each: a point lookup is a few microseconds of work, and
/// what it costs around that work is wake-ups. A client's send wakes the
/// thread that serves it; when that thread serves other clients too, it is
/// often asleep on the other core, and the wake-up is an inter-processor
/// interrupt, which on this VM costs the client's and the server's core
/// several microseconds. With one thread per connection the kernel keeps
/// each client and its thread on one core, as it does a PostgreSQL backend,
/// and the rescheduling interrupts are gone (figures:
/// `bench/results/gateway-notes.md`).
///
/// After startup a plain TCP connection's thread waits for the next
/// request in a blocking read instead of the runtime's `epoll_wait`
/// (`conn_io`), so the kernel wakes it straight from the socket.
///
/// Deliberately limited: a thread per connection holds an 8 MiB stack
/// reservation (address space; only the pages touched are memory), and
/// the admission budgets bound how many there are. Analytics (DataFusion)
/// run on their own pool. A write blocks the connection's
/// thread through its commit (`tablegate_store::write_on_this_thread`);
/// scans that may run long still go to the runtime's blocking pool, so a
/// cancel is answered while they run.
struct ConnectionThreads {
    /// Flipped when the server stops: every connection still open ends.
    stop: tokio::sync::watch::Sender<bool>,
    /// Connections in blocking reads, which the flag cannot reach: their
    /// sockets are shut down instead.
    sockets: Sockets,
}

impl ConnectionThreads {
    fn new() -> ConnectionThreads {
        ConnectionThreads {
            stop: tokio::sync::watch::channel(false).0,
            sockets: Sockets::default(),
        }
    }

    fn run(&self, job: Job) {
        let mut stop = self.stop.subscribe();
        let sockets = self.sockets.clone();
        // The same stack size as the main runtime's threads: planning
        // recurses over statement trees.
        let spawned = std::thread::Builder::new()
            .name("tablegate-conn".to_owned())
            .stack_size(8 << 20)
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!("no runtime for a connection: {e}");
                        return;
                    }
                };
                // Nothing else runs here: a write may block this thread
                // through its commit instead of taking two thread hand-offs.
                tablegate_store::write_on_this_thread();
                runtime.block_on(async move {
                    tokio::select! {
                        _ = job.serve(&sockets) => {}
                        // The server stopped (after the shutdown grace):
                        // dropping the connection closes its socket.
                        _ = stop.wait_for(|stopped| *stopped) => {}
                    }
                });
            });
        // No thread (the process is at its thread limit): the connection is
        // dropped with the closure, and the client sees its socket closed.
        if let Err(e) = spawned {
            tracing::warn!("no thread for a connection: {e}");
        }
    }
}

impl Drop for ConnectionThreads {
    fn drop(&mut self) {
        self.stop.send_replace(true);
        self.sockets.stop_all();
    }
}

impl Job {
    async fn serve(self, sockets: &Sockets) {
        let _guard = self.guard;
        let hangup = self
            .socket
            .try_clone()
            .ok()
            .and_then(|s| TcpStream::from_std(s).ok())
            .map(|watch| {
                tokio::spawn(cancel_on_hangup(
                    watch,
                    self.handlers.cancel_signal(),
                    sockets.clone(),
                ))
            });
        let Ok(socket) = TcpStream::from_std(self.socket) else {
            return;
        };
        // Protocol errors end this connection only.
        let _ = serve_connection(
            socket,
            self.tls,
            self.handlers,
            sockets,
            self.starting,
            &self.limits,
        )
        .await;
        if let Some(h) = hangup {
            h.abort();
        }
    }
}

/// Cancels the session's running statement when the client hangs up
/// (its FIN or RST, seen as EPOLLRDHUP on a second descriptor of the
/// socket, even behind bytes not yet read), so a statement stops working
/// for a client that is gone (PostgreSQL's client_connection_check_interval
/// does the same). Runs beside the connection on its thread; reading
/// nothing, it never competes with the protocol for bytes.
async fn cancel_on_hangup(
    watch: TcpStream,
    signal: Arc<crate::cancel::CancelSignal>,
    sockets: Sockets,
) {
    use tokio::io::Interest;
    loop {
        let Ok(ready) = watch.ready(Interest::READABLE).await else {
            return;
        };
        if ready.is_read_closed() {
            // A graceful shutdown closes reads itself, and lets running
            // statements finish.
            if !sockets.draining() {
                signal.hang_up();
            }
            return;
        }
        // Bytes arrived (the connection reads them): forget this readiness
        // and wait for the next event, which a hang-up also raises.
        let _ = watch.try_io(Interest::READABLE, || {
            Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
        });
    }
}

struct ActiveGuard(Arc<AtomicUsize>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Sockets answered by [`refuse`] at once; past it a socket is closed
/// unread (each holds a descriptor for up to its timeout).
const MAX_REFUSING: usize = 256;

/// Answers a client the server has no thread for: declines SSL if asked,
/// reads the startup packet, serves it if it is a CancelRequest (cancels
/// are never refused), else sends FATAL 53300 and closes.
async fn refuse(mut socket: TcpStream, registry: Arc<CancelRegistry>, why: &str) {
    let work = async {
        loop {
            let len = socket.read_i32().await? as usize;
            if !(8..=crate::admission::MAX_STARTUP_MESSAGE_BYTES).contains(&len) {
                return Ok::<_, std::io::Error>(());
            }
            let mut body = vec![0u8; len - 4];
            socket.read_exact(&mut body).await?;
            let code = u32::from_be_bytes(body[..4].try_into().expect("4 bytes"));
            // SSLRequest / GSSENCRequest: decline, the startup packet follows.
            if code == 80_877_103 || code == 80_877_104 {
                socket.write_all(b"N").await?;
                continue;
            }
            if code == 80_877_102 && body.len() >= 12 {
                let pid = i32::from_be_bytes(body[4..8].try_into().expect("4 bytes"));
                let key = pgwire::messages::startup::SecretKey::Bytes(body[8..].to_vec().into());
                registry.cancel(pid, &key);
                return Ok(());
            }
            break;
        }
        let mut fields = Vec::new();
        for (tag, value) in [
            (b'S', "FATAL"),
            (b'V', "FATAL"),
            (b'C', "53300"),
            (b'M', why),
        ] {
            fields.push(tag);
            fields.extend_from_slice(value.as_bytes());
            fields.push(0);
        }
        fields.push(0);
        let mut msg = vec![b'E'];
        msg.extend_from_slice(&((fields.len() + 4) as i32).to_be_bytes());
        msg.extend_from_slice(&fields);
        socket.write_all(&msg).await?;
        socket.shutdown().await
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), work).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cancel::CancelSignal;
    use pgwire::messages::startup::SecretKey;

    /// Over every limit, a CancelRequest is still served, and anything
    /// else gets FATAL 53300.
    #[tokio::test]
    async fn a_refused_socket_still_delivers_its_cancel() {
        let registry = Arc::new(CancelRegistry::default());
        let signal = Arc::new(CancelSignal::default());
        registry.register(4242, SecretKey::I32(7), signal.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let mut cancel = 16u32.to_be_bytes().to_vec();
        cancel.extend_from_slice(&80_877_102u32.to_be_bytes());
        cancel.extend_from_slice(&4242i32.to_be_bytes());
        cancel.extend_from_slice(&7i32.to_be_bytes());
        client.write_all(&cancel).await.unwrap();
        refuse(server, registry.clone(), "busy").await;
        assert_eq!(signal.generation(), 1, "the cancel was delivered");

        let mut client = TcpStream::connect(addr).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let mut startup = vec![0, 0, 0, 9];
        startup.extend_from_slice(&196_608u32.to_be_bytes());
        startup.push(0);
        client.write_all(&startup).await.unwrap();
        refuse(server, registry, "busy").await;
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        let text = String::from_utf8_lossy(&got);
        assert!(text.contains("53300") && text.contains("busy"), "{text:?}");
    }
}
