//! The engine's health: the layer that notices when the durable engine can
//! no longer make writes durable, stops every later write at the door with
//! the original cause, and counts read and write errors.
//!
//! Why a latch: once a journal write or fsync has failed, the engine cannot
//! say which of the writes handed to it reached the disk (fjall poisons
//! itself; PostgreSQL PANICs for the same reason). Acknowledging another
//! write would be a promise it cannot keep. Reads go on: what they return
//! was committed. A restart recovers every acknowledged write from the
//! journal (`docs/architecture.md`, "When the engine fails").

use std::ops::Bound;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use super::{Bytes, Engine, KvIter, Mutation, Space, Visitor};
use crate::error::{Result, StoreError};

/// Why the engine stopped taking writes, and since when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineFailure {
    /// What failed, as the operating system said it.
    pub cause: String,
    /// The failure was a full disk (ENOSPC, EDQUOT).
    pub disk_full: bool,
    /// When, in microseconds since the Unix epoch.
    pub since_micros: i64,
}

/// The engine's health at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthReport {
    /// Set once a write could not be made durable; writes are refused from
    /// then until restart.
    pub failure: Option<EngineFailure>,
    /// Reads that failed with an engine error (each is reported to its
    /// client; reads after it go on).
    pub read_errors: u64,
    /// Writes refused or failed because of the engine.
    pub write_errors: u64,
}

/// Shared between the [`Watched`] layer and whoever reports health.
#[derive(Debug, Default)]
pub(crate) struct Health {
    /// Set with `failure`: every write reads this, the lock only after a
    /// failure.
    stopped: std::sync::atomic::AtomicBool,
    failure: Mutex<Option<EngineFailure>>,
    read_errors: AtomicU64,
    write_errors: AtomicU64,
}

impl Health {
    pub(crate) fn report(&self) -> HealthReport {
        HealthReport {
            failure: self.failure.lock().clone(),
            read_errors: self.read_errors.load(Ordering::Relaxed),
            write_errors: self.write_errors.load(Ordering::Relaxed),
        }
    }

    /// The error every write answers once the engine failed.
    fn refusal(&self) -> Option<StoreError> {
        if !self.stopped.load(Ordering::Acquire) {
            return None;
        }
        let failure = self.failure.lock();
        let f = failure.as_ref()?;
        let since = chrono::DateTime::from_timestamp_micros(f.since_micros)
            .map(|t| t.format("%Y-%m-%d %H:%M:%S UTC").to_string())
            .unwrap_or_default();
        Some(StoreError::WritesStopped {
            cause: format!("{} (since {since})", f.cause),
            disk_full: f.disk_full,
        })
    }

    /// Latches the first failure and logs it, once.
    fn fail(&self, cause: &str, disk_full: bool) {
        let mut failure = self.failure.lock();
        if failure.is_some() {
            return;
        }
        tracing::error!(
            cause,
            disk_full,
            "the storage engine failed a write: every write is refused from now on, reads go on; \
             {} then restart tablegate, which recovers every acknowledged write",
            if disk_full {
                "free space on the data directory's disk,"
            } else {
                "check the disk and the system log,"
            }
        );
        *failure = Some(EngineFailure {
            cause: cause.to_owned(),
            disk_full,
            since_micros: chrono::Utc::now().timestamp_micros(),
        });
        self.stopped.store(true, Ordering::Release);
    }

    fn count_read<T>(&self, r: Result<T>) -> Result<T> {
        if r.is_err() {
            self.read_errors.fetch_add(1, Ordering::Relaxed);
        }
        r
    }
}

/// The health layer over an engine.
#[derive(Debug)]
pub(crate) struct Watched {
    inner: Box<dyn Engine>,
    health: Arc<Health>,
}

impl Watched {
    pub(crate) fn new(inner: Box<dyn Engine>, health: Arc<Health>) -> Watched {
        Watched { inner, health }
    }

    /// A write (a batch or a sync): refused once writes stopped, counted
    /// when it fails, and a failure that stops writes latched.
    fn write(&self, f: impl FnOnce() -> Result<()>) -> Result<()> {
        if let Some(refused) = self.health.refusal() {
            self.health.write_errors.fetch_add(1, Ordering::Relaxed);
            return Err(refused);
        }
        let r = f();
        if let Err(e) = &r {
            self.health.write_errors.fetch_add(1, Ordering::Relaxed);
            if let StoreError::WritesStopped { cause, disk_full } = e {
                self.health.fail(cause, *disk_full);
            }
        }
        r
    }
}

