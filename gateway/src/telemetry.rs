//! What the gateway did, counted: statements per query class, their
//! latency, entities scanned and returned, throttled retries.
//!
//! Each statement gets a [`StatementGuard`] when it starts running. The
//! guard opens a `tracing` span named `statement` (fields: `class`, and
//! the rows and timing when it ends) and, when dropped (after the last row
//! was streamed, or on error), records the statement twice:
//!
//! - in the process-wide [`Telemetry`] counters, which the system view
//!   `tablegate.query_counters` reads;
//! - through the `metrics` facade (`tablegate_queries_total{class}`,
//!   `tablegate_query_duration_seconds{class}`, ...), which the binary's
//!   Prometheus endpoint exports. A statement records through handles made
//!   once per class by [`bind_metrics`], after the recorder is installed;
//!   without one (tests, embedding, a server without `--metrics-listen`)
//!   nothing is recorded there.
//!
//! The counters are process-wide, like the metrics recorder: one process
//! serves one store.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, OnceLock};
use std::time::{Duration, Instant};

use tablegate_planner::AccessClass;
use tablegate_planner::Actuals;

/// What kind of statement ran, as counters and metrics label it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementClass {
    /// A native SELECT of one access class.
    Access(AccessClass),
    /// A query the analytics engine ran (including catalog queries).
    Analytics,
    /// INSERT, UPDATE, DELETE, COPY FROM, COMMIT of a transaction.
    Write,
    /// DDL, SET/SHOW, BEGIN, cursors, EXPLAIN and the rest.
    Other,
}

/// Every class, in the order views list them.
pub const CLASSES: [StatementClass; 8] = [
    StatementClass::Access(AccessClass::Point),
    StatementClass::Access(AccessClass::RowRange),
    StatementClass::Access(AccessClass::PartitionRange),
    StatementClass::Access(AccessClass::FullScan),
    StatementClass::Access(AccessClass::Empty),
    StatementClass::Analytics,
    StatementClass::Write,
    StatementClass::Other,
];

impl StatementClass {
    /// The label: `point`, `row-range`, `partition-range`, `full-scan`,
    /// `empty`, `analytics`, `write`, `other`.
    pub fn name(self) -> &'static str {
        match self {
            StatementClass::Access(c) => c.name(),
            StatementClass::Analytics => "analytics",
            StatementClass::Write => "write",
            StatementClass::Other => "other",
        }
    }

    fn index(self) -> usize {
        match self {
            StatementClass::Access(AccessClass::Point) => 0,
            StatementClass::Access(AccessClass::RowRange) => 1,
            StatementClass::Access(AccessClass::PartitionRange) => 2,
            StatementClass::Access(AccessClass::FullScan) => 3,
            StatementClass::Access(AccessClass::Empty) => 4,
            StatementClass::Analytics => 5,
            StatementClass::Write => 6,
            StatementClass::Other => 7,
        }
    }
}

/// Counters of one class.
#[derive(Debug, Default)]
struct ClassCounters {
    statements: AtomicU64,
    errors: AtomicU64,
    micros: AtomicU64,
    scanned: AtomicU64,
    returned: AtomicU64,
    retries: AtomicU64,
    backoff_micros: AtomicU64,
}

/// A snapshot of one class's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassStats {
    /// Statements finished.
    pub statements: u64,
    /// Of those, failed.
    pub errors: u64,
    /// Total wall time.
    pub total: Duration,
    /// Entities the store read for them.
    pub scanned: u64,
    /// Rows (or entities written) they returned.
    pub returned: u64,
    /// Throttled retries they made.
    pub retries: u64,
    /// Time they spent backing off.
    pub backoff: Duration,
}

/// The process-wide statement counters.
#[derive(Debug, Default)]
pub struct Telemetry {
    classes: [ClassCounters; 8],
}

static TELEMETRY: LazyLock<Telemetry> = LazyLock::new(Telemetry::default);

/// The process's counters.
pub fn telemetry() -> &'static Telemetry {
    &TELEMETRY
}

impl Telemetry {
    /// Every class with its counters, in [`CLASSES`] order.
    pub fn snapshot(&self) -> Vec<(StatementClass, ClassStats)> {
        CLASSES
            .iter()
            .map(|&class| {
                let c = &self.classes[class.index()];
                let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
                (
                    class,
                    ClassStats {
                        statements: get(&c.statements),
                        errors: get(&c.errors),
                        total: Duration::from_micros(get(&c.micros)),
                        scanned: get(&c.scanned),
                        returned: get(&c.returned),
                        retries: get(&c.retries),
                        backoff: Duration::from_micros(get(&c.backoff_micros)),
                    },
                )
            })
            .collect()
    }

    fn record(&self, class: StatementClass, failed: bool, elapsed: Duration, a: &Actuals) {
        let c = &self.classes[class.index()];
        let add = |x: &AtomicU64, n: u64| {
            x.fetch_add(n, Ordering::Relaxed);
        };
        add(&c.statements, 1);
        add(&c.errors, u64::from(failed));
        add(&c.micros, elapsed.as_micros() as u64);
        add(&c.scanned, a.scanned);
        add(&c.returned, a.returned);
        add(&c.retries, u64::from(a.retries));
        add(&c.backoff_micros, a.backoff.as_micros() as u64);

        if let Some(m) = METRICS.get() {
            let m = &m[class.index()];
            m.queries.increment(1);
            if failed {
                m.errors.increment(1);
            }
            m.duration.record(elapsed.as_secs_f64());
            m.scanned.increment(a.scanned);
            m.returned.increment(a.returned);
            m.retries.increment(u64::from(a.retries));
            // Only statements that backed off: a histogram full of zeros
            // would hide the ones that did.
            if !a.backoff.is_zero() {
                m.backoff.record(a.backoff.as_secs_f64());
            }
        }
    }
}

