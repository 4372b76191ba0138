//! Cancel requests: a server-wide registry from each connection's
//! (process id, secret key) to its cancel signal.
//!
//! A CancelRequest arrives on a *new* socket; the registry finds the target
//! session by process id and secret together, and bumps the session's
//! cancel generation. Process ids come from one generator for the whole
//! process ([`pid_generator`]), whatever the authentication: pgwire's SCRAM
//! handler, made per connection, would otherwise number every session
//! alike.
//! Every statement remembers the generation it started under; a statement
//! still running when the generation moves ends with 57014 — while it plans,
//! while it waits on the store, and while its rows stream: [`Stop`] is what
//! a running statement waits on.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;
use parking_lot::Mutex;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::{PidSecretKeyGenerator, RandomPidSecretKeyGenerator};
use pgwire::messages::cancel::CancelRequest;
use pgwire::messages::startup::SecretKey;
use tokio::sync::Notify;

use crate::sqlstate::PgError;

/// One session's cancel signal.
#[derive(Debug, Default)]
pub struct CancelSignal {
    generation: AtomicU64,
    notify: Notify,
    /// Writes running now ([`CancelSignal::writing`]).
    writing: std::sync::atomic::AtomicUsize,
}

/// Held while a write runs: a hang-up does not cancel it.
#[derive(Debug)]
pub struct Writing<'a>(&'a CancelSignal);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.writing.fetch_sub(1, Ordering::SeqCst);
    }
}

impl CancelSignal {
    /// The current generation: a statement starting now records it.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Cancels whatever is running.
    pub fn cancel(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// The client hung up: cancels a running read, and lets a running
    /// write finish as PostgreSQL would (a write of several entity-group
    /// transactions stopped half-way would stay half-applied).
    pub fn hang_up(&self) {
        if self.writing.load(Ordering::SeqCst) == 0 {
            self.cancel();
        }
    }

    /// Marks a write as running until the guard drops.
    pub fn writing(&self) -> Writing<'_> {
        self.writing.fetch_add(1, Ordering::SeqCst);
        Writing(self)
    }

    /// Completes when a cancel arrives after `since`.
    pub async fn cancelled(&self, since: u64) {
        loop {
            let notified = self.notify.notified();
            if self.generation() != since {
                return;
            }
            notified.await;
        }
    }
}

/// The process ids and secret keys every session is given.
pub fn pid_generator() -> &'static dyn PidSecretKeyGenerator {
    static GENERATOR: LazyLock<RandomPidSecretKeyGenerator> =
        LazyLock::new(RandomPidSecretKeyGenerator::default);
    &*GENERATOR
}

/// The same generator, shared, for handlers that take it that way.
pub fn shared_pid_generator() -> Arc<dyn PidSecretKeyGenerator> {
    Arc::new(Shared)
}

struct Shared;

impl PidSecretKeyGenerator for Shared {
    fn generate(&self, client: &dyn pgwire::api::ClientInfo) -> (i32, SecretKey) {
        pid_generator().generate(client)
    }
}

/// A session's process id and secret key (as bytes).
type SessionKey = (i32, Vec<u8>);

/// All sessions that can be cancelled, by process id and secret key.
#[derive(Debug, Default)]
pub struct CancelRegistry {
    sessions: Mutex<HashMap<SessionKey, Arc<CancelSignal>>>,
}

impl CancelRegistry {
    /// Registers a session after startup.
    pub fn register(&self, pid: i32, secret: SecretKey, signal: Arc<CancelSignal>) {
        self.sessions
            .lock()
            .insert((pid, key_bytes(&secret)), signal);
    }

    /// Forgets a session when its connection ends.
    pub fn unregister(&self, pid: i32, signal: &Arc<CancelSignal>) {
        self.sessions
            .lock()
            .retain(|(p, _), s| *p != pid || !Arc::ptr_eq(s, signal));
    }

    /// Sessions registered now.
    pub fn len(&self) -> usize {
        self.sessions.lock().len()
    }

    /// Whether no session is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Cancels the session if the secret matches (silently ignored
    /// otherwise, as PostgreSQL does).
    pub fn cancel(&self, pid: i32, secret: &SecretKey) {
        let signal = self.sessions.lock().get(&(pid, key_bytes(secret))).cloned();
        if let Some(sig) = signal {
            sig.cancel();
        }
    }
}

/// A secret key as bytes: protocol 3.0 keys are given out as an i32 but
/// come back in a CancelRequest as four raw bytes.
fn key_bytes(k: &SecretKey) -> Vec<u8> {
    match k {
        SecretKey::I32(v) => v.to_be_bytes().to_vec(),
        SecretKey::Bytes(b) => b.to_vec(),
    }
}

/// pgwire's hook for CancelRequest messages.
#[derive(Debug)]
pub struct RegistryCancelHandler(pub Arc<CancelRegistry>);

#[async_trait]
impl CancelHandler for RegistryCancelHandler {
    async fn on_cancel_request(&self, req: CancelRequest) {
        self.0.cancel(req.pid, &req.secret_key);
    }
}

/// When a running statement must stop: statement_timeout, or a cancel
/// request arriving after the statement started.
#[derive(Debug, Clone)]
pub struct Stop {
    /// statement_timeout's deadline.
    pub deadline: Option<std::time::Instant>,
    /// The session's cancel signal.
    pub cancel: Arc<CancelSignal>,
    /// Its generation when the statement started.
    pub since: u64,
}

impl Stop {
    /// Completes with the 57014 error when the statement must stop.
    pub async fn wait(&self) -> PgError {
        let timeout = async {
            match self.deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => futures::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = timeout => PgError::cancelled(true),
            _ = self.cancel.cancelled(self.since) => PgError::cancelled(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_the_right_secret_cancels() {
        let reg = CancelRegistry::default();
        let sig = Arc::new(CancelSignal::default());
        reg.register(7, SecretKey::I32(42), sig.clone());
        let since = sig.generation();
        reg.cancel(7, &SecretKey::I32(41));
        reg.cancel(8, &SecretKey::I32(42));
        assert_eq!(sig.generation(), since);
        let waiter = tokio::spawn({
            let sig = sig.clone();
            async move { sig.cancelled(since).await }
        });
        tokio::task::yield_now().await;
        reg.cancel(7, &SecretKey::I32(42));
        tokio::time::timeout(std::time::Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap();
        // The same key sent back as raw bytes (protocol 3.0 cancel) matches.
        let since = sig.generation();
        reg.cancel(7, &SecretKey::Bytes(42i32.to_be_bytes().to_vec().into()));
        assert_eq!(sig.generation(), since + 1);
        // A second session under the same pid with another key is told
        // apart by its key.
        let other = Arc::new(CancelSignal::default());
        reg.register(7, SecretKey::I32(43), other.clone());
        reg.cancel(7, &SecretKey::I32(43));
        assert_eq!(sig.generation(), since + 1);
        assert_eq!(other.generation(), 1);
        reg.unregister(7, &sig);
        reg.cancel(7, &SecretKey::I32(42));
        assert_eq!(
            sig.generation(),
            since + 1,
            "unregistered sessions are not cancelled"
        );
    }
}
