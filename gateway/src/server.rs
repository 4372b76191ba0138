//! The listener: accepts sockets, runs each connection as a task on one of
//! the connection threads (one single-threaded runtime per core), refuses
//! connections over the limit with SQLSTATE 53300 (after reading the
//! client's startup packet, as PostgreSQL does, so the client shows the
//! error instead of a dropped socket), and shuts down gracefully: on the
//! shutdown signal it stops accepting and waits for connections to finish
//! their statements, up to a grace period.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tablegate_planner::Planner;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::auth::AuthMode;
use crate::cancel::CancelRegistry;
use crate::handler::Connection;

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Most concurrent connections.
    pub max_connections: usize,
    /// How long shutdown waits for connections to finish.
    pub shutdown_grace: Duration,
    /// How clients authenticate.
    pub auth: AuthMode,
    /// TLS (then required for every connection).
    pub tls: Option<crate::tls::Tls>,
    /// Bytes one session's analytics engine may hold.
    pub engine_memory: usize,
    /// Session settings every connection starts with (and RESET returns
    /// to), e.g. `tablegate.page_size`; checked by [`Server::bind`].
    pub session_defaults: Vec<(String, String)>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            max_connections: 100,
            shutdown_grace: Duration::from_secs(10),
            auth: AuthMode::Trust,
            tls: None,
            engine_memory: crate::analytics::MEMORY_LIMIT,
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
        if let Err(e) = crate::session::Session::with_defaults(&config.session_defaults) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("invalid setting: {}", e.message),
            ));
        }
        if matches!(config.auth, AuthMode::Trust) && !addr.ip().is_loopback() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "refusing to listen on {addr} with trust authentication: trust is allowed on loopback addresses only (use --auth scram)"
                ),
            ));
        }
        let listener = TcpListener::bind(addr).await?;
        Ok(Server {
            listener,
            planner,
            config,
        })
    }

    /// The address actually bound (useful with port 0).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes, then drains connections.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> std::io::Result<()> {
        let active = Arc::new(AtomicUsize::new(0));
        let registry = Arc::new(CancelRegistry::default());
        // Analytics run on the runtime `run` is called from (multi-threaded
        // in the binary), so DataFusion's partitions use every core.
        let analytics = tokio::runtime::Handle::current();
        let threads = ConnectionThreads::start()?;
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                accepted = self.listener.accept() => {
                    let (socket, _) = match accepted {
                        Ok(s) => s,
                        // Transient accept errors (e.g. too many open files)
                        // must not stop the server.
                        Err(_) => {
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = socket.set_nodelay(true);
                    if active.load(Ordering::SeqCst) >= self.config.max_connections {
                        tokio::spawn(refuse(socket));
                        continue;
                    }
                    active.fetch_add(1, Ordering::SeqCst);
                    let guard = ActiveGuard(active.clone());
                    let handlers = Connection::new(self.planner.clone(), registry.clone(), self.config.auth.clone())
                        .session_defaults(&self.config.session_defaults)
                        .require_tls(self.config.tls.is_some())
                        .engine_memory(self.config.engine_memory)
                        .analytics_runtime(analytics.clone());
                    let tls = self.config.tls.clone().map(|t| t.0);
                    // Its socket leaves this runtime's reactor for the
                    // connection thread's.
                    let Ok(socket) = socket.into_std() else { continue };
                    threads.run(Job { socket, tls, handlers, guard });
                }
            }
        }
        let deadline = tokio::time::Instant::now() + self.config.shutdown_grace;
        while active.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }
}

/// Bytes of responses buffered before a write reaches the socket.
///
/// pgwire's own loop keeps tokio-util's 8 KiB default: a 100-row answer
/// (~15 KB) then leaves in two `sendto`s, each a trip through the kernel's
/// loopback path, about a tenth of a range query's CPU. Responses are
/// flushed at every Sync/Flush/ReadyForQuery anyway, so a larger boundary
/// only bounds the memory a large result holds per connection.
const WRITE_BOUNDARY: usize = 64 * 1024;

