//! Where a throttle decision is made: token buckets at the scalability
//! targets of the seeds.
//!
//! Each bucket refills at its target rate (entities per second) up to a
//! small burst (`burst` of a second's worth). A request is **admitted** when
//! every bucket it touches has a positive balance, and costs nothing when it
//! is not: the caller gets [`StoreError::ServerBusy`] naming the bucket, its
//! target and when to come back. An admitted request is then **charged** its
//! actual cost, which may drive a bucket into debt (a 1,000-entity page
//! against a 200-entity burst); requests wait until the debt is repaid. Over
//! any window of T seconds a bucket admits at most `rate·T + burst + one
//! request`, which is what makes the measured rate match the target.
//!
//! Counted as cost: entities scanned by reads (not only those
//! returned), and entities inserted, updated or deleted by writes; a 100-op
//! EGT costs 100.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;

use super::load::{Pair, PairMap, PruneMark, with_entry};
use crate::error::StoreError;

/// Scalability targets in entities per second. `None` disables throttling.
#[derive(Debug, Clone, PartialEq)]
pub struct Targets {
    /// Per PartitionKey (seeds: 2,000/s).
    pub per_partition: u64,
    /// Per partition server.
    pub per_server: u64,
    /// Per account, i.e. the whole store (seeds: 20,000/s).
    pub per_account: u64,
    /// Burst allowance as a fraction of one second of each target.
    pub burst: f64,
}

impl Default for Targets {
    fn default() -> Self {
        Targets {
            per_partition: 2_000,
            per_server: 10_000,
            per_account: 20_000,
            burst: 0.1,
        }
    }
}

/// One token bucket; balance in entities, may go negative (debt).
#[derive(Debug, Clone)]
struct Bucket {
    balance: f64,
    updated_micros: i64,
}

impl Bucket {
    fn full(rate: u64, burst: f64, now: i64) -> Self {
        Bucket {
            balance: rate as f64 * burst,
            updated_micros: now,
        }
    }

    /// Callers read the clock before they take the lock, so `now` may be
    /// older than the last refill (another thread got the lock first): such
    /// a refill adds nothing and leaves the mark where it is, or the next one
    /// would credit the same interval twice.
    fn refill(&mut self, rate: u64, burst: f64, now: i64) {
        if now <= self.updated_micros {
            return;
        }
        let elapsed = (now - self.updated_micros) as f64 / 1e6;
        self.balance = (self.balance + elapsed * rate as f64).min(rate as f64 * burst);
        self.updated_micros = now;
    }

    /// Refills, then: how long until the balance is positive again, if it
    /// is not now.
    fn empty(&mut self, rate: u64, burst: f64, now: i64) -> Option<Duration> {
        self.refill(rate, burst, now);
        (self.balance <= 0.0).then(|| self.wait(rate))
    }

    /// How long until the balance is positive again.
    fn wait(&self, rate: u64) -> Duration {
        if self.balance > 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64((-self.balance + 1.0) / rate as f64)
        }
    }
}

fn busy(scope: String, target: u64, retry_after: Duration) -> StoreError {
    StoreError::ServerBusy {
        reason: format!(
            "{scope} is over its target of {target} entities/s; retry in {} ms",
            retry_after.as_millis().max(1)
        ),
        scope,
        target_per_sec: Some(target),
        retry_after,
    }
}

/// Which bucket refused a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BucketKind {
    Partition,
    Server,
    Account,
}

/// A refused request: which bucket, and the error for the caller.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) kind: BucketKind,
    pub(crate) error: StoreError,
}

/// Which buckets a request touches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scope<'a> {
    pub(crate) table: &'a str,
    /// The PartitionKey, when the request stays within one.
    pub(crate) partition: Option<&'a str>,
    pub(crate) server: usize,
}

#[derive(Debug, Default)]
struct State {
    partitions: PairMap<Bucket>,
    /// When `partitions` is next pruned.
    partitions_mark: PruneMark,
    servers: HashMap<usize, Bucket>,
    account: Option<Bucket>,
}

/// PartitionKey buckets kept before idle (full) ones are forgotten.
const PARTITION_BUCKETS_KEPT: usize = 10_000;

/// Counts of throttled requests, by what throttled them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThrottleCounts {
    /// Rejected by a PartitionKey target.
    pub partition: u64,
    /// Rejected by a partition server's capacity.
    pub server: u64,
    /// Rejected by the account target.
    pub account: u64,
}

