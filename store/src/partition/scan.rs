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
use std::ops::Bound;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::{Semaphore, mpsc};

use super::PartitionedStore;
use super::map::TableMap;
use crate::api::TableStore;
use crate::driven::Driven;
use crate::error::Result;
use crate::query::{KeyBox, Page, PageRequest, Query};
use crate::retry::{RetryPolicy, RetryStats, with_retry};

/// Most partition counts [`PartitionedStore::split_by_counts`] reads.
pub const SPLIT_STATS_READ: usize = 100_000;

fn bound_key(b: &Bound<String>) -> Option<&str> {
    match b {
        Bound::Included(k) | Bound::Excluded(k) => Some(k),
        Bound::Unbounded => None,
    }
}

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
    /// Pages carry undecoded entities ([`PageRequest::encoded`]).
    pub encoded: bool,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            page_size: crate::limits::MAX_PAGE_SIZE,
            parallelism: 4,
            retry: RetryPolicy::default(),
            limit: None,
            encoded: false,
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
    rx: Driven<Result<Page>>,
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
        self.shared.with_map(table, |map| cut(map, query))
    }

    /// Cuts `spans` into at most `pieces` runs of consecutive
    /// PartitionKeys holding about the same number of entities (from the
    /// per-partition counts), each of at least `min_entities`; fewer pieces
    /// when the spans hold fewer entities. The pieces together select
    /// exactly what `spans` does. Used to scan one large range partition
    /// on several cores: the partition layer's own ranges split only under
    /// load, and a bulk-loaded table is often one range.
    ///
    /// Deliberately limited: at most [`SPLIT_STATS_READ`] partition counts
    /// are read; partitions beyond them all go to the last piece.
    pub fn split_by_counts(
        &self,
        table: &str,
        spans: &[KeyBox],
        pieces: usize,
        min_entities: u64,
    ) -> Result<Vec<Vec<KeyBox>>> {
        let whole = || Ok(vec![spans.to_vec()]);
        if pieces < 2 || spans.is_empty() {
            return whole();
        }
        // The counts to read: from the lowest span start (`None`, which
        // sorts first, when one is unbounded) to the highest span end.
        let lo = spans.iter().map(|b| bound_key(&b.pk.lo)).min().flatten();
        let hi = if spans.iter().any(|b| b.pk.hi == Bound::Unbounded) {
            None
        } else {
            spans.iter().filter_map(|b| bound_key(&b.pk.hi)).max()
        };
        let counts = self.partition_stats_blocking(
            table,
            lo.map_or(Bound::Unbounded, Bound::Included),
            hi.map_or(Bound::Unbounded, Bound::Included),
            SPLIT_STATS_READ,
        )?;
        let counts: Vec<_> = counts
            .into_iter()
            .filter(|c| spans.iter().any(|b| b.pk.contains(&c.partition_key)))
            .collect();
        let total: u64 = counts.iter().map(|c| c.entities).sum();
        let n = pieces.min((total / min_entities.max(1)) as usize);
        if n < 2 {
            return whole();
        }
        // Cut before the PartitionKey where the running count passes the
        // next n-th of the total.
        let mut cuts: Vec<&str> = Vec::with_capacity(n - 1);
        let mut seen = 0u64;
        for c in &counts {
            let next = total * (cuts.len() as u64 + 1) / n as u64;
            if seen >= next && cuts.len() + 1 < n {
                cuts.push(&c.partition_key);
            }
            seen += c.entities;
        }
        let mut out = Vec::with_capacity(cuts.len() + 1);
        for i in 0..=cuts.len() {
            let lo = if i == 0 { "" } else { cuts[i - 1] };
            let hi = cuts.get(i).copied();
            let piece = clip(spans, lo, hi);
            if !piece.is_empty() {
                out.push(piece);
            }
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
        // run): the reader's task runs it (see `Driven`). The spawner and
        // the forwarder below order several segments, which then run in
        // parallel as tasks of their own.
        if segments.len() == 1 {
            let seg = segments.into_iter().next().expect("one segment");
            let (store, table, st) = (self.clone(), table.to_owned(), stats.clone());
            return Ok(stream(Driven::new(out_rx, async move {
                scan_segment(&store, &table, seg, &opts, &st, &out_tx).await;
            })));
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
        Ok(stream(Driven::spawned(out_rx)))
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
    // A task of its own: it fetches the next page over the network while
    // the reader works through this one.
    tokio::spawn(async move {
        scan_segment(store.as_ref(), &table, seg, &opts, &st, &tx).await;
    });
    ScanStream {
        rx: Driven::spawned(rx),
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
    let mut req = PageRequest {
        encoded: opts.encoded,
        ..PageRequest::first(opts.page_size)
    };
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
            s.returned += page.len() as u64;
            s.servers.insert(seg.server);
            s.retry.retries += retry.retries;
            s.retry.backoff += retry.backoff;
            if next.is_some() {
                s.tokens_followed += 1;
            }
        }
        returned += page.len() as u64;
        if tx.send(Ok(page)).await.is_err() {
            return;
        }
        match next {
            Some(t) => req = req.resume(t),
            None => return,
        }
    }
}

/// The per-server segments of `query` over a partition map
/// ([`PartitionedStore::segments`]).
fn cut(map: &TableMap, query: &Query) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::new();
    let mut i = 0;
    while i < map.ranges.len() {
        let server = map.ranges[i].server;
        let mut j = i + 1;
        while j < map.ranges.len() && map.ranges[j].server == server {
            j += 1;
        }
        let lo = map.ranges[i].lo.as_str();
        let hi = map.ranges.get(j).map(|r| r.lo.as_str());
        let spans = clip(&query.spans, lo, hi);
        if !spans.is_empty() {
            out.push(Segment {
                server,
                lo: lo.to_owned(),
                hi: hi.map(str::to_owned),
                query: Query {
                    spans,
                    filter: query.filter.clone(),
                    projection: query.projection.clone(),
                },
            });
        }
        i = j;
    }
    out
}

/// The parts of `spans` whose PartitionKeys lie in `[lo, hi)` (`hi` `None`:
/// no upper bound); spans left empty are dropped.
fn clip(spans: &[KeyBox], lo: &str, hi: Option<&str>) -> Vec<KeyBox> {
    spans
        .iter()
        .map(|b| KeyBox {
            pk: b.pk.clip(lo, hi),
            rk: b.rk.clone(),
        })
        .filter(|b| !b.pk.is_empty() && !b.rk.is_empty())
        .collect()
}
