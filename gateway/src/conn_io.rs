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
//! Every byte read also passes a frame guard ([`Frames`]) that follows the
//! message boundaries and refuses a length over the limit as soon as its
//! header arrives: 10,000 bytes before authentication, the configured
//! `max_message_bytes` after. pgwire's codec would otherwise buffer a
//! message whole (up to 1 GiB) before looking at it.
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

/// A connection's transport and its frame guard.
pub(crate) struct ConnIo {
    transport: Transport,
    frames: Frames,
}

/// How bytes move.
enum Transport {
    /// Through tokio's reactor: startup, and TLS for the whole connection.
    Reactor(MaybeTls),
    /// A plain TCP socket in blocking mode, after startup.
    Blocking(BlockingTcp),
    /// Only while switching from one to the other.
    Switching,
}

impl std::fmt::Debug for ConnIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.transport {
            Transport::Reactor(_) => "ConnIo::Reactor",
            Transport::Blocking(_) => "ConnIo::Blocking",
            Transport::Switching => "ConnIo::Switching",
        })
    }
}

impl ConnIo {
    /// A starting connection over `io`; `buffered` is what the codec has
    /// already read from it (the guard starts after those bytes). With
    /// `trusted_limit` (trust authentication, which is over once the
    /// startup packet is read), messages after the startup packet may be
    /// that long at once, so a client may pipeline its first query.
    pub(crate) fn new(io: MaybeTls, buffered: &[u8], trusted_limit: Option<usize>) -> ConnIo {
        let mut frames = Frames {
            trusted_limit,
            ..Frames::default()
        };
        // Already in the codec's buffer: checked like any read.
        let _ = frames.check(buffered);
        ConnIo {
            transport: Transport::Reactor(io),
            frames,
        }
    }

    /// Whether the connection waits in blocking reads.
    pub(crate) fn is_blocking(&self) -> bool {
        matches!(self.transport, Transport::Blocking(_))
    }

    /// A message was decoded: what is still buffered (`buffered`) starts at
    /// the next message as pgwire sees it. pgwire's decoders read some
    /// messages up to a NUL rather than to their declared length, so the
    /// guard follows pgwire's boundaries, not only the declared ones: a
    /// client cannot hide a long length from the guard inside a message
    /// that declares more than it holds.
    pub(crate) fn resync(&mut self, buffered: &[u8], untyped: bool) {
        self.frames.body_left = 0;
        self.frames.header_len = 0;
        self.frames.untyped = untyped;
        // A refusal found here fails the next read.
        let _ = self.frames.check(buffered);
    }

    /// Authentication is over: messages may be up to `limit` bytes.
    pub(crate) fn authenticated(&mut self, limit: usize) {
        self.frames.limit = limit;
    }

    /// Moves a plain TCP connection off the reactor into blocking mode and
    /// registers it with `sockets` (so a server stop can end its reads).
    /// TLS connections stay as they are.
    pub(crate) fn make_blocking(&mut self, sockets: &Sockets) -> io::Result<()> {
        match std::mem::replace(&mut self.transport, Transport::Switching) {
            Transport::Reactor(MaybeTls::Plain(tcp)) => {
                let sock = Arc::new(tcp.into_std()?);
                sock.set_nonblocking(false)?;
                let registration = sockets.register(&sock);
                self.transport = Transport::Blocking(BlockingTcp {
                    sock,
                    chunk: vec![0; READ_CHUNK].into_boxed_slice(),
                    _registration: registration,
                });
                Ok(())
            }
            other => {
                self.transport = other;
                Ok(())
            }
        }
    }

    fn switching() -> io::Error {
        io::Error::other("connection transport used while switching")
    }
}

/// Follows the frontend's message boundaries in the byte stream and
/// refuses a message longer than the limit when its header arrives.
///
/// The stream opens with untyped messages (a 4-byte length, then a code:
/// SSLRequest, GSSENCRequest, CancelRequest or the startup packet); after
/// the startup packet every message has a type byte before its length.
#[derive(Debug)]
struct Frames {
    /// Bytes of the current message's body still to come.
    body_left: usize,
    /// The header being read.
    header: [u8; 9],
    header_len: usize,
    /// Still in the untyped messages.
    untyped: bool,
    limit: usize,
    /// The limit after the startup packet under trust authentication.
    trusted_limit: Option<usize>,
    /// Set once a length was refused: every later read fails too.
    refused: Option<usize>,
}