/// All buckets of one store.
#[derive(Debug)]
pub(crate) struct Throttle {
    targets: Option<Targets>,
    state: Mutex<State>,
    counts: Mutex<ThrottleCounts>,
}

/// Buckets idle for this long are forgotten (they would be full anyway).
const IDLE_FORGET_MICROS: i64 = 10_000_000;

impl Throttle {
    pub(crate) fn new(targets: Option<Targets>) -> Self {
        Throttle {
            targets,
            state: Mutex::new(State::default()),
            counts: Mutex::new(ThrottleCounts::default()),
        }
    }

    pub(crate) fn counts(&self) -> ThrottleCounts {
        *self.counts.lock()
    }

    /// Admits the request or refuses it at no cost.
    pub(crate) fn admit(&self, scope: Scope<'_>, now: i64) -> std::result::Result<(), Refused> {
        let Some(t) = &self.targets else {
            return Ok(());
        };
        let mut st = self.state.lock();
        // The first empty bucket of the request's partition, server and
        // account refuses it, naming itself.
        let refused = if let Some(pk) = scope.partition
            && let Some(b) = st.partitions.get_mut(&Pair(scope.table, pk))
            && let Some(wait) = b.empty(t.per_partition, t.burst, now)
        {
            let what = format!("partition {pk:?} of table {}", scope.table);
            Some((BucketKind::Partition, what, t.per_partition, wait))
        } else if let Some(b) = st.servers.get_mut(&scope.server)
            && let Some(wait) = b.empty(t.per_server, t.burst, now)
        {
            let what = format!("partition server {}", scope.server);
            Some((BucketKind::Server, what, t.per_server, wait))
        } else if let Some(b) = st.account.as_mut()
            && let Some(wait) = b.empty(t.per_account, t.burst, now)
        {
            Some((
                BucketKind::Account,
                "the account".to_owned(),
                t.per_account,
                wait,
            ))
        } else {
            None
        };
        drop(st);
        if let Some((kind, what, target, retry_after)) = refused {
            let mut counts = self.counts.lock();
            match kind {
                BucketKind::Partition => counts.partition += 1,
                BucketKind::Server => counts.server += 1,
                BucketKind::Account => counts.account += 1,
            }
            return Err(Refused {
                kind,
                error: busy(what, target, retry_after),
            });
        }
        Ok(())
    }

    /// What an admitted request may still spend before one of its buckets
    /// runs dry (at least 1); `None` when throttling is off.
    pub(crate) fn budget(&self, scope: Scope<'_>, now: i64) -> Option<u64> {
        let t = self.targets.as_ref()?;
        let mut st = self.state.lock();
        let left = |b: Option<&mut Bucket>, rate: u64| match b {
            Some(b) => {
                b.refill(rate, t.burst, now);
                b.balance
            }
            None => rate as f64 * t.burst,
        };
        let mut budget = f64::INFINITY;
        if let Some(pk) = scope.partition {
            let b = st.partitions.get_mut(&Pair(scope.table, pk));
            budget = budget.min(left(b, t.per_partition));
        }
        budget = budget.min(left(st.servers.get_mut(&scope.server), t.per_server));
        budget = budget.min(left(st.account.as_mut(), t.per_account));
        Some(budget.floor().max(1.0) as u64)
    }

