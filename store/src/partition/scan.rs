//! Parallel scans: a partition-range or full scan is cut into **segments**,
//! one per run of consecutive range partitions on one server, each scanned
//! page by page (following continuation tokens, retrying ServerBusy with the
//! retry policy) by its own task. At most `parallelism` segments run at
//! once; pages come back in clustered-key order because the consumer reads
//! segments in key order and each segment buffers at most two pages ahead.
//!
//! Segments take their permits in key order, so the segment the consumer is
//! reading always holds one: no deadlock, and memory stays bounded by
//! `parallelism × 2` pages.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{Semaphore, mpsc};

use super::PartitionedStore;
use super::retry::{RetryPolicy, RetryStats, with_retry};
use crate::api::TableStore;
use crate::error::Result;
use crate::query::{KeyBox, Page, PageRequest, Query};

/// How to run a scan.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// Entities per page (1..=1000).
    pub page_size: usize,
    /// Segments scanned concurrently.
    pub parallelism: usize,
    /// Retry policy for ServerBusy and timeouts.
    pub retry: RetryPolicy,
    /// A segment stops requesting pages once it returned this many
    /// entities (a pushed LIMIT): no read-ahead past what the caller can use.
    pub limit: Option<u64>,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            page_size: crate::limits::MAX_PAGE_SIZE,
            parallelism: 4,
            retry: RetryPolicy::default(),
            limit: None,
        }
    }
}

/// A run of consecutive range partitions on one server, and the query
/// clipped to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// Serving partition server.
    pub server: usize,
    /// Inclusive lower PartitionKey bound.
    pub lo: String,
    /// Exclusive upper bound (`None` = end of table).
    pub hi: Option<String>,
    /// The query's spans clipped to `[lo, hi)`.
    pub query: Query,
}

/// What a scan did, for EXPLAIN ANALYZE.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScanStats {
    /// Pages read.
    pub pages: u64,
    /// Continuation tokens followed.
    pub tokens_followed: u64,
    /// Entities scanned by the store.
    pub scanned: u64,
    /// Entities returned.
    pub returned: u64,
    /// Servers that served pages.
    pub servers: BTreeSet<usize>,
    /// Throttled retries and time spent backing off.
    pub retry: RetryStats,
    /// Segments the scan was cut into.
    pub segments: usize,
    /// Wall time until the last page arrived.
    pub elapsed: Duration,
}

/// Pages of a running scan, in key order.
#[derive(Debug)]
pub struct ScanStream {
    rx: mpsc::Receiver<Result<Page>>,
    stats: Arc<Mutex<ScanStats>>,
    started: Instant,
}

impl ScanStream {
    /// The next page; `None` when the scan is complete. An error ends it.
    pub async fn next_page(&mut self) -> Option<Result<Page>> {
        let p = self.rx.recv().await;
        self.stats.lock().elapsed = self.started.elapsed();
        p
    }

    /// Reads every page and returns all entities (tests and small scans).
    pub async fn collect(mut self) -> Result<(Vec<crate::Entity>, ScanStats)> {
        let mut out = Vec::new();
        while let Some(p) = self.next_page().await {
            out.extend(p?.entities);
        }
        Ok((out, self.stats()))
    }

    /// Statistics so far.
    pub fn stats(&self) -> ScanStats {
        self.stats.lock().clone()
    }
}

impl PartitionedStore {
    /// Cuts `query` on `table` into per-server segments, in key order;
    /// segments the query's spans do not touch are left out.
    pub fn segments(&self, table: &str, query: &Query) -> Result<Vec<Segment>> {
        let (_, map) = self.shared.map_of(table)?;
        let mut out: Vec<Segment> = Vec::new();
        let mut i = 0;
        while i < map.ranges.len() {
            let server = map.ranges[i].server;
            let mut j = i + 1;
            while j < map.ranges.len() && map.ranges[j].server == server {
                j += 1;
            }
            let lo = map.ranges[i].lo.clone();
            let hi = map.ranges.get(j).map(|r| r.lo.clone());
            let spans: Vec<KeyBox> = query
                .spans
                .iter()
                .map(|b| KeyBox {
                    pk: b.pk.clip(&lo, hi.as_deref()),
                    rk: b.rk.clone(),
                })
                .filter(|b| !b.pk.is_empty() && !b.rk.is_empty())
                .collect();
            if !spans.is_empty() {
                out.push(Segment {
                    server,
                    lo,
                    hi,
                    query: Query {
                        spans,
                        filter: query.filter.clone(),
                        projection: query.projection.clone(),
                    },
                });
            }
            i = j;
        }
        Ok(out)
    }

