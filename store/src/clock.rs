//! Time, injectable: the store stamps entities with it and (in the partition
//! layer) meters throughput against it. Tests drive a [`ManualClock`] instead
//! of sleeping.

use std::sync::atomic::{AtomicI64, Ordering};

/// A source of wall-clock time in microseconds since the Unix epoch.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// Now, in microseconds since 1970-01-01T00:00:00Z.
    fn now_micros(&self) -> i64;
}

/// The operating system's clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_micros(&self) -> i64 {
        chrono::Utc::now().timestamp_micros()
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Default)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A clock standing at `micros`.
    pub fn at(micros: i64) -> Self {
        ManualClock {
            now: AtomicI64::new(micros),
        }
    }

    /// Moves the clock forward.
    pub fn advance(&self, d: std::time::Duration) {
        self.now.fetch_add(
            i64::try_from(d.as_micros()).unwrap_or(i64::MAX),
            Ordering::SeqCst,
        );
    }
}

impl Clock for ManualClock {
    fn now_micros(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}

impl<C: Clock> Clock for std::sync::Arc<C> {
    fn now_micros(&self) -> i64 {
        (**self).now_micros()
    }
}