    /// Charges an admitted request its actual cost in entities.
    pub(crate) fn charge(&self, scope: Scope<'_>, cost: u64, now: i64) {
        let Some(t) = &self.targets else {
            return;
        };
        if cost == 0 {
            return;
        }
        let cost = cost as f64;
        let mut st = self.state.lock();
        if let Some(pk) = scope.partition {
            let full = || Bucket::full(t.per_partition, t.burst, now);
            with_entry(&mut st.partitions, (scope.table, pk), full, |b| {
                b.refill(t.per_partition, t.burst, now);
                b.balance -= cost;
            });
        }
        let b = st
            .servers
            .entry(scope.server)
            .or_insert_with(|| Bucket::full(t.per_server, t.burst, now));
        b.refill(t.per_server, t.burst, now);
        b.balance -= cost;
        let b = st
            .account
            .get_or_insert_with(|| Bucket::full(t.per_account, t.burst, now));
        b.refill(t.per_account, t.burst, now);
        b.balance -= cost;
        // Keep the partition map small: forget buckets long idle (full).
        let State {
            partitions,
            partitions_mark,
            ..
        } = &mut *st;
        partitions_mark.prune(partitions, PARTITION_BUCKETS_KEPT, |_, b| {
            now - b.updated_micros < IDLE_FORGET_MICROS || b.balance < 0.0
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(pk: &str) -> Scope<'_> {
        Scope {
            table: "t",
            partition: Some(pk),
            server: 0,
        }
    }

    /// Drives one partition as fast as admission allows, one entity per
    /// request, with a manual clock stepping 100 µs; every second request
    /// reads the clock `lag` µs early (as a thread that read it before
    /// another took the lock). Counts admitted.
    fn admitted_over(seconds: i64, t: &Throttle, lag: i64) -> u64 {
        let mut admitted = 0;
        let mut now = 0i64;
        let mut step = 0u64;
        while now < seconds * 1_000_000 {
            let at = if step % 2 == 1 { now - lag } else { now };
            if t.admit(scope("hot"), at).is_ok() {
                t.charge(scope("hot"), 1, at);
                admitted += 1;
            }
            step += 1;
            now += 100;
        }
        admitted
    }

    #[test]
    fn partition_target_admits_the_target_rate() {
        let t = Throttle::new(Some(Targets::default()));
        let n = admitted_over(10, &t, 0);
        // 2,000/s for 10 s plus the 200-entity burst.
        assert!((20_000..=20_300).contains(&n), "admitted {n}");
        assert!(t.counts().partition > 0);
    }

    #[test]
    fn a_clock_read_before_the_lock_does_not_refill_twice() {
        // Each lagging request carries a time 50 µs older than the one
        // before it: the mark must not move back.
        let t = Throttle::new(Some(Targets::default()));
        let n = admitted_over(10, &t, 150);
        assert!((20_000..=20_300).contains(&n), "admitted {n}");
    }

    #[test]
    fn refusal_names_scope_and_target_and_costs_nothing() {
        let t = Throttle::new(Some(Targets::default()));
        t.charge(scope("p"), 5_000, 0);
        let err = t.admit(scope("p"), 0).unwrap_err().error;
        match err {
            StoreError::ServerBusy {
                scope,
                target_per_sec,
                retry_after,
                ..
            } => {
                assert!(scope.contains("\"p\""), "{scope}");
                assert_eq!(target_per_sec, Some(2_000));
                // 4,800 in debt at 2,000/s.
                assert!(
                    retry_after > Duration::from_millis(2_300),
                    "{retry_after:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Refusals cost nothing: after the debt is repaid it admits again.
        assert!(t.admit(scope("p"), 2_500_000).is_ok());
        // Another partition on the same server is not throttled by p's
        // bucket, but the server bucket (10,000/s) still has room.
        assert!(t.admit(scope("q"), 0).is_ok());
    }

    #[test]
    fn server_and_account_targets_apply_across_partitions() {
        let t = Throttle::new(Some(Targets::default()));
        for i in 0..3 {
            t.charge(scope(&format!("p{i}")), 500, 0);
        }
        // 1,500 charged to server 0 (10,000/s, burst 1,000: in debt) and to
        // the account (20,000/s, burst 2,000: still positive).
        let err = t.admit(scope("fresh"), 0).unwrap_err();
        assert_eq!(err.kind, BucketKind::Server);
        let err = err.error;
        assert!(err.to_string().contains("partition server 0"), "{err}");
        let other_server = Scope {
            table: "t",
            partition: Some("fresh"),
            server: 1,
        };
        assert!(t.admit(other_server, 0).is_ok());
        t.charge(other_server, 20_000, 0);
        let elsewhere = Scope {
            table: "t",
            partition: Some("elsewhere"),
            server: 2,
        };
        let err = t.admit(elsewhere, 0).unwrap_err();
        assert_eq!(err.kind, BucketKind::Account);
        let err = err.error;
        assert!(err.to_string().contains("account"), "{err}");
        // Each refusal is counted once, under the bucket that refused.
        let counts = t.counts();
        assert_eq!((counts.partition, counts.server, counts.account), (0, 1, 1));
    }

    #[test]
    fn off_admits_everything() {
        let t = Throttle::new(None);
        t.charge(scope("p"), 1_000_000, 0);
        assert!(t.admit(scope("p"), 0).is_ok());
    }
}
