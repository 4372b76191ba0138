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
use crate::error::{Result, StoreError};
use crate::query::{ContinuationToken, KeyBox, Page, PageRequest, Query};
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
    /// The query's spans clipped to `[lo, hi)`; for a segment that
    /// continues a read, the whole scan's query, ended at `hi`.
    pub query: Query,
    /// Where a segment that continues a read resumes.
    pub resume: Option<ContinuationToken>,
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
    /// Requests spent finding a remote table's PartitionKey boundaries.
    pub probes: u64,
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
        let stream = {
            let stats = stats.clone();
            move |rx| ScanStream {
                rx,
                stats,
                started: Instant::now(),
            }
        };
        // One segment (every row-range scan, and any scan of one server's
        // run): the reader's task runs it (see `Driven`). The spawner and
        // the forwarder below order several segments, which then run in
        // parallel as tasks of their own.
        if segments.len() == 1 {
            let seg = segments.into_iter().next().expect("one segment");
            let (store, table, st) = (self.clone(), table.to_owned(), stats.clone());
            return Ok(stream(Driven::new(out_rx, async move {
                scan_segment(&store, &table, seg, &opts, &st, &out_tx, None).await;
            })));
        }
        let store: Arc<dyn TableStore> = Arc::new(self.clone());
        let table = table.to_owned();
        spawn_sending(out_tx.clone(), async move {
            run_segments(store, &table, segments, &opts, &stats, out_tx).await;
        });
        Ok(stream(Driven::spawned(out_rx)))
    }
}

/// Spawns `work`, which sends pages into `tx`: should it panic, the reader
/// gets an error where its pages would have been, not a scan that looks
/// complete.
fn spawn_sending(
    tx: mpsc::Sender<Result<Page>>,
    work: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let task = spawn_tagged(work);
    tokio::spawn(async move {
        if let Err(e) = task.await
            && e.is_panic()
        {
            let _ = tx
                .send(Err(StoreError::Engine(format!("a scan task failed: {e}"))))
                .await;
        }
    });
}

/// Spawns `work` as part of the statement running here (its store traffic
/// counts against the statement in the key visualizer).
fn spawn_tagged<F>(work: F) -> tokio::task::JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(crate::api::statement_scope(
        crate::api::statement_tag(),
        work,
    ))
}

/// Reads `segments` in key order into `out`: each segment's pages from a
/// task of its own, at most `opts.parallelism` at once, started in key
/// order as permits free up, each buffering at most two pages ahead.
async fn run_segments(
    store: Arc<dyn TableStore>,
    table: &str,
    segments: Vec<Segment>,
    opts: &ScanOptions,
    stats: &Arc<Mutex<ScanStats>>,
    out: mpsc::Sender<Result<Page>>,
) {
    let (seg_tx, mut seg_rx) = mpsc::unbounded_channel::<mpsc::Receiver<Result<Page>>>();
    let permits = Arc::new(Semaphore::new(opts.parallelism.max(1)));
    // Spawner: starts segment tasks in key order as permits free up.
    let closed = out.clone();
    let (table, opts, st) = (table.to_owned(), opts.clone(), stats.clone());
    spawn_tagged(async move {
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
            let (store, table, opts, st) = (store.clone(), table.clone(), opts.clone(), st.clone());
            spawn_sending(tx.clone(), async move {
                let _permit = permit;
                scan_segment(store.as_ref(), &table, seg, &opts, &st, &tx, None).await;
            });
        }
    });
    // Forwarder: drains segments in key order into the output.
    while let Some(mut rx) = seg_rx.recv().await {
        while let Some(page) = rx.recv().await {
            if out.send(page).await.is_err() {
                return;
            }
        }
    }
}

/// Segments a remote scan is cut into per permit: more than the permits,
/// since sampled boundaries cut equal widths of key space, not equal counts.
const REMOTE_SEGMENTS_PER_PERMIT: usize = 4;