impl Default for Frames {
    fn default() -> Self {
        Frames {
            body_left: 0,
            header: [0; 9],
            header_len: 0,
            untyped: true,
            limit: crate::admission::MAX_STARTUP_MESSAGE_BYTES,
            trusted_limit: None,
            refused: None,
        }
    }
}

/// The error a refused length surfaces as (an I/O error, since it comes
/// from the transport); [`too_large`] turns it back into the client's.
#[derive(Debug)]
struct MessageTooLarge {
    length: usize,
    limit: usize,
}

impl std::fmt::Display for MessageTooLarge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "message of {} bytes exceeds the limit of {} bytes",
            self.length, self.limit
        )
    }
}

impl std::error::Error for MessageTooLarge {}

/// The client's error for a refused message length, if `e` is one.
pub(crate) fn too_large(e: &pgwire::error::PgWireError) -> Option<crate::sqlstate::PgError> {
    let t = match e {
        pgwire::error::PgWireError::IoError(io) => {
            let t = io.get_ref()?.downcast_ref::<MessageTooLarge>()?;
            MessageTooLarge {
                length: t.length,
                limit: t.limit,
            }
        }
        // pgwire's own per-message limits (the startup packet's).
        pgwire::error::PgWireError::MessageTooLarge(limit, length) => MessageTooLarge {
            length: *length,
            limit: *limit,
        },
        _ => return None,
    };
    let hint = if t.limit == crate::admission::MAX_STARTUP_MESSAGE_BYTES {
        "messages before authentication are limited to 10,000 bytes".to_owned()
    } else {
        "the server's max_message_bytes setting limits messages; send large data with COPY, in several statements".to_owned()
    };
    Some(crate::sqlstate::PgError::new("54000", t.to_string()).hint(hint))
}

impl Frames {
    /// Follows `bytes`, just read; an error if a header in them announces
    /// a message over the limit.
    fn check(&mut self, mut bytes: &[u8]) -> io::Result<()> {
        if let Some(length) = self.refused {
            return Err(self.error(length));
        }
        while !bytes.is_empty() {
            if self.body_left > 0 {
                let n = self.body_left.min(bytes.len());
                self.body_left -= n;
                bytes = &bytes[n..];
                continue;
            }
            // Untyped: length (4) and code (4); typed: type (1), length (4).
            let want = if self.untyped { 8 } else { 5 };
            let n = (want - self.header_len).min(bytes.len());
            self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[..n]);
            self.header_len += n;
            bytes = &bytes[n..];
            if self.header_len < want {
                break;
            }
            self.header_len = 0;
            let at = usize::from(!self.untyped);
            let length =
                u32::from_be_bytes(self.header[at..at + 4].try_into().expect("4 bytes")) as usize;
            if length > self.limit {
                self.refused = Some(length);
                return Err(self.error(length));
            }
            if self.untyped {
                let code = u32::from_be_bytes(self.header[4..8].try_into().expect("4 bytes"));
                // SSLRequest and GSSENCRequest are followed by another
                // untyped message; anything else by typed ones.
                self.untyped = matches!(code, 80_877_103 | 80_877_104);
                if !self.untyped
                    && let Some(l) = self.trusted_limit
                {
                    self.limit = l;
                }
                // The length counts itself and the code, already read.
                self.body_left = length.saturating_sub(8);
            } else {
                // The length counts itself, already read.
                self.body_left = length.saturating_sub(4);
            }
        }
        Ok(())
    }

    fn error(&self, length: usize) -> io::Error {
        io::Error::new(
            io::ErrorKind::InvalidData,
            MessageTooLarge {
                length,
                limit: self.limit,
            },
        )
    }
}