impl Engine for Watched {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Bytes>> {
        self.health.count_read(self.inner.get(space, key))
    }

    fn scan(&self, space: Space, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> KvIter<'_> {
        let health = &self.health;
        Box::new(
            self.inner
                .scan(space, start, end)
                .map(move |kv| health.count_read(kv)),
        )
    }

    fn visit(
        &self,
        space: Space,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        f: &mut Visitor<'_>,
    ) -> Result<()> {
        self.health
            .count_read(self.inner.visit(space, start, end, f))
    }

    fn last_in(
        &self,
        space: Space,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    ) -> Result<Option<(Bytes, Bytes)>> {
        self.health
            .count_read(self.inner.last_in(space, start, end))
    }

    fn apply(&self, batch: Vec<Mutation>) -> Result<()> {
        self.write(|| self.inner.apply(batch))
    }

    fn sync(&self) -> Result<()> {
        self.write(|| self.inner.sync())
    }

    fn disk_space(&self) -> u64 {
        self.inner.disk_space()
    }
}

/// The error for a write the engine could not make: `what` failed with `e`.
pub(crate) fn write_failure(what: &str, e: &std::io::Error) -> StoreError {
    StoreError::WritesStopped {
        cause: format!("{what} failed: {e}"),
        disk_full: is_disk_full(e),
    }
}

/// ENOSPC, or EDQUOT (a quota is a full disk to this process).
pub(crate) fn is_disk_full(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    ) || matches!(e.raw_os_error(), Some(28 | 122))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::memory::MemoryEngine;

    fn put() -> Mutation {
        Mutation::Put {
            space: Space::Meta,
            key: b"k".to_vec(),
            value: b"v".to_vec(),
        }
    }

    /// An engine whose writes fail the way fjall's do on a full disk: the
    /// first with the cause, then (poisoned) with no cause at all.
    #[derive(Debug, Default)]
    struct FullDisk {
        calls: AtomicU64,
    }

    impl Engine for FullDisk {
        fn get(&self, _: Space, _: &[u8]) -> Result<Option<Bytes>> {
            Ok(None)
        }
        fn scan(&self, _: Space, _: Bound<Vec<u8>>, _: Bound<Vec<u8>>) -> KvIter<'_> {
            Box::new(std::iter::empty())
        }
        fn apply(&self, _: Vec<Mutation>) -> Result<()> {
            if self.calls.fetch_add(1, Ordering::Relaxed) == 0 {
                Err(write_failure(
                    "journal write",
                    &std::io::Error::from_raw_os_error(28),
                ))
            } else {
                Err(StoreError::Engine("FjallError: Poisoned".into()))
            }
        }
        fn disk_space(&self) -> u64 {
            0
        }
    }

    #[test]
    fn a_failed_write_stops_every_later_write_with_its_cause() {
        let health = Arc::new(Health::default());
        let engine = Watched::new(Box::new(FullDisk::default()), health.clone());
        assert_eq!(health.report(), HealthReport::default());
        let first = engine.apply(vec![put()]).unwrap_err();
        assert!(
            matches!(&first, StoreError::WritesStopped { disk_full: true, cause } if cause.contains("No space left")),
            "{first:?}"
        );
        // The second write never reaches the poisoned engine: it gets the
        // first cause, not "Poisoned".
        let second = engine.apply(vec![put()]).unwrap_err();
        assert!(
            matches!(&second, StoreError::WritesStopped { disk_full: true, cause } if cause.contains("No space left") && cause.contains("since")),
            "{second:?}"
        );
        let report = health.report();
        assert_eq!(report.write_errors, 2);
        assert!(report.failure.unwrap().disk_full);
        // Reads go on.
        assert!(engine.get(Space::Meta, b"k").unwrap().is_none());
    }

    #[test]
    fn ordinary_errors_do_not_stop_writes() {
        let health = Arc::new(Health::default());
        let engine = Watched::new(Box::new(MemoryEngine::default()), health.clone());
        engine.apply(vec![put()]).unwrap();
        assert_eq!(
            engine.get(Space::Meta, b"k").unwrap().as_deref(),
            Some(&b"v"[..])
        );
        assert_eq!(health.report(), HealthReport::default());
    }

    #[test]
    fn disk_full_is_enospc_or_a_quota() {
        assert!(is_disk_full(&std::io::Error::from_raw_os_error(28)));
        assert!(is_disk_full(&std::io::Error::from_raw_os_error(122)));
        assert!(!is_disk_full(&std::io::Error::from_raw_os_error(5)));
    }
}