/// A scan of a remote service, whose range partitions are its own
/// business: the first page is one request; when the service says there is
/// more, the rest is cut at PartitionKey boundaries probed from the table
/// ([`super::sample`]) into segments read in parallel, still delivered in
/// key order. The first segment continues the first page's read up to the
/// first boundary. Scans with a pushed LIMIT, or allowed one task, go on
/// page by page.
pub fn remote(
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
    let (table, st) = (table.to_owned(), stats.clone());
    // A task of its own: it fetches the next page over the network while
    // the reader works through this one.
    spawn_sending(tx.clone(), async move {
        let whole = Segment {
            server: 0,
            lo: String::new(),
            hi: None,
            query,
            resume: None,
        };
        if opts.parallelism <= 1 || opts.limit.is_some() {
            scan_segment(store.as_ref(), &table, whole, &opts, &st, &tx, None).await;
            return;
        }
        let Some((resume, last)) = scan_segment(
            store.as_ref(),
            &table,
            whole.clone(),
            &opts,
            &st,
            &tx,
            Some(1),
        )
        .await
        else {
            return;
        };
        let (after, hi) = remaining(&whole.query, last.as_deref());
        let sample = super::sample::boundaries(
            store.clone(),
            &table,
            &after,
            hi.as_deref(),
            opts.parallelism * REMOTE_SEGMENTS_PER_PERMIT - 1,
            opts.parallelism * 2,
            &opts.retry,
        )
        .await;
        let boundaries = match sample {
            Ok(s) => {
                st.lock().probes += s.probes;
                s.boundaries
            }
            Err(e) => {
                tracing::debug!(table, error = %e, "sampling PartitionKey boundaries failed; scanning on in one task");
                Vec::new()
            }
        };
        let mut segments = vec![Segment {
            hi: boundaries.first().cloned(),
            resume: Some(resume),
            ..whole.clone()
        }];
        for (i, lo) in boundaries.iter().enumerate() {
            let hi = boundaries.get(i + 1).map(String::as_str);
            let spans = clip(&whole.query.spans, lo, hi);
            if !spans.is_empty() {
                segments.push(Segment {
                    server: 0,
                    lo: lo.clone(),
                    hi: hi.map(str::to_owned),
                    query: Query {
                        spans,
                        ..whole.query.clone()
                    },
                    resume: None,
                });
            }
        }
        st.lock().segments = segments.len();
        run_segments(store, &table, segments, &opts, &st, tx).await;
    });
    ScanStream {
        rx: Driven::spawned(rx),
        stats,
        started: Instant::now(),
    }
}

/// Where the rest of a scan lies after its first page: after the last key
/// read (or the spans' start), up to the spans' end (`None`: unbounded).
fn remaining(query: &Query, last: Option<&str>) -> (String, Option<String>) {
    let start = query
        .spans
        .iter()
        .map(|b| bound_key(&b.pk.lo).unwrap_or(""))
        .min()
        .unwrap_or("");
    let end = if query.spans.iter().any(|b| b.pk.hi == Bound::Unbounded) {
        None
    } else {
        query
            .spans
            .iter()
            .filter_map(|b| bound_key(&b.pk.hi))
            .max()
            .map(|h| format!("{h}\0"))
    };
    (last.unwrap_or(start).max(start).to_owned(), end)
}

/// Reads one segment page by page, following continuation tokens, into
/// `tx`. With `pages`, stops after that many pages and returns where the
/// read would go on and the last PartitionKey it returned (`None` when the
/// segment is complete, or the reader left).
async fn scan_segment(
    store: &dyn TableStore,
    table: &str,
    seg: Segment,
    opts: &ScanOptions,
    stats: &Mutex<ScanStats>,
    tx: &mpsc::Sender<Result<Page>>,
    pages: Option<u64>,
) -> Option<(ContinuationToken, Option<String>)> {
    // A segment continuing a read runs the whole scan's query: it ends at
    // `hi`, which the store clips the page at.
    let end = seg.resume.as_ref().and(seg.hi.clone());
    let mut req = PageRequest {
        encoded: opts.encoded,
        continuation: seg.resume.clone(),
        stop_at_partition: end.clone(),
        ..PageRequest::first(opts.page_size)
    };
    // Counted per segment: a later segment's rows must not stop an earlier
    // one, whose rows come first in key order.
    let mut returned = 0u64;
    let mut read = 0u64;
    let mut last_key = None;
    loop {
        if opts.limit.is_some_and(|l| returned >= l) {
            return None;
        }
        let mut retry = RetryStats::default();
        let page = with_retry(&opts.retry, &mut retry, || {
            store.query(table, &seg.query, &req)
        })
        .await;
        let mut page = match page {
            Ok(p) => p,
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                return None;
            }
        };
        let mut next = page.continuation.take();
        if let Some(end) = &end {
            // Whatever a store returned past the end belongs to the next
            // segment; a continuation past it is the next segment's too.
            page.entities.retain(|e| e.partition_key < *end);
            let keep = (0..page.encoded.len())
                .take_while(|&i| page.encoded.get(i).partition_key() < end.as_str())
                .count();
            page.encoded.truncate(keep);
            if page.next_partition_key.as_ref().is_some_and(|k| k >= end) {
                next = None;
            }
        }
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
        read += 1;
        if let Some(e) = page.entities.last() {
            last_key = Some(e.partition_key.clone());
        } else if !page.encoded.is_empty() {
            last_key = Some(
                page.encoded
                    .get(page.encoded.len() - 1)
                    .partition_key()
                    .to_owned(),
            );
        }
        if tx.send(Ok(page)).await.is_err() {
            return None;
        }
        match next {
            Some(t) if pages.is_some_and(|p| read >= p) => return Some((t, last_key)),
            Some(t) => req = req.resume(t),
            None => return None,
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
                resume: None,
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
