//! Admission control: which sockets get a connection thread, and which
//! authenticated clients get a session slot.
//!
//! Two separate budgets, so that clients that never finish starting up
//! cannot lock real ones out:
//! - **Starting connections** (accepted, not yet authenticated) are capped
//!   at [`Limits::max_starting`]. When the cap is full, a new connection
//!   evicts the *oldest* starting one: a real client finishes its startup
//!   in milliseconds, so the ones evicted are those that have stalled
//!   longest. Every starting connection also ends at
//!   [`Limits::authentication_timeout`] (PostgreSQL's
//!   `authentication_timeout`).
//! - **Session slots** ([`Limits::max_connections`]) are counted after
//!   authentication: the slot is taken when the startup's ReadyForQuery
//!   is about to leave ([`SlotGate`]). A client refused there gets FATAL
//!   53300 after AuthenticationOk, as PostgreSQL sends it. The last
//!   [`Limits::reserved_connections`] slots are kept for the users named in
//!   [`Limits::reserved_for`] (PostgreSQL's
//!   `superuser_reserved_connections`), so an operator can always get in.
//!
//! Cancel requests are never refused: over either budget the listener
//! still reads the first packet and serves a CancelRequest (`server`).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Sink;
use parking_lot::Mutex;
use pgwire::api::{ClientInfo, PgWireConnectionState, SessionExtensions};
use pgwire::messages::response::TransactionStatus;
use pgwire::messages::startup::SecretKey;
use pgwire::messages::{PgWireBackendMessage, ProtocolVersion};
use pgwire::tokio::tokio_rustls::rustls::pki_types::CertificateDer;
use tokio::sync::Notify;

/// The listener's budgets.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Most authenticated sessions at once (reserved ones included).
    pub max_connections: usize,
    /// Slots of `max_connections` only users in `reserved_for` may take.
    pub reserved_connections: usize,
    /// Who may take a reserved slot.
    pub reserved_for: Vec<String>,
    /// Most connections still starting up at once; more evict the oldest.
    pub max_starting: usize,
    /// How long a connection may take to authenticate.
    pub authentication_timeout: Duration,
    /// Largest message accepted after authentication, in bytes (before
    /// it, 10,000 bytes, as PostgreSQL caps its startup packet).
    pub max_message_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 100,
            reserved_connections: 3,
            reserved_for: vec!["tablegate".to_owned()],
            max_starting: 64,
            authentication_timeout: Duration::from_secs(60),
            max_message_bytes: 64 << 20,
        }
    }
}

/// Largest message before authentication (PostgreSQL's startup packet
/// limit, `MAX_STARTUP_PACKET_LENGTH`).
pub const MAX_STARTUP_MESSAGE_BYTES: usize = 10_000;

/// The server's admission state.
#[derive(Debug)]
pub struct Admission {
    limits: Limits,
    sessions: AtomicUsize,
    starting: Mutex<BTreeMap<u64, Arc<Notify>>>,
    next: AtomicU64,
}

impl Admission {
    /// Admission under `limits`.
    pub fn new(limits: Limits) -> Arc<Admission> {
        Arc::new(Admission {
            limits,
            sessions: AtomicUsize::new(0),
            starting: Mutex::new(BTreeMap::new()),
            next: AtomicU64::new(0),
        })
    }

    /// The budgets.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Authenticated sessions now.
    pub fn sessions(&self) -> usize {
        self.sessions.load(Ordering::SeqCst)
    }

    /// Connections starting up now.
    pub fn starting(&self) -> usize {
        self.starting.lock().len()
    }

    /// Registers a new connection as starting; evicts the oldest starting
    /// one when the cap is full.
    pub fn start(self: &Arc<Self>) -> Starting {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let evicted = Arc::new(Notify::new());
        let mut starting = self.starting.lock();
        while starting.len() >= self.limits.max_starting.max(1) {
            let Some((_, oldest)) = starting.pop_first() else {
                break;
            };
            // A stored permit: the connection sees it at its next wait.
            oldest.notify_one();
        }
        starting.insert(id, evicted.clone());
        Starting {
            admission: self.clone(),
            id,
            evicted,
        }
    }

    /// A session slot for `user`, if one is free to them.
    pub fn take_slot(self: &Arc<Self>, user: &str) -> Option<SessionSlot> {
        let reserved = self.limits.reserved_for.iter().any(|u| u == user);
        let limit = if reserved {
            self.limits.max_connections
        } else {
            self.limits
                .max_connections
                .saturating_sub(self.limits.reserved_connections)
        };
        self.sessions
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()?;
        Some(SessionSlot(self.clone()))
    }
}

/// A connection still starting up; dropping it leaves the budget.
#[derive(Debug)]
pub struct Starting {
    admission: Arc<Admission>,
    id: u64,
    evicted: Arc<Notify>,
}

impl Starting {
    /// Completes when a newer connection evicted this one.
    pub async fn evicted(&self) {
        self.evicted.notified().await;
    }
}

impl Drop for Starting {
    fn drop(&mut self) {
        self.admission.starting.lock().remove(&self.id);
    }
}

/// An authenticated session's slot; dropping it frees the slot.
#[derive(Debug)]
pub struct SessionSlot(Arc<Admission>);