/// How long a client has to finish startup (TLS, password), as in pgwire.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// One connection, start to end: pgwire's `process_socket` with a larger
/// write buffer ([`WRITE_BOUNDARY`]), which pgwire does not let us set.
/// The dispatch is pgwire's own (`process_message`, `process_error`); only
/// the loop around it is here.
async fn serve_connection(
    socket: TcpStream,
    tls: Option<pgwire::tokio::TlsAcceptor>,
    handlers: Connection,
) -> std::io::Result<()> {
    use futures::StreamExt;
    use pgwire::api::{ClientInfo, ErrorHandler, PgWireConnectionState, PgWireServerHandlers};
    use pgwire::messages::PgWireFrontendMessage;
    use pgwire::tokio::server::{negotiate_tls, process_error, process_message};

    let startup_deadline = tokio::time::sleep(STARTUP_TIMEOUT);
    tokio::pin!(startup_deadline);
    let socket = tokio::select! {
        _ = &mut startup_deadline => return Ok(()),
        s = negotiate_tls(socket, tls) => s?,
    };
    // `None`: a direct TLS handshake without TLS configured.
    let Some(mut socket) = socket else {
        return Ok(());
    };
    socket.set_backpressure_boundary(WRITE_BOUNDARY);

    let startup = handlers.startup_handler();
    let simple = handlers.simple_query_handler();
    let extended = handlers.extended_query_handler();
    let copy = handlers.copy_handler();
    let cancel = handlers.cancel_handler();
    let errors = handlers.error_handler();
    loop {
        let starting = matches!(
            socket.state(),
            PgWireConnectionState::AwaitingStartup
                | PgWireConnectionState::AuthenticationInProgress
        );
        let msg = if starting {
            tokio::select! {
                _ = &mut startup_deadline => None,
                m = socket.next() => m,
            }
        } else {
            socket.next().await
        };
        // End of stream, a frame that does not decode, or Terminate: the
        // client is gone or leaving; dropping the socket closes it (asyncpg
        // waits for that after its Terminate).
        let Some(Ok(msg)) = msg else { break };
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
    }
    Ok(())
}

/// One accepted connection on its way to a connection thread.
struct Job {
    socket: std::net::TcpStream,
    tls: Option<pgwire::tokio::TlsAcceptor>,
    handlers: Connection,
    guard: ActiveGuard,
}

/// The threads connections run on: one single-threaded tokio runtime per
/// core, connections dealt out in turn.
///
/// Why not the multi-threaded runtime: a point lookup is a few
/// microseconds of work, and the work-stealing scheduler's hand-offs and
/// wake-ups of idle workers (futex, inter-processor interrupts) cost as
/// much again. Measured with 4 pgbench clients on 2 cores (server CPU from
/// /proc per prepared point lookup, 5 paired runs): 16–21 µs with these
/// threads against 18–24 µs on the multi-threaded runtime, 16% more
/// lookups per second on average; one runtime for everything was 15 µs
/// but leaves a core idle under load. Deliberately
/// limited: a connection stays on its thread, so two busy sessions dealt
/// to the same thread share one core while another may idle. Analytics
/// (DataFusion) run on the shared multi-threaded runtime, and store reads
/// that may block run on each runtime's blocking pool, as before.
struct ConnectionThreads {
    queues: Vec<tokio::sync::mpsc::UnboundedSender<Job>>,
    next: std::cell::Cell<usize>,
}

impl ConnectionThreads {
    fn start() -> std::io::Result<ConnectionThreads> {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut queues = Vec::with_capacity(n);
        for i in 0..n {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Job>();
            // The same stack size as the main runtime's threads: planning
            // recurses over statement trees.
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_stack_size(8 << 20)
                .build()?;
            std::thread::Builder::new()
                .name(format!("tablegate-conn-{i}"))
                .stack_size(8 << 20)
                .spawn(move || {
                    runtime.block_on(async move {
                        while let Some(job) = rx.recv().await {
                            tokio::spawn(job.serve());
                        }
                    });
                    // The server stopped: dropping the runtime ends the
                    // connections still open (after the shutdown grace).
                })?;
            queues.push(tx);
        }
        Ok(ConnectionThreads {
            queues,
            next: std::cell::Cell::new(0),
        })
    }

    fn run(&self, job: Job) {
        let i = self.next.get();
        self.next.set((i + 1) % self.queues.len());
        // A send fails only if the thread is gone (it panicked): the
        // connection is dropped, the client sees it closed.
        let _ = self.queues[i].send(job);
    }
}

impl Job {
    async fn serve(self) {
        let _guard = self.guard;
        let Ok(socket) = TcpStream::from_std(self.socket) else {
            return;
        };
        // Protocol errors end this connection only.
        let _ = serve_connection(socket, self.tls, self.handlers).await;
    }
}

struct ActiveGuard(Arc<AtomicUsize>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Answers an over-limit client with FATAL 53300: declines SSL if asked,
/// reads the startup packet, sends the error, closes.
async fn refuse(mut socket: TcpStream) {
    let work = async {
        loop {
            let len = socket.read_i32().await? as usize;
            if !(8..=10_000).contains(&len) {
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
            break;
        }
        let mut fields = Vec::new();
        for (tag, value) in [
            (b'S', "FATAL"),
            (b'V', "FATAL"),
            (b'C', "53300"),
            (b'M', "sorry, too many clients already"),
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
    let _ = tokio::time::timeout(Duration::from_secs(5), work).await;
}
