//! Retry policy for throttling and timeouts, whichever backend throttles:
//! the partition layer's scans, the planner's reads and writes, and the
//! Azure backend's requests all retry through it. Only retryable errors ([`StoreError::is_retryable`])
//! are retried, never client errors. A throttled scan retries the same page
//! request, so it resumes from its continuation token.
//!
//! Exponential backoff follows the seeds' formula:
//! `y = Rand(0.8z, 1.2z) · (2^x − 1); y = min(zmin + y, zmax)` for retry
//! number `x` (1-based).

use std::time::Duration;

use crate::error::{Result, StoreError};

/// How to retry a throttled request.
#[derive(Debug, Clone, PartialEq)]
pub enum RetryPolicy {
    /// Fail at once.
    None,
    /// Wait the same delay before each retry.
    Fixed {
        /// The delay.
        delay: Duration,
        /// Retries before giving up.
        max_retries: u32,
    },
    /// The seeds' exponential backoff.
    Exponential {
        /// Base delay `z`.
        base: Duration,
        /// Minimum delay `zmin`.
        min: Duration,
        /// Maximum delay `zmax`.
        max: Duration,
        /// Retries before giving up.
        max_retries: u32,
    },
}

impl Default for RetryPolicy {
    /// Suited to an interactive server: z = 100 ms, zmin = 20 ms,
    /// zmax = 2 s, 5 retries (worst case about 5 s of backing off).
    fn default() -> Self {
        RetryPolicy::Exponential {
            base: Duration::from_millis(100),
            min: Duration::from_millis(20),
            max: Duration::from_secs(2),
            max_retries: 5,
        }
    }
}

impl RetryPolicy {
    /// The delay before retry number `attempt` (1-based), or `None` when
    /// the policy gives up. `jitter` is a uniform sample in [0, 1).
    pub fn delay(&self, attempt: u32, jitter: f64) -> Option<Duration> {
        match self {
            RetryPolicy::None => None,
            RetryPolicy::Fixed { delay, max_retries } => {
                (attempt <= *max_retries).then_some(*delay)
            }
            RetryPolicy::Exponential {
                base,
                min,
                max,
                max_retries,
            } => {
                if attempt > *max_retries {
                    return None;
                }
                let z = base.as_secs_f64() * (0.8 + 0.4 * jitter.clamp(0.0, 1.0));
                let exp = 2f64.powi(attempt.min(62) as i32) - 1.0;
                let y = (min.as_secs_f64() + z * exp).min(max.as_secs_f64());
                Some(Duration::from_secs_f64(y))
            }
        }
    }

    /// The delay to wait after `err` on retry `attempt`: the policy's delay,
    /// but never less than the store's own `retry_after` hint (retrying
    /// sooner would only be refused again), capped by the policy maximum.
    pub fn delay_for(&self, err: &StoreError, attempt: u32, jitter: f64) -> Option<Duration> {
        if !err.is_retryable() {
            return None;
        }
        let d = self.delay(attempt, jitter)?;
        let hint = match err.root() {
            StoreError::ServerBusy { retry_after, .. } => *retry_after,
            _ => Duration::ZERO,
        };
        let cap = match self {
            RetryPolicy::Exponential { max, .. } => *max,
            RetryPolicy::Fixed { delay, .. } => (*delay).max(hint),
            RetryPolicy::None => Duration::ZERO,
        };
        Some(d.max(hint.min(cap)))
    }
}

/// What retrying cost, for EXPLAIN ANALYZE.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryStats {
    /// Retries made.
    pub retries: u32,
    /// Time spent backing off.
    pub backoff: Duration,
}

/// Runs `f` until it succeeds, fails with a non-retryable error, or the
/// policy gives up (then the last error is returned).
pub async fn with_retry<T, F, Fut>(
    policy: &RetryPolicy,
    stats: &mut RetryStats,
    mut f: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let mut attempt = 0;
    loop {
        match f().await {
            Ok(v) => return Ok(v),
            Err(e) => {
                attempt += 1;
                let Some(d) = policy.delay_for(&e, attempt, jitter()) else {
                    return Err(e);
                };
                stats.retries += 1;
                stats.backoff += d;
                tokio::time::sleep(d).await;
            }
        }
    }
}

/// A cheap uniform sample in [0, 1) (jitter needs no cryptographic
/// quality; it only spreads retries of concurrent clients apart).
pub fn jitter() -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: AtomicU64 = AtomicU64::new(0x2545_F491_4F6C_DD1D);
    let mut x = STATE.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_follows_the_seeds_formula() {
        let p = RetryPolicy::default();
        // x = 1, Rand = 1.0·z: y = 0.02 + 0.1·1 = 0.12 s
        assert_eq!(p.delay(1, 0.5), Some(Duration::from_millis(120)));
        // x = 3, lowest jitter 0.8z: y = 0.02 + 0.08·7 = 0.58 s
        let d = p.delay(3, 0.0).unwrap().as_secs_f64();
        assert!((d - 0.58).abs() < 1e-9, "{d}");
        // Capped at zmax.
        assert_eq!(p.delay(5, 0.99), Some(Duration::from_secs(2)));
        assert_eq!(p.delay(6, 0.5), None);
    }

    #[test]
    fn client_errors_are_never_retried() {
        let p = RetryPolicy::default();
        let e = StoreError::EntityNotFound {
            partition_key: "p".into(),
            row_key: "r".into(),
        };
        assert_eq!(p.delay_for(&e, 1, 0.5), None);
        let busy = StoreError::ServerBusy {
            reason: "x".into(),
            scope: "x".into(),
            target_per_sec: Some(1),
            retry_after: Duration::from_millis(700),
        };
        // The store's hint wins over a shorter backoff.
        assert_eq!(p.delay_for(&busy, 1, 0.5), Some(Duration::from_millis(700)));
        assert_eq!(RetryPolicy::None.delay_for(&busy, 1, 0.5), None);
    }

    #[tokio::test(start_paused = true)]
    async fn with_retry_stops_on_success_and_counts_backoff() {
        let mut calls = 0;
        let mut stats = RetryStats::default();
        let r = with_retry(&RetryPolicy::default(), &mut stats, || {
            calls += 1;
            let n = calls;
            async move {
                if n < 3 {
                    Err(StoreError::ServerBusy {
                        reason: "s".into(),
                        scope: "s".into(),
                        target_per_sec: Some(1),
                        retry_after: Duration::ZERO,
                    })
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(r.unwrap(), 3);
        assert_eq!(stats.retries, 2);
        assert!(stats.backoff >= Duration::from_millis(20 + 80 + 20 + 240));
    }
}
