//! How a connection's bytes move: through tokio's reactor while the client
//! starts up (TLS, password, the startup deadline), then, for a plain TCP
//! connection, with blocking system calls on the connection's own thread.
//!
//! Why blocking: a connection thread serves one client and has nothing else
//! to wait for while the client thinks. Through the reactor, every request
//! costs an `epoll_wait` (and the runtime's turn around it) before its
//! `recvfrom`; a blocking `recvfrom` sleeps in the socket's own wait queue
//! and returns with the request, as a PostgreSQL backend's read does. The
//! response leaves with one blocking `sendto`.
//!
//! A thread blocked in a read does not see the server's flags, so
//! [`Sockets`] keeps a handle to each blocking socket:
//! - when shutdown begins, their reading side is shut down
//!   ([`Sockets::drain`]): an idle connection's read returns at once, one
//!   inside a statement finishes it and answers first, and either then ends
//!   with FATAL 57P01, as PostgreSQL's fast shutdown does;
//! - when the server stops, after the grace period, they are shut down
//!   entirely ([`Sockets::stop_all`]).
//!
//! Deliberately limited: TLS connections stay on the reactor (rustls reads
//! and writes through tokio's types), and so are not drained: they end
//! when their client leaves or when the grace period is over.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll};

use pgwire::tokio::server::MaybeTls;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes one blocking read asks for at most (a read returns what has
/// arrived). Reads land in a buffer of this size that the connection keeps,
/// then are copied into the codec's: safe Rust cannot read into the
/// codec's uninitialised spare capacity, and zeroing it for every read
/// would cost more than copying a request.
const READ_CHUNK: usize = 8 * 1024;

/// A connection's transport.
pub(crate) enum ConnIo {
    /// Through tokio's reactor: startup, and TLS for the whole connection.
    Reactor(MaybeTls),
    /// A plain TCP socket in blocking mode, after startup.
    Blocking(BlockingTcp),
    /// Only while switching from one to the other.
    Switching,
}

impl std::fmt::Debug for ConnIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConnIo::Reactor(_) => "ConnIo::Reactor",
            ConnIo::Blocking(_) => "ConnIo::Blocking",
            ConnIo::Switching => "ConnIo::Switching",
        })
    }
}

impl ConnIo {
    /// Moves a plain TCP connection off the reactor into blocking mode and
    /// registers it with `sockets` (so a server stop can end its reads).
    /// TLS connections stay as they are.
    pub(crate) fn make_blocking(&mut self, sockets: &Sockets) -> io::Result<()> {
        match std::mem::replace(self, ConnIo::Switching) {
            ConnIo::Reactor(MaybeTls::Plain(tcp)) => {
                let sock = Arc::new(tcp.into_std()?);
                sock.set_nonblocking(false)?;
                let registration = sockets.register(&sock);
                *self = ConnIo::Blocking(BlockingTcp {
                    sock,
                    chunk: vec![0; READ_CHUNK].into_boxed_slice(),
                    _registration: registration,
                });
                Ok(())
            }
            other => {
                *self = other;
                Ok(())
            }
        }
    }

    fn switching() -> io::Error {
        io::Error::other("connection transport used while switching")
    }
}

/// A blocking TCP socket served from inside a poll: every poll is ready.
pub(crate) struct BlockingTcp {
    /// Shared with [`Sockets`] (weakly) rather than duplicated: a second
    /// descriptor per connection would halve how many connections fit
    /// under the process's open-file limit.
    sock: Arc<TcpStream>,
    chunk: Box<[u8]>,
    _registration: Registration,
}

impl BlockingTcp {
    fn read(&mut self, buf: &mut ReadBuf<'_>) -> io::Result<()> {
        let want = buf.remaining().min(READ_CHUNK);
        loop {
            match (&*self.sock).read(&mut self.chunk[..want]) {
                Ok(n) => {
                    buf.put_slice(&self.chunk[..n]);
                    return Ok(());
                }
                // A signal (the server's SIGTERM handler) interrupted the
                // wait: wait again.
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }

    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        loop {
            match (&*self.sock).write(data) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => return r,
            }
        }
    }
}

impl AsyncRead for ConnIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Reactor(io) => Pin::new(io).poll_read(cx, buf),
            ConnIo::Blocking(b) => Poll::Ready(b.read(buf)),
            ConnIo::Switching => Poll::Ready(Err(ConnIo::switching())),
        }
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ConnIo::Reactor(io) => Pin::new(io).poll_write(cx, data),
            ConnIo::Blocking(b) => Poll::Ready(b.write(data)),
            ConnIo::Switching => Poll::Ready(Err(ConnIo::switching())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Reactor(io) => Pin::new(io).poll_flush(cx),
            // Writes go straight to the socket (TCP_NODELAY).
            ConnIo::Blocking(_) => Poll::Ready(Ok(())),
            ConnIo::Switching => Poll::Ready(Err(ConnIo::switching())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ConnIo::Reactor(io) => Pin::new(io).poll_shutdown(cx),
            ConnIo::Blocking(b) => Poll::Ready(match b.sock.shutdown(Shutdown::Write) {
                Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
                r => r,
            }),
            ConnIo::Switching => Poll::Ready(Err(ConnIo::switching())),
        }
    }
}

/// The server's handles to its blocking sockets, so that stopping the
/// server ends connections whose threads are blocked in a read.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sockets {
    inner: Arc<SocketsInner>,
}