/// A blocking TCP socket served from inside a poll: every poll is ready.
pub(crate) struct BlockingTcp {
    /// Shared with [`Sockets`] (weakly) rather than duplicated: each
    /// connection's one duplicate descriptor is the hang-up watcher's
    /// (`server.rs`).
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
        let this = self.get_mut();
        // A length already refused (perhaps in bytes read before this
        // transport existed) fails the read at once: no more will come.
        if let Some(length) = this.frames.refused {
            return Poll::Ready(Err(this.frames.error(length)));
        }
        let before = buf.filled().len();
        let read = match &mut this.transport {
            Transport::Reactor(io) => Pin::new(io).poll_read(cx, buf),
            Transport::Blocking(b) => Poll::Ready(b.read(buf)),
            Transport::Switching => Poll::Ready(Err(ConnIo::switching())),
        };
        match read {
            Poll::Ready(Ok(())) => Poll::Ready(this.frames.check(&buf.filled()[before..])),
            other => other,
        }
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().transport {
            Transport::Reactor(io) => Pin::new(io).poll_write(cx, data),
            Transport::Blocking(b) => Poll::Ready(b.write(data)),
            Transport::Switching => Poll::Ready(Err(ConnIo::switching())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().transport {
            Transport::Reactor(io) => Pin::new(io).poll_flush(cx),
            // Writes go straight to the socket (TCP_NODELAY).
            Transport::Blocking(_) => Poll::Ready(Ok(())),
            Transport::Switching => Poll::Ready(Err(ConnIo::switching())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().transport {
            Transport::Reactor(io) => Pin::new(io).poll_shutdown(cx),
            Transport::Blocking(b) => Poll::Ready(match b.sock.shutdown(Shutdown::Write) {
                Err(e) if e.kind() == io::ErrorKind::NotConnected => Ok(()),
                r => r,
            }),
            Transport::Switching => Poll::Ready(Err(ConnIo::switching())),
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
        (ConnIo::new(MaybeTls::Plain(server), &[], None), client)
    }

    #[tokio::test]
    async fn a_blocking_socket_reads_and_writes_what_the_reactor_would() {
        let sockets = Sockets::default();
        let (mut io, mut client) = pair().await;
        io.make_blocking(&sockets).unwrap();
        assert!(io.is_blocking());
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

    fn untyped(len: u32, code: u32) -> Vec<u8> {
        [len.to_be_bytes(), code.to_be_bytes()].concat()
    }

    fn typed(tag: u8, len: u32) -> Vec<u8> {
        [vec![tag], len.to_be_bytes().to_vec()].concat()
    }

    #[test]
    fn the_frame_guard_follows_messages_and_refuses_long_ones() {
        let mut f = Frames::default();
        // SSLRequest, then a startup packet of 20 bytes, fed byte by byte.
        let mut stream = untyped(8, 80_877_103);
        stream.extend(untyped(20, 196_608));
        stream.extend([0u8; 12]);
        // A Query of 9,000 bytes (under the startup limit).
        stream.extend(typed(b'Q', 9_000));
        stream.extend(vec![b'x'; 8_996]);
        for b in &stream {
            f.check(std::slice::from_ref(b)).unwrap();
        }
        // Before authentication, 10,001 bytes is refused.
        let err = f.check(&typed(b'p', 10_001)).unwrap_err();
        assert!(err.to_string().contains("10001"), "{err}");
        assert!(f.check(b"more").is_err(), "refused for good");
        // After authentication the configured limit holds.
        let mut f = Frames::default();
        f.check(&untyped(8, 196_608)).unwrap();
        f.limit = 1 << 20;
        f.check(&typed(b'Q', 1 << 20)).unwrap();
        f.check(&vec![0u8; (1 << 20) - 4]).unwrap();
        assert!(f.check(&typed(b'Q', (1 << 20) + 1)).is_err());
        // A startup packet claiming 1 GiB.
        let mut f = Frames::default();
        assert!(f.check(&untyped(1 << 30, 196_608)).is_err());
        // Resynchronised at a boundary pgwire chose (a startup packet that
        // declared more than it held), the guard sees the header hidden in
        // the declared remainder.
        let mut f = Frames::default();
        f.check(&untyped(10_000, 196_608)).unwrap();
        f.body_left = 0;
        f.header_len = 0;
        f.untyped = false;
        assert!(f.check(&typed(b'Q', 0x3fff_fff0)).is_err());
        // Under trust, a query may follow the startup packet at once.
        let mut f = Frames {
            trusted_limit: Some(1 << 20),
            ..Frames::default()
        };
        f.check(&untyped(8, 196_608)).unwrap();
        f.check(&typed(b'Q', 900_000)).unwrap();
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
