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

use bytes::BytesMut;
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
    pub(crate) fn new(
        io: MaybeTls,
        buffered: &mut BytesMut,
        trusted_limit: Option<usize>,
    ) -> ConnIo {
        let mut frames = Frames {
            trusted_limit,
            ..Frames::default()
        };
        // Already in the codec's buffer: checked like any read, and cut
        // before a refused message.
        if let Some(cut) = frames.check_buffered(buffered) {
            buffered.truncate(cut);
        }
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
    pub(crate) fn resync(&mut self, buffered: &mut BytesMut, untyped: bool) {
        self.frames.body_left = 0;
        self.frames.header_len = 0;
        self.frames.capturing = false;
        self.frames.untyped = untyped;
        // A refused message is cut from the buffer; the next read fails.
        if let Some(cut) = self.frames.check_buffered(buffered) {
            buffered.truncate(cut);
        }
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
    /// Set once a message was refused: every later read fails too.
    refused: Option<Refusal>,
    /// The current message's type (0 for an untyped one) and, for types
    /// with a layout to check, its body so far.
    tag: u8,
    body: Vec<u8>,
    capturing: bool,
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
            tag: 0,
            body: Vec::new(),
            capturing: false,
        }
    }
}

/// Why the guard refused a message. It surfaces as an I/O error (it comes
/// from the transport); [`refusal`] turns it back into the client's.
#[derive(Debug, Clone)]
enum Refusal {
    /// A length over the limit, refused when its header arrives.
    TooLarge { length: usize, limit: usize },
    /// A body that does not have its type's layout (PostgreSQL's "invalid
    /// message format"): pgwire's decoders would read past it or panic.
    Malformed(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::TooLarge { length, limit } => write!(
                f,
                "message of {length} bytes exceeds the limit of {limit} bytes"
            ),
            Refusal::Malformed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for Refusal {}

/// The client's error for a message the guard refused, if `e` is one.
pub(crate) fn refusal(e: &pgwire::error::PgWireError) -> Option<crate::sqlstate::PgError> {
    let r = match e {
        pgwire::error::PgWireError::IoError(io) => io.get_ref()?.downcast_ref::<Refusal>()?.clone(),
        // pgwire's own per-message limits (the startup packet's).
        pgwire::error::PgWireError::MessageTooLarge(limit, length) => Refusal::TooLarge {
            length: *length,
            limit: *limit,
        },
        _ => return None,
    };
    Some(match r {
        Refusal::TooLarge { limit, .. } => {
            let hint = if limit == crate::admission::MAX_STARTUP_MESSAGE_BYTES {
                "messages before authentication are limited to 10,000 bytes"
            } else {
                "the server's max_message_bytes setting limits messages; send large data with COPY, in several statements"
            };
            crate::sqlstate::PgError::program_limit_exceeded(r.to_string()).hint(hint)
        }
        Refusal::Malformed(_) => crate::sqlstate::PgError::protocol_violation(r.to_string()),
    })
}

/// Checks a frontend message's body against its type's layout (the
/// protocol's "Message Formats"): every count, length and string ends
/// inside the body and the last one ends the body. `tag` 0 is an untyped
/// message, whose body starts with its code. CopyData and the password
/// family are free-form (SCRAM's messages are checked where they are
/// read).
fn well_formed(tag: u8, body: &[u8]) -> Result<(), String> {
    struct Reader<'a>(&'a [u8]);
    impl Reader<'_> {
        fn take(&mut self, n: usize) -> Option<&[u8]> {
            let (head, tail) = (self.0.get(..n)?, self.0.get(n..)?);
            self.0 = tail;
            Some(head)
        }
        fn cstring(&mut self) -> Option<()> {
            let end = self.0.iter().position(|&b| b == 0)?;
            self.take(end + 1).map(|_| ())
        }
        fn u16(&mut self) -> Option<usize> {
            self.take(2)
                .map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
        }
        fn i32(&mut self) -> Option<i32> {
            self.take(4)
                .map(|b| i32::from_be_bytes(b.try_into().expect("4 bytes")))
        }
        fn subtype(&mut self, what: &str) -> Result<(), String> {
            match self.take(1) {
                Some([b'S' | b'P']) => Ok(()),
                Some([b]) => Err(format!("invalid {what} message subtype {b}")),
                _ => Err("invalid message format".to_owned()),
            }
        }
    }
    let mut r = Reader(body);
    let ok = match tag {
        // Untyped: SSLRequest, GSSENCRequest, CancelRequest, startup.
        0 => match r.i32() {
            Some(80_877_103 | 80_877_104) => Some(r.0.is_empty()),
            // The process id and a secret key of 4 to 256 bytes.
            Some(80_877_102) => {
                let n = r.0.len();
                r.take(n).map(|_| (8..=260).contains(&n))
            }
            Some(version) if version >> 16 == 3 => {
                // Name/value pairs, then a terminating NUL as the last byte.
                while r.0.len() > 1 {
                    if r.cstring().is_none() || r.cstring().is_none() {
                        return Err(
                            "invalid startup packet layout: expected terminator as last byte"
                                .to_owned(),
                        );
                    }
                }
                Some(r.take(1) == Some(&[0][..]))
            }
            // pgwire refuses other protocol versions itself.
            _ => return Ok(()),
        },
        b'Q' | b'f' => r.cstring().map(|()| true),
        b'P' => (|| {
            r.cstring()?;
            r.cstring()?;
            let n = r.u16()?;
            r.take(n * 4).map(|_| true)
        })(),
        b'B' => (|| {
            r.cstring()?;
            r.cstring()?;
            let formats = r.u16()?;
            r.take(formats * 2)?;
            for _ in 0..r.u16()? {
                match r.i32()? {
                    -1 => {}
                    n => {
                        r.take(usize::try_from(n).ok()?)?;
                    }
                }
            }
            let results = r.u16()?;
            r.take(results * 2).map(|_| true)
        })(),
        b'D' => {
            r.subtype("DESCRIBE")?;
            r.cstring().map(|()| true)
        }
        b'C' => {
            r.subtype("CLOSE")?;
            r.cstring().map(|()| true)
        }
        b'E' => r.cstring().and_then(|()| r.i32()).map(|_| true),
        b'H' | b'S' | b'X' | b'c' => Some(true),
        b'd' | b'p' => return Ok(()),
        other => return Err(format!("invalid frontend message type {other}")),
    };
    match ok {
        Some(true) if r.0.is_empty() => Ok(()),
        _ => Err("invalid message format".to_owned()),
    }
}