impl Drop for SessionSlot {
    fn drop(&mut self) {
        self.0.sessions.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The startup's client, seen through admission: when the ReadyForQuery
/// that ends authentication is about to be sent, a session slot is taken
/// into `slot`; without one the message is withheld and `refused` set, and
/// the startup handler answers FATAL 53300 instead.
pub struct SlotGate<'a, C> {
    /// The real client.
    pub inner: &'a mut C,
    /// Where slots come from.
    pub admission: &'a Arc<Admission>,
    /// Where the session keeps its slot.
    pub slot: &'a Mutex<Option<SessionSlot>>,
    /// Set when no slot was free.
    pub refused: bool,
}

impl<C> Debug for SlotGate<'_, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlotGate")
            .field("refused", &self.refused)
            .finish_non_exhaustive()
    }
}

impl<C> SlotGate<'_, C> {
    fn admit(&mut self, user: &str) -> bool {
        let mut slot = self.slot.lock();
        if slot.is_some() {
            return true;
        }
        *slot = self.admission.take_slot(user);
        slot.is_some()
    }
}

impl<C: Sink<PgWireBackendMessage> + ClientInfo + Unpin> Sink<PgWireBackendMessage>
    for SlotGate<'_, C>
{
    type Error = C::Error;

    fn poll_ready(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        Pin::new(&mut *self.inner).poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, item: PgWireBackendMessage) -> Result<(), C::Error> {
        if matches!(item, PgWireBackendMessage::ReadyForQuery(_)) {
            let user = self
                .inner
                .metadata()
                .get(pgwire::api::METADATA_USER)
                .cloned()
                .unwrap_or_default();
            if !self.admit(&user) {
                self.refused = true;
                return Ok(());
            }
        }
        Pin::new(&mut *self.inner).start_send(item)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_close(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        Pin::new(&mut *self.inner).poll_close(cx)
    }
}

impl<C: ClientInfo> ClientInfo for SlotGate<'_, C> {
    fn socket_addr(&self) -> std::net::SocketAddr {
        self.inner.socket_addr()
    }
    fn is_secure(&self) -> bool {
        self.inner.is_secure()
    }
    fn protocol_version(&self) -> ProtocolVersion {
        self.inner.protocol_version()
    }
    fn set_protocol_version(&mut self, version: ProtocolVersion) {
        self.inner.set_protocol_version(version)
    }
    fn pid_and_secret_key(&self) -> (i32, SecretKey) {
        self.inner.pid_and_secret_key()
    }
    fn set_pid_and_secret_key(&mut self, pid: i32, secret_key: SecretKey) {
        self.inner.set_pid_and_secret_key(pid, secret_key)
    }
    fn state(&self) -> PgWireConnectionState {
        self.inner.state()
    }
    fn set_state(&mut self, new_state: PgWireConnectionState) {
        self.inner.set_state(new_state)
    }
    fn transaction_status(&self) -> TransactionStatus {
        self.inner.transaction_status()
    }
    fn set_transaction_status(&mut self, new_status: TransactionStatus) {
        self.inner.set_transaction_status(new_status)
    }
    fn metadata(&self) -> &std::collections::HashMap<String, String> {
        self.inner.metadata()
    }
    fn metadata_mut(&mut self) -> &mut std::collections::HashMap<String, String> {
        self.inner.metadata_mut()
    }
    fn session_extensions(&self) -> &SessionExtensions {
        self.inner.session_extensions()
    }
    fn sni_server_name(&self) -> Option<&str> {
        self.inner.sni_server_name()
    }
    fn client_certificates<'a>(&self) -> Option<&[CertificateDer<'a>]> {
        self.inner.client_certificates()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize, reserved: usize, starting: usize) -> Limits {
        Limits {
            max_connections: max,
            reserved_connections: reserved,
            reserved_for: vec!["admin".into()],
            max_starting: starting,
            ..Limits::default()
        }
    }

    #[test]
    fn reserved_slots_are_kept_for_the_named_users() {
        let a = Admission::new(limits(3, 1, 10));
        let s1 = a.take_slot("app").unwrap();
        let _s2 = a.take_slot("app").unwrap();
        assert!(a.take_slot("app").is_none(), "the last slot is reserved");
        let admin = a.take_slot("admin").unwrap();
        assert!(a.take_slot("admin").is_none(), "all slots taken");
        // As PostgreSQL counts: others get a slot only while more than
        // the reserved ones are free.
        drop(s1);
        assert!(
            a.take_slot("app").is_none(),
            "one free slot, and it is reserved"
        );
        drop(admin);
        let s3 = a.take_slot("app").expect("two free, one of them reserved");
        assert_eq!(a.sessions(), 2);
        drop(s3);
        assert_eq!(a.sessions(), 1);
    }

    #[tokio::test]
    async fn a_full_startup_budget_evicts_the_oldest() {
        let a = Admission::new(limits(10, 0, 2));
        let first = a.start();
        let second = a.start();
        let third = a.start();
        assert_eq!(a.starting(), 2);
        tokio::time::timeout(Duration::from_secs(1), first.evicted())
            .await
            .expect("the oldest is evicted");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), second.evicted())
                .await
                .is_err(),
            "the others are not"
        );
        drop(second);
        drop(third);
        drop(first);
        assert_eq!(a.starting(), 0);
    }
}