/// One class's series in the `metrics` facade.
struct ClassMetrics {
    queries: metrics::Counter,
    errors: metrics::Counter,
    duration: metrics::Histogram,
    scanned: metrics::Counter,
    returned: metrics::Counter,
    retries: metrics::Counter,
    backoff: metrics::Histogram,
}

impl ClassMetrics {
    fn register(class: StatementClass) -> ClassMetrics {
        let label = class.name();
        ClassMetrics {
            queries: metrics::counter!("tablegate_queries_total", "class" => label),
            errors: metrics::counter!("tablegate_query_errors_total", "class" => label),
            duration: metrics::histogram!("tablegate_query_duration_seconds", "class" => label),
            scanned: metrics::counter!("tablegate_entities_scanned_total", "class" => label),
            returned: metrics::counter!("tablegate_rows_returned_total", "class" => label),
            retries: metrics::counter!("tablegate_throttled_retries_total", "class" => label),
            backoff: metrics::histogram!("tablegate_backoff_seconds", "class" => label),
        }
    }
}

/// Every class's series, in [`CLASSES`] order, once [`bind_metrics`] ran.
static METRICS: OnceLock<[ClassMetrics; CLASSES.len()]> = OnceLock::new();

/// Registers every class's series with the installed `metrics` recorder;
/// from then on each statement records through these handles. Call it once,
/// right after installing the recorder: a handle made before that is the
/// no-op recorder's. (Why handles: the `counter!` macros build a labelled
/// key and look it up in the recorder on every call, seven per statement;
/// that was 5% of a prepared point lookup's allocations even with no
/// recorder installed.) The series exist from then on, at zero until a
/// statement of their class finishes.
pub fn bind_metrics() {
    METRICS.get_or_init(|| std::array::from_fn(|i| ClassMetrics::register(CLASSES[i])));
}

/// One running statement: records itself when dropped.
#[derive(Debug)]
pub struct StatementGuard {
    class: StatementClass,
    start: Instant,
    failed: bool,
    actuals: Actuals,
    span: tracing::Span,
    /// The normalized text, for the statement log.
    text: Option<Arc<str>>,
    /// What an analytics plan's store scans did, filled as it ends.
    scans: Option<Arc<parking_lot::Mutex<Actuals>>>,
}

impl StatementGuard {
    /// Starts timing a statement of `class`.
    pub fn start(class: StatementClass) -> StatementGuard {
        let span = tracing::info_span!(
            "statement",
            class = class.name(),
            rows = tracing::field::Empty,
            scanned = tracing::field::Empty,
            failed = tracing::field::Empty,
        );
        StatementGuard {
            class,
            start: Instant::now(),
            failed: false,
            actuals: Actuals::default(),
            span,
            text: None,
            scans: None,
        }
    }

    /// Counts what `scans` holds when the statement ends (an analytics
    /// plan's store scans, which fill it as the plan finishes).
    pub fn count_scans(&mut self, scans: Arc<parking_lot::Mutex<Actuals>>) {
        self.scans = Some(scans);
    }

    /// Records the statement in the statement log under `text` (its
    /// normalized form) too.
    pub fn with_text(mut self, text: Option<Arc<str>>) -> Self {
        self.text = text;
        self
    }

    /// The tag the store's key visualizer counts this statement's traffic
    /// under ([`crate::statements::tag`]; 0 without a text).
    pub fn tag(&self) -> u64 {
        self.text.as_deref().map_or(0, crate::statements::tag)
    }

    /// The statement's span (for `Instrument`).
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// The class is known only once parameters are bound (a prepared
    /// SELECT may be a point lookup or a scan).
    pub fn set_class(&mut self, class: StatementClass) {
        self.class = class;
        self.span.record("class", class.name());
    }

    /// What the statement did in the store.
    pub fn set_actuals(&mut self, a: &Actuals) {
        self.actuals = a.clone();
    }

    /// Rows written or returned, for statements without store actuals.
    pub fn set_rows(&mut self, rows: u64) {
        self.actuals.returned = rows;
    }

    /// Marks the statement failed.
    pub fn fail(&mut self) {
        self.failed = true;
    }
}

impl Drop for StatementGuard {
    fn drop(&mut self) {
        let elapsed = self.start.elapsed();
        if let Some(scans) = self.scans.take() {
            let s = scans.lock();
            self.actuals.scanned += s.scanned;
            self.actuals.retries += s.retries;
            self.actuals.backoff += s.backoff;
        }
        self.span.record("rows", self.actuals.returned);
        self.span.record("scanned", self.actuals.scanned);
        self.span.record("failed", self.failed);
        self.span.in_scope(|| {
            tracing::debug!(
                elapsed_ms = elapsed.as_secs_f64() * 1e3,
                retries = self.actuals.retries,
                "statement finished"
            );
        });
        telemetry().record(self.class, self.failed, elapsed, &self.actuals);
        if let Some(text) = &self.text {
            crate::statements::statements().record(
                text,
                self.class,
                self.failed,
                elapsed,
                &self.actuals,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counters and metric handles are found by `index()` in arrays laid
    /// out in `CLASSES` order.
    #[test]
    fn classes_are_listed_in_index_order() {
        for (i, class) in CLASSES.iter().enumerate() {
            assert_eq!(class.index(), i, "{}", class.name());
        }
    }
}