    /// Starts a parallel scan. Must be called inside a tokio runtime.
    pub fn scan(&self, table: &str, query: &Query, opts: ScanOptions) -> Result<ScanStream> {
        let segments = self.segments(table, query)?;
        let stats = Arc::new(Mutex::new(ScanStats {
            segments: segments.len(),
            ..Default::default()
        }));
        let (out_tx, out_rx) = mpsc::channel::<Result<Page>>(2);
        let stream = |rx| ScanStream {
            rx,
            stats: stats.clone(),
            started: Instant::now(),
        };
        // One segment (every row-range scan, and any scan of one server's
        // run): its task feeds the output itself. The spawner and the
        // forwarder below order several segments; for one they were two
        // more task hand-offs per page.
        if segments.len() == 1 {
            let seg = segments.into_iter().next().expect("one segment");
            let (store, table, st) = (self.clone(), table.to_owned(), stats.clone());
            tokio::spawn(async move {
                scan_segment(&store, &table, seg, &opts, &st, &out_tx).await;
            });
            return Ok(stream(out_rx));
        }
        let (seg_tx, mut seg_rx) = mpsc::unbounded_channel::<mpsc::Receiver<Result<Page>>>();
        let permits = Arc::new(Semaphore::new(opts.parallelism.max(1)));

        // Spawner: starts segment tasks in key order as permits free up.
        let store = self.clone();
        let table = table.to_owned();
        let closed = out_tx.clone();
        let st = stats.clone();
        tokio::spawn(async move {
            for seg in segments {
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    return;
                };
                if closed.is_closed() {
                    return;
                }
                let (tx, rx) = mpsc::channel(2);
                if seg_tx.send(rx).is_err() {
                    return;
                }
                let (store, table, opts, st) =
                    (store.clone(), table.clone(), opts.clone(), st.clone());
                tokio::spawn(async move {
                    let _permit = permit;
                    scan_segment(&store, &table, seg, &opts, &st, &tx).await;
                });
            }
        });
        // Forwarder: drains segments in key order into the output.
        tokio::spawn(async move {
            while let Some(mut rx) = seg_rx.recv().await {
                while let Some(page) = rx.recv().await {
                    if out_tx.send(page).await.is_err() {
                        return;
                    }
                }
            }
        });
        Ok(stream(out_rx))
    }
}

/// A scan that follows continuation tokens page by page in one task: for a
/// remote service, whose range partitions are its own business (one segment,
/// "server 0").
pub fn sequential(
    store: Arc<dyn TableStore>,
    table: &str,
    query: Query,
    opts: ScanOptions,
) -> ScanStream {
    let stats = Arc::new(Mutex::new(ScanStats {
        segments: 1,
        ..Default::default()
    }));
    let (tx, rx) = mpsc::channel::<Result<Page>>(2);
    let seg = Segment {
        server: 0,
        lo: String::new(),
        hi: None,
        query,
    };
    let (table, st) = (table.to_owned(), stats.clone());
    tokio::spawn(async move {
        scan_segment(store.as_ref(), &table, seg, &opts, &st, &tx).await;
    });
    ScanStream {
        rx,
        stats,
        started: Instant::now(),
    }
}

async fn scan_segment(
    store: &dyn TableStore,
    table: &str,
    seg: Segment,
    opts: &ScanOptions,
    stats: &Mutex<ScanStats>,
    tx: &mpsc::Sender<Result<Page>>,
) {
    let mut req = PageRequest::first(opts.page_size);
    // Counted per segment: a later segment's rows must not stop an earlier
    // one, whose rows come first in key order.
    let mut returned = 0u64;
    loop {
        if opts.limit.is_some_and(|l| returned >= l) {
            return;
        }
        let mut retry = RetryStats::default();
        let page = with_retry(&opts.retry, &mut retry, || {
            store.query(table, &seg.query, &req)
        })
        .await;
        let page = match page {
            Ok(p) => p,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return;
            }
        };
        let next = page.continuation.clone();
        {
            let mut s = stats.lock();
            s.pages += 1;
            s.scanned += page.scanned;
            s.returned += page.entities.len() as u64;
            s.servers.insert(seg.server);
            s.retry.retries += retry.retries;
            s.retry.backoff += retry.backoff;
            if next.is_some() {
                s.tokens_followed += 1;
            }
        }
        returned += page.entities.len() as u64;
        if tx.send(Ok(page)).await.is_err() {
            return;
        }
        match next {
            Some(t) => req = req.resume(t),
            None => return,
        }
    }
}