impl Frames {
    /// Follows `bytes`, just read; an error if a message in them is
    /// refused (a header announcing a length over the limit, or a body
    /// without its type's layout).
    fn check(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.scan(bytes).map_err(|_| self.error())
    }

    /// Follows `bytes`, already in the codec's buffer and starting at a
    /// message boundary; if a message in them is refused, the length of
    /// what comes before it (the caller keeps only that, so the codec
    /// never decodes the refused message, and the next read fails).
    fn check_buffered(&mut self, bytes: &[u8]) -> Option<usize> {
        // Refused earlier: the buffer was cut then (or the refused bytes
        // never reached it), so all of it comes before the refusal.
        if self.refused.is_some() {
            return None;
        }
        self.scan(bytes).err()
    }

    /// [`Frames::check`]'s work; the error is where the refused message
    /// starts in `bytes` (0 if it started in an earlier read).
    fn scan(&mut self, bytes: &[u8]) -> Result<(), usize> {
        if self.refused.is_some() {
            return Err(0);
        }
        let mut at = 0;
        // Where the message being followed started in `bytes`.
        let mut start = 0;
        while at < bytes.len() {
            if self.body_left > 0 {
                let n = self.body_left.min(bytes.len() - at);
                if self.capturing {
                    self.body.extend_from_slice(&bytes[at..at + n]);
                }
                self.body_left -= n;
                at += n;
                if self.body_left == 0 {
                    self.finish().map_err(|()| start)?;
                }
                continue;
            }
            // Untyped: length (4) and code (4); typed: type (1), length (4).
            let want = if self.untyped { 8 } else { 5 };
            if self.header_len == 0 {
                start = at;
            }
            let n = (want - self.header_len).min(bytes.len() - at);
            self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[at..at + n]);
            self.header_len += n;
            at += n;
            if self.header_len < want {
                break;
            }
            self.header_len = 0;
            let typed = usize::from(!self.untyped);
            let length =
                u32::from_be_bytes(self.header[typed..typed + 4].try_into().expect("4 bytes"))
                    as usize;
            if length > self.limit {
                self.refused = Some(Refusal::TooLarge {
                    length,
                    limit: self.limit,
                });
                return Err(start);
            }
            // The length counts itself (and an untyped message's code).
            let counted = if self.untyped { 8 } else { 4 };
            if length < counted {
                self.refused = Some(Refusal::Malformed(format!(
                    "invalid message length {length}"
                )));
                return Err(start);
            }
            self.body.clear();
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
                self.tag = 0;
                self.body.extend_from_slice(&self.header[4..8]);
            } else {
                self.tag = self.header[0];
            }
            self.capturing = !matches!(self.tag, b'd' | b'p');
            self.body_left = length - counted;
            if self.body_left == 0 {
                self.finish().map_err(|()| start)?;
            }
        }
        Ok(())
    }

    /// The current message's body is complete: checks its layout.
    fn finish(&mut self) -> Result<(), ()> {
        let checked = if self.capturing {
            well_formed(self.tag, &self.body)
        } else {
            Ok(())
        };
        // A large body's buffer is not kept for the connection's life.
        if self.body.capacity() > 64 * 1024 {
            self.body = Vec::new();
        }
        self.capturing = false;
        checked.map_err(|why| self.refused = Some(Refusal::Malformed(why)))
    }

    fn error(&self) -> io::Error {
        let refusal = self
            .refused
            .clone()
            .unwrap_or_else(|| Refusal::Malformed("invalid message format".to_owned()));
        io::Error::new(io::ErrorKind::InvalidData, refusal)
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
        if this.frames.refused.is_some() {
            return Poll::Ready(Err(this.frames.error()));
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
        (
            ConnIo::new(MaybeTls::Plain(server), &mut BytesMut::new(), None),
            client,
        )
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
        stream.extend(b"user\0abcde\0\0");
        // A Query of 9,000 bytes (under the startup limit).
        stream.extend(typed(b'Q', 9_000));
        stream.extend(vec![b'x'; 8_995]);
        stream.push(0);
        for b in &stream {
            f.check(std::slice::from_ref(b)).unwrap();
        }
        // Before authentication, 10,001 bytes is refused.
        let err = f.check(&typed(b'p', 10_001)).unwrap_err();
        assert!(err.to_string().contains("10001"), "{err}");
        assert!(f.check(b"more").is_err(), "refused for good");
        // After authentication the configured limit holds.
        let mut f = Frames::default();
        f.check(&untyped(9, 196_608)).unwrap();
        f.check(&[0]).unwrap();
        f.limit = 1 << 20;
        f.check(&typed(b'Q', 1 << 20)).unwrap();
        let mut query = vec![b'x'; (1 << 20) - 5];
        query.push(0);
        f.check(&query).unwrap();
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
        f.check(&untyped(9, 196_608)).unwrap();
        f.check(&[0]).unwrap();
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

    fn refused(frames: &mut Frames, bytes: &[u8]) -> Option<(usize, String)> {
        let cut = frames.check_buffered(bytes)?;
        Some((cut, frames.refused.clone().expect("refused").to_string()))
    }

    fn after_startup() -> Frames {
        Frames {
            untyped: false,
            limit: 1 << 20,
            ..Frames::default()
        }
    }

    fn message(tag: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![tag];
        m.extend_from_slice(&u32::try_from(body.len() + 4).unwrap().to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn well_formed_messages_pass_in_any_split() {
        let mut bind = b"portal\0stmt\0".to_vec();
        bind.extend_from_slice(&[0, 1, 0, 1]); // one format code: binary
        bind.extend_from_slice(&[0, 2]); // two values
        bind.extend_from_slice(&[0, 0, 0, 3, b'a', b'b', b'c']);
        bind.extend_from_slice(&(-1i32).to_be_bytes()); // NULL
        bind.extend_from_slice(&[0, 0]); // no result codes
        let stream = [
            message(b'P', b"s\0SELECT $1\0\0\x01\0\0\0\x19"),
            message(b'B', &bind),
            message(b'D', b"Pportal\0"),
            message(b'E', b"portal\0\0\0\0\0"),
            message(b'C', b"Sstmt\0"),
            message(b'd', b"any\0bytes"),
            message(b'H', b""),
            message(b'S', b""),
            message(b'Q', b"SELECT 1\0"),
        ]
        .concat();
        for split in [1, 2, 3, 7, stream.len()] {
            let mut f = after_startup();
            for piece in stream.chunks(split) {
                assert!(f.check(piece).is_ok(), "split {split}");
            }
        }
    }

    #[test]
    fn a_message_that_lies_is_cut_where_it_starts() {
        let good = message(b'Q', b"SELECT 1\0");
        for (bad, why) in [
            (message(b'P', b"\0"), "invalid message format"),
            (
                message(b'B', b"\0\0\0\0\0\x01\0\0\0\x09ab\0\0"),
                "invalid message format",
            ),
            (
                message(b'B', b"\0\0\0\0\0\x01\xff\xff\xff\xfe\0\0"),
                "invalid message format",
            ),
            (message(b'E', b"\0\0\0"), "invalid message format"),
            (message(b'Q', b"SELECT 1"), "invalid message format"),
            (message(b'Q', b"SELECT 1\0x"), "invalid message format"),
            (message(b'S', b"\0"), "invalid message format"),
            (message(b'D', b"X\0"), "invalid DESCRIBE message subtype 88"),
            (message(b'C', b"\0\0"), "invalid CLOSE message subtype 0"),
            (message(b'F', b""), "invalid frontend message type 70"),
            (vec![b'Q', 0, 0, 0, 3], "invalid message length 3"),
        ] {
            let mut f = after_startup();
            let stream = [good.clone(), bad, good.clone()].concat();
            assert_eq!(refused(&mut f, &stream), Some((good.len(), why.to_owned())));
            // Every later read fails.
            assert!(f.check(&good).is_err());
        }
        // Across reads: the body's end arrives in the second.
        let mut f = after_startup();
        let bad = message(b'P', b"\0\0\0\x01");
        assert!(f.check(&bad[..6]).is_ok());
        assert!(f.check(&bad[6..]).is_err());
    }

    #[test]
    fn startup_packets_are_checked_before_pgwire_reads_them() {
        let mut startup = 196_608u32.to_be_bytes().to_vec();
        startup.extend_from_slice(b"user\0me\0\0");
        let packet = |body: &[u8]| {
            let mut m = u32::try_from(body.len() + 4)
                .unwrap()
                .to_be_bytes()
                .to_vec();
            m.extend_from_slice(body);
            m
        };
        assert!(Frames::default().check(&packet(&startup)).is_ok());
        // No terminator, or a name without a value.
        let mut f = Frames::default();
        assert!(refused(&mut f, &packet(&startup[..startup.len() - 1])).is_some());
        let mut f = Frames::default();
        assert!(refused(&mut f, &packet(&[&startup[..4], b"user\0\0"].concat())).is_some());
        // A CancelRequest without its key.
        let mut cancel = 80_877_102u32.to_be_bytes().to_vec();
        cancel.extend_from_slice(&7u32.to_be_bytes());
        let mut f = Frames::default();
        assert!(refused(&mut f, &packet(&cancel)).is_some());
        cancel.extend_from_slice(&9u32.to_be_bytes());
        assert!(Frames::default().check(&packet(&cancel)).is_ok());
        // An SSLRequest with a body.
        let mut f = Frames::default();
        assert!(
            refused(
                &mut f,
                &packet(&[&80_877_103u32.to_be_bytes()[..], b"x"].concat())
            )
            .is_some()
        );
    }
}