#[derive(Debug, Default)]
struct SocketsInner {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Weak<TcpStream>>>,
    draining: AtomicBool,
    stopped: AtomicBool,
}

impl Sockets {
    fn register(&self, sock: &Arc<TcpStream>) -> Registration {
        let id = self.inner.next.fetch_add(1, Ordering::Relaxed);
        let mut open = self.inner.open.lock().unwrap_or_else(|e| e.into_inner());
        // Checked under the lock: a drain or stop either sees this socket
        // or has already been flagged here.
        if self.inner.stopped.load(Ordering::SeqCst) {
            let _ = sock.shutdown(Shutdown::Both);
        } else if self.inner.draining.load(Ordering::SeqCst) {
            let _ = sock.shutdown(Shutdown::Read);
        }
        open.insert(id, Arc::downgrade(sock));
        Registration {
            id,
            sockets: self.inner.clone(),
        }
    }

    /// Shutdown has begun: shuts down the reading side of every registered
    /// socket. A read returns what has already arrived, then end of stream;
    /// answers can still be written.
    pub(crate) fn drain(&self) {
        self.shut_all(&self.inner.draining, Shutdown::Read);
    }

    /// Whether [`drain`](Self::drain) was called: an end of stream is then
    /// the server's doing, not the client's.
    pub(crate) fn draining(&self) -> bool {
        self.inner.draining.load(Ordering::SeqCst)
    }

    /// Shuts down every registered socket: a blocked read returns end of
    /// stream, and its connection ends.
    pub(crate) fn stop_all(&self) {
        self.shut_all(&self.inner.stopped, Shutdown::Both);
    }

    /// Raises `flag` and shuts down `how` every registered socket, under
    /// the lock that [`register`](Self::register) checks the flags under.
    fn shut_all(&self, flag: &AtomicBool, how: Shutdown) {
        let open = self.inner.open.lock().unwrap_or_else(|e| e.into_inner());
        flag.store(true, Ordering::SeqCst);
        for sock in open.values().filter_map(Weak::upgrade) {
            let _ = sock.shutdown(how);
        }
    }
}

/// A socket's entry in [`Sockets`], removed when the connection ends.
struct Registration {
    id: u64,
    sockets: Arc<SocketsInner>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut open = self.sockets.open.lock().unwrap_or_else(|e| e.into_inner());
        open.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A connected pair: the server side as a reactor socket, the client
    /// side as a plain std socket.
    async fn pair() -> (ConnIo, TcpStream) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (ConnIo::Reactor(MaybeTls::Plain(server)), client)
    }

    #[tokio::test]
    async fn a_blocking_socket_reads_and_writes_what_the_reactor_would() {
        let sockets = Sockets::default();
        let (mut io, mut client) = pair().await;
        io.make_blocking(&sockets).unwrap();
        assert!(matches!(io, ConnIo::Blocking(_)));
        client.write_all(b"hello").unwrap();
        let mut buf = [0u8; 16];
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"hello");
        io.write_all(b"world").await.unwrap();
        io.flush().await.unwrap();
        let mut got = [0u8; 5];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"world");
        // The client leaves: end of stream, not an error.
        drop(client);
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn stopping_ends_a_read_blocked_on_an_idle_client() {
        let sockets = Sockets::default();
        let (mut io, _client) = pair().await;
        io.make_blocking(&sockets).unwrap();
        assert_eq!(sockets.inner.open.lock().unwrap().len(), 1);
        let reader = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let mut buf = [0u8; 16];
            let n = rt.block_on(io.read(&mut buf));
            drop(io);
            n
        });
        // The reader is (or soon will be) blocked in recvfrom: the idle
        // client sends nothing.
        std::thread::sleep(std::time::Duration::from_millis(100));
        sockets.stop_all();
        assert_eq!(reader.join().unwrap().unwrap(), 0, "end of stream");
        assert!(
            sockets.inner.open.lock().unwrap().is_empty(),
            "an ended connection leaves the registry"
        );
    }

    #[tokio::test]
    async fn an_ended_connection_closes_its_socket() {
        let sockets = Sockets::default();
        let (mut io, mut client) = pair().await;
        io.make_blocking(&sockets).unwrap();
        drop(io);
        // The registry's handle does not keep the socket open (if it did,
        // this read would time out).
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 1];
        assert_eq!(client.read(&mut buf).unwrap(), 0);
        sockets.stop_all();
    }

    #[tokio::test]
    async fn draining_ends_reads_but_lets_answers_out() {
        let sockets = Sockets::default();
        let (mut io, mut client) = pair().await;
        io.make_blocking(&sockets).unwrap();
        client.write_all(b"query").unwrap();
        // Let the request arrive before the drain: it is still read.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!sockets.draining());
        sockets.drain();
        assert!(sockets.draining());
        let mut buf = [0u8; 16];
        let n = io.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"query");
        io.write_all(b"answer").await.unwrap();
        let mut got = [0u8; 6];
        client.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"answer");
        // Nothing more has arrived: end of stream, not a wait.
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
        // A connection that finishes startup during the drain is drained too.
        let (mut late, _c) = pair().await;
        late.make_blocking(&sockets).unwrap();
        assert_eq!(late.read(&mut buf).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_socket_registered_after_the_stop_is_shut_down_at_once() {
        let sockets = Sockets::default();
        sockets.stop_all();
        let (mut io, _client) = pair().await;
        io.make_blocking(&sockets).unwrap();
        let mut buf = [0u8; 16];
        assert_eq!(io.read(&mut buf).await.unwrap(), 0);
    }
}
