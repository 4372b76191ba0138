//! The native path: a bound SELECT drives the store and yields Arrow record
//! batches, one per store page, following continuation tokens with bounded
//! memory (a two-batch channel; dropping the stream stops the scan).
//!
//! Points are direct lookups (one request per key); everything else is a
//! segment scan of the partition layer (parallel when it spans servers).
//! The query's work runs in the reader's task ([`Driven`]): no task
//! hand-off per batch. Throttled requests are
//! retried with the session's retry policy; a scan resumes from its
//! continuation token.
//!
//! Also owns what a run records ([`Actuals`]) and the store query a bound
//! SELECT becomes ([`store_query`]). EXPLAIN reads both from here, so
//! EXPLAIN depends on execution and execution knows nothing of EXPLAIN.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Date32Builder, FixedSizeBinaryBuilder, Float64Builder,
    Int16Builder, Int32Builder, Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use parking_lot::Mutex;
use tablegate_catalog::types::MICROS_PER_DAY;
use tablegate_catalog::{Role, SqlType, TableDef};
use tablegate_store::driven::Driven;
use tablegate_store::partition::scan::ScanOptions;
use tablegate_store::retry::{RetryStats, with_retry};
use tablegate_store::{
    Backend, EncodedEntities, EncodedEntity, Entity, KeyBox, KeyOrder, Query, RawProperty,
    RetryPolicy, TableStore, Value, ValueRef,
};
use tokio::sync::mpsc;

use crate::error::{PlanError, Result};
use crate::global::Maintainer;
use crate::index;
use crate::keys::AccessClass;
use crate::plan::{BoundSelect, OutputColumn, Route};
use crate::txn::Overlay;

/// Point lookups of one query in flight at once.
const POINT_LOOKUPS_AT_ONCE: usize = 8;

/// How the native path runs.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// Entities per store page (1..=1000).
    pub page_size: usize,
    /// Retry policy for ServerBusy.
    pub retry: RetryPolicy,
    /// Server segments scanned in parallel.
    pub parallelism: usize,
    /// `tablegate.allow_full_scan`.
    pub allow_full_scan: bool,
    /// `tablegate.use_indexes`: whether rows may be looked up through an
    /// index.
    pub use_indexes: IndexMode,
    /// The open transaction's staged writes: reads see them.
    pub overlay: Option<Arc<Overlay>>,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            page_size: 1000,
            retry: RetryPolicy::default(),
            parallelism: 4,
            allow_full_scan: true,
            use_indexes: IndexMode::On,
            overlay: None,
        }
    }
}

/// `tablegate.use_indexes`: when a query looks rows up through an index
/// that applies to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexMode {
    /// Never (`off`): the spans are scanned, as without the index.
    Off,
    /// When the lookup costs less than the scan it replaces, by the
    /// estimate EXPLAIN prints (`on`, the default).
    On,
    /// Whenever one applies (`force`), to see what a lookup costs.
    Force,
}

/// What an executed access actually did: recorded while it runs, reported
/// by EXPLAIN ANALYZE and the gateway's telemetry.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Actuals {
    /// Entities the store read.
    pub scanned: u64,
    /// A global index the run could have used but did not: this gateway
    /// had not applied the changes before it within
    /// [`crate::global::CATCH_UP_WAIT`].
    pub index_skipped: Option<String>,
    /// Rows returned.
    pub returned: u64,
    /// Pages read.
    pub pages: u64,
    /// Point lookups made.
    pub lookups: u64,
    /// Continuation tokens followed.
    pub tokens_followed: u64,
    /// Servers that served pages.
    pub servers: BTreeSet<usize>,
    /// The index looked in, if any.
    pub index: Option<String>,
    /// The rows came from the index's entries (INCLUDE covered the query).
    pub index_only: bool,
    /// Throttled retries.
    pub retries: u32,
    /// Time spent backing off.
    pub backoff: Duration,
    /// Wall time.
    pub elapsed: Duration,
    /// Segments the scan was cut into.
    pub segments: usize,
    /// Requests spent finding a remote table's PartitionKey boundaries.
    pub probes: u64,
    /// Property values read as NULL because another writer stored them
    /// with a different EDM type than the column's (remote tables only).
    pub type_mismatches: u64,
}

/// The store query a bound access sends (spans, filter, projection);
/// EXPLAIN estimates this same query.
pub fn store_query(b: &BoundSelect) -> Query {
    let mut projection = b.plan.store_projection();
    if let Some(f) = &b.access.filter {
        f.properties(&mut projection);
    }
    Query {
        // A table with indexes holds their entries after its rows in each
        // partition: reads of the table stop below them.
        spans: tablegate_catalog::index::clip_to_user_rows(&b.plan.table, &b.access.spans),
        filter: b.access.filter.clone(),
        projection: Some(projection),
    }
}

/// Record batches of a running query.
#[derive(Debug)]
pub struct RowStream {
    schema: SchemaRef,
    /// Batches, made by the query's work in the reader's own task (see
    /// [`Driven`]): a spawned task's hand-off per batch (a wake-up on
    /// another thread) cost more than a point lookup or a 100-row range.
    rx: Driven<Result<RecordBatch>>,
    actuals: Arc<Mutex<Actuals>>,
    class: AccessClass,
}

impl RowStream {
    /// The result schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The next batch; `None` at the end.
    pub async fn next(&mut self) -> Option<Result<RecordBatch>> {
        self.rx.recv().await
    }

    /// The access class of the bound query (known once parameters are).
    pub fn class(&self) -> AccessClass {
        self.class
    }

    /// What the query did so far.
    pub fn actuals(&self) -> Actuals {
        self.actuals.lock().clone()
    }

    /// Reads everything (tests, EXPLAIN ANALYZE).
    pub async fn collect(mut self) -> Result<(Vec<RecordBatch>, Actuals)> {
        let mut v = Vec::new();
        while let Some(b) = self.next().await {
            v.push(b?);
        }
        Ok((v, self.actuals()))
    }
}

/// Refuses what the native path cannot run (engine constructs, residuals
/// the store cannot evaluate, full scans under the guardrail).
fn check_native(b: &BoundSelect, opts: &ExecOptions, global: bool) -> Result<()> {
    if let Route::Engine(reason) = &b.plan.route {
        return Err(PlanError::NeedsAnalytics {
            reason: reason.clone(),
        });
    }
    if b.access.residual_needs_engine {
        return Err(PlanError::NeedsAnalytics {
            reason: format!(
                "a condition the store cannot evaluate ({})",
                b.access
                    .residual
                    .as_ref()
                    .map(|r| r.to_string())
                    .unwrap_or_default()
            ),
        });
    }
    // A global index lookup (when this run makes one) is not a full scan.
    let global = global
        && crate::explain::IndexUse::allowed(opts, &b.plan.table.name)
            == crate::explain::IndexUse::On
        && crate::global::choose(&b.plan.table, &b.access).is_some();
    if b.access.class == AccessClass::FullScan && !opts.allow_full_scan && !global {
        return Err(PlanError::FullScanRefused {
            table: b.plan.table.name.clone(),
            hint: format!(
                "add a condition on {} (the PartitionKey), or SET tablegate.allow_full_scan = on",
                b.plan.table.partition_key
            ),
        });
    }
    Ok(())
}

/// Starts a bound SELECT on the native path. Takes the bound query: its
/// task owns it (a copy per execution was measurable on point lookups).
pub fn execute(store: &Backend, b: BoundSelect, opts: &ExecOptions) -> Result<RowStream> {
    execute_indexed(store, None, b, opts)
}

/// [`execute`], with global indexes read when `global` (this gateway's
/// maintainer, which lookups wait for) is given.
pub fn execute_indexed(
    store: &Backend,
    global: Option<&Arc<Maintainer>>,
    b: BoundSelect,
    opts: &ExecOptions,
) -> Result<RowStream> {
    check_native(&b, opts, global.is_some())?;
    let schema = b.plan.result_schema();
    let actuals = Arc::new(Mutex::new(Actuals::default()));
    let (tx, rx) = mpsc::channel(2);
    let class = b.access.class;
    let task = Task {
        store: store.clone(),
        global: global.cloned(),
        b,
        opts: opts.clone(),
        out: Out::Batches(schema.clone(), tx),
        actuals: actuals.clone(),
    };
    Ok(RowStream {
        schema,
        rx: Driven::new(rx, task.run_to_end()),
        actuals,
        class,
    })
}

/// Entity pages of a running scan (UPDATE and DELETE read through this).
#[derive(Debug)]
pub struct EntityStream {
    rx: Driven<Result<Vec<Entity>>>,
}

impl EntityStream {
    /// The next page of matched entities, in key order; `None` at the end.
    pub async fn next(&mut self) -> Option<Result<Vec<Entity>>> {
        self.rx.recv().await
    }
}

/// Starts a bound SELECT that yields whole entities instead of rows.
pub fn scan_entities(store: &Backend, b: &BoundSelect, opts: &ExecOptions) -> Result<EntityStream> {
    check_native(b, opts, false)?;
    let (tx, rx) = mpsc::channel(2);
    let task = Task {
        store: store.clone(),
        global: None,
        b: b.clone(),
        opts: opts.clone(),
        out: Out::Entities(tx),
        actuals: Arc::new(Mutex::new(Actuals::default())),
    };
    Ok(EntityStream {
        rx: Driven::new(rx, task.run_to_end()),
    })
}

/// Where a task's rows go.
enum Out {
    /// Arrow record batches of the plan's columns.
    Batches(SchemaRef, mpsc::Sender<Result<RecordBatch>>),
    /// Whole entities.
    Entities(mpsc::Sender<Result<Vec<Entity>>>),
}

impl Out {
    async fn fail(&self, e: PlanError) {
        match self {
            Out::Batches(_, tx) => {
                let _ = tx.send(Err(e)).await;
            }
            Out::Entities(tx) => {
                let _ = tx.send(Err(e)).await;
            }
        }
    }
}

struct Task {
    store: Backend,
    global: Option<Arc<Maintainer>>,
    b: BoundSelect,
    opts: ExecOptions,
    out: Out,
    actuals: Arc<Mutex<Actuals>>,
}

/// Applies OFFSET and LIMIT across batches.
struct Window {
    skip: u64,
    left: Option<u64>,
}

impl Window {
    /// The slice of `n` rows to keep: (start, len).
    fn take(&mut self, n: usize) -> (usize, usize) {
        let n = n as u64;
        let skip = self.skip.min(n);
        self.skip -= skip;
        let mut len = n - skip;
        if let Some(left) = &mut self.left {
            len = len.min(*left);
            *left -= len;
        }
        (skip as usize, len as usize)
    }

    fn done(&self) -> bool {
        self.left == Some(0)
    }
}

impl Task {
    /// Runs the query to its end; an error goes to the reader.
    async fn run_to_end(mut self) {
        let started = Instant::now();
        let r = match self.use_index().await {
            Ok(false) => self.run().await,
            Ok(true) => Ok(()),
            Err(e) => Err(e),
        };
        self.actuals.lock().elapsed = started.elapsed();
        if let Err(e) = r {
            self.out.fail(e).await;
        }
    }

    /// Replaces the spans by the base entities an index lookup names (see
    /// [`crate::index`], [`crate::global`]), when the query allows one; or
    /// answers the query from the entries when they cover it (`true`).
    async fn use_index(&mut self) -> Result<bool> {
        use crate::explain::IndexUse;
        let table = &self.b.plan.table;
        if IndexUse::allowed(&self.opts, &table.name) != IndexUse::On {
            return Ok(false);
        }
        let Some((p, span)) = crate::explain::chosen(&self.b) else {
            return Ok(false);
        };
        // A global index is read only with this gateway's maintainer to
        // wait for (UPDATE and DELETE read the rows themselves).
        let maintainer = match (&span, &self.global) {
            (Some(_), None) => return Ok(false),
            (Some(_), Some(m)) => Some(m.clone()),
            (None, _) => None,
        };
        // Weighed against the scan by the estimate EXPLAIN prints.
        if self.opts.use_indexes == IndexMode::On {
            let (store, b, page) = (self.store.clone(), self.b.clone(), self.opts.page_size);
            let est =
                tokio::task::spawn_blocking(move || crate::explain::estimate(&store, &b, page))
                    .await
                    .map_err(|e| {
                        PlanError::Store(tablegate_store::StoreError::Engine(e.to_string()))
                    })??;
            let mut est = est;
            if !matches!(self.out, Out::Batches(..)) {
                est.index = est.index.map(crate::explain::IndexCost::with_row_lookups);
            }
            if IndexUse::decide(&self.opts, &self.b, &est) != IndexUse::On {
                return Ok(false);
            }
        }
        let index = p.index;
        let covered = span.is_none()
            && matches!(self.out, Out::Batches(..))
            && index::covering(&self.b, &table.indexes[index]);
        let found = match (&span, &maintainer) {
            (Some(span), Some(m)) => {
                if !m.caught_up(&table.name, crate::global::CATCH_UP_WAIT).await {
                    // Too far behind to answer from: scan instead.
                    let name = &table.indexes[index].name;
                    if self.b.access.class == AccessClass::FullScan && !self.opts.allow_full_scan {
                        return Err(PlanError::FullScanRefused {
                            table: table.name.clone(),
                            hint: format!(
                                "global index \"{name}\" is behind this gateway's writes (see tablegate.indexes); try again, or SET tablegate.allow_full_scan = on"
                            ),
                        });
                    }
                    self.actuals.lock().index_skipped = Some(name.clone());
                    return Ok(false);
                }
                let mut found = crate::global::probe(
                    &self.store,
                    table,
                    &table.indexes[index],
                    span,
                    &self.opts.retry,
                )
                .await?;
                // Only rows the query's own key ranges hold are its rows.
                let spans = &self.b.access.spans;
                found
                    .keys
                    .retain(|(pk, rk)| spans.iter().any(|s| s.contains(pk, rk)));
                found
            }
            _ => index::probe(&self.store, table, &p, covered, &self.opts.retry).await?,
        };
        {
            let mut a = self.actuals.lock();
            a.scanned += found.entries;
            a.pages += found.requests;
            a.index = Some(table.indexes[index].name.clone());
            a.index_only = covered;
        }
        if covered {
            let access = &self.b.access;
            let rows: Vec<Entity> = found
                .rows
                .into_iter()
                .filter(|e| access.filter.as_ref().is_none_or(|f| f.matches(e)))
                .collect();
            let mut window = Window {
                skip: self.b.offset,
                left: self.b.limit,
            };
            self.emit(&rows, &mut window).await?;
            return Ok(true);
        }
        let access = &mut self.b.access;
        access.spans = found
            .keys
            .into_iter()
            .map(|(pk, rk)| KeyBox::point(pk, rk))
            .collect();
        // The filter stays: every base entity is tested again.
        access.class = if access.spans.is_empty() {
            AccessClass::Empty
        } else {
            AccessClass::Point
        };
        Ok(false)
    }

    async fn run(&self) -> Result<()> {
        let access = &self.b.access;
        let table = self.b.plan.table.name.as_str();
        let overlay = self.opts.overlay.as_deref();
        let mut window = Window {
            skip: self.b.offset,
            left: self.b.limit,
        };
        if window.done() || access.class == AccessClass::Empty {
            return Ok(());
        }
        if access.class == AccessClass::Point {
            use futures::{StreamExt, TryStreamExt};
            // Each lookup is a store round trip (a network one on Azure):
            // a few run at once; the rows keep the spans' order. Owned
            // keys: a stream over borrowed ones is not Send enough for the
            // task this runs in.
            let keys: Vec<(String, String)> = access
                .spans
                .iter()
                .map(|s| {
                    (
                        s.pk.as_point().expect("point class").to_owned(),
                        s.rk.as_point().expect("point class").to_owned(),
                    )
                })
                .filter(|(_, rk)| !rk.starts_with(tablegate_catalog::INDEX_ROW_PREFIX))
                .collect();
            let candidates: Vec<Option<Entity>> = futures::stream::iter(keys)
                .map(|(pk, rk)| async move {
                    if let Some(staged) = overlay.and_then(|o| o.get(table, &pk, &rk)) {
                        return Ok(staged.cloned());
                    }
                    let mut stats = RetryStats::default();
                    let got = with_retry(&self.opts.retry, &mut stats, || {
                        self.store.get(table, &pk, &rk)
                    })
                    .await?;
                    let mut a = self.actuals.lock();
                    a.lookups += 1;
                    a.retries += stats.retries;
                    a.backoff += stats.backoff;
                    if got.is_some() {
                        a.scanned += 1;
                        a.servers.extend(self.server_of(&pk));
                    }
                    Ok::<_, PlanError>(got)
                })
                .buffered(POINT_LOOKUPS_AT_ONCE)
                .try_collect()
                .await?;
            let rows: Vec<Entity> = candidates
                .into_iter()
                .flatten()
                .filter(|e| access.filter.as_ref().is_none_or(|f| f.matches(e)))
                .collect();
            return self.emit(&rows, &mut window).await.map(|_| ());
        }
        // Staged entities of the open transaction that this query selects,
        // merged into the store's pages in key order; the store's versions
        // of staged keys are hidden.
        let mut extras: std::collections::VecDeque<Entity> = overlay
            .filter(|o| o.table.eq_ignore_ascii_case(table))
            .map(|o| {
                o.rows
                    .values()
                    .flatten()
                    .filter(|e| {
                        access
                            .spans
                            .iter()
                            .any(|s| s.contains(&e.partition_key, &e.row_key))
                    })
                    .filter(|e| access.filter.as_ref().is_none_or(|f| f.matches(e)))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let hidden = overlay.map_or(0, |o| o.rows.len() as u64);
        let query = store_query(&self.b);
        // Ordered by the key, over a store that returns another order:
        // Cosmos DB's (none) is sorted whole; Azure Table Storage's (UTF-16)
        // streams while every key is below U+D800, where both orders agree,
        // and sorts the rest from the first key that is not (the rows before
        // it come first in both orders).
        let order = self.store.key_order();
        let sorting = self.b.plan.ordered && order != KeyOrder::CodePoint;
        let mut sorted: Option<Vec<Entity>> =
            (sorting && order == KeyOrder::Unordered).then(Vec::new);
        let parallelism = if access.class == AccessClass::RowRange
            || (sorting && sorted.is_none() && self.b.limit.is_some())
        {
            1
        } else {
            self.opts.parallelism
        };
        // LIMIT is pushed into the store: a page counts returned entities,
        // so no page needs more than LIMIT + OFFSET of them.
        let page_size = match self.b.limit {
            Some(_) if sorted.is_some() => self.opts.page_size,
            Some(l) => {
                (l.saturating_add(self.b.offset)).clamp(1, self.opts.page_size as u64) as usize
            }
            None => self.opts.page_size,
        };
        let mut stream = self.store.scan(
            table,
            &query,
            ScanOptions {
                page_size,
                // A sort needs every row: the LIMIT applies after it.
                limit: self
                    .b
                    .limit
                    .filter(|_| !sorting)
                    .map(|l| l.saturating_add(self.b.offset).saturating_add(hidden)),
                parallelism,
                retry: self.opts.retry.clone(),
                // Record batches are built straight from the store's
                // encoding, unless staged rows must be merged in.
                encoded: overlay.is_none() && matches!(self.out, Out::Batches(..)),
            },
        )?;
        while let Some(page) = stream.next_page().await {
            let page = page?;
            {
                let s = stream.stats();
                let mut a = self.actuals.lock();
                a.scanned = s.scanned;
                a.pages = s.pages;
                a.tokens_followed = s.tokens_followed;
                a.servers = s.servers.clone();
                a.retries = s.retry.retries;
                a.backoff = s.retry.backoff;
                a.segments = s.segments;
                a.probes = s.probes;
            }
            if !page.encoded.is_empty() {
                if !self.emit_encoded(&page.encoded, &mut window).await? {
                    return Ok(());
                }
                continue;
            }
            let rows = match overlay {
                None => page.entities,
                Some(o) => {
                    let last = page
                        .entities
                        .last()
                        .map(|e| (e.partition_key.clone(), e.row_key.clone()));
                    let mut merged = Vec::with_capacity(page.entities.len());
                    for e in page.entities {
                        if o.covers(table, &e.partition_key, &e.row_key) {
                            continue;
                        }
                        while extras.front().is_some_and(|x| key(x) < key(&e)) {
                            merged.extend(extras.pop_front());
                        }
                        merged.push(e);
                    }
                    if let Some(last) = last {
                        while extras.front().is_some_and(|x| {
                            (x.partition_key.as_str(), x.row_key.as_str())
                                < (last.0.as_str(), last.1.as_str())
                        }) {
                            merged.extend(extras.pop_front());
                        }
                    }
                    merged
                }
            };
            let rows = match &mut sorted {
                Some(buffer) => {
                    buffer.extend(rows);
                    continue;
                }
                None if sorting => {
                    let mut rows = rows;
                    if let Some(i) = rows.iter().position(|e| !below_surrogates(e)) {
                        sorted = Some(rows.split_off(i));
                    }
                    rows
                }
                None => rows,
            };
            if !self.emit(&rows, &mut window).await? {
                return Ok(());
            }
        }
        let rest: Vec<Entity> = extras.into_iter().collect();
        if let Some(mut buffer) = sorted {
            buffer.extend(rest);
            buffer.sort_unstable_by(|a, b| key(a).cmp(&key(b)));
            for chunk in buffer.chunks(self.opts.page_size.max(1)) {
                if !self.emit(chunk, &mut window).await? {
                    return Ok(());
                }
            }
            return Ok(());
        }
        self.emit(&rest, &mut window).await?;
        Ok(())
    }

    fn server_of(&self, pk: &str) -> Option<usize> {
        self.store.server_of(&self.b.plan.table.name, pk)
    }

    /// [`Task::emit`] for undecoded entities (embedded store, no overlay:
    /// no type mismatches to count, nothing to merge).
    async fn emit_encoded(&self, rows: &EncodedEntities, window: &mut Window) -> Result<bool> {
        let (start, len) = window.take(rows.len());
        if len > 0 {
            self.actuals.lock().returned += len as u64;
            if let Out::Batches(schema, tx) = &self.out {
                let rows = rows.slice(start..start + len);
                let batch = encoded_to_batch(&self.b.plan.columns, rows, schema)?;
                if tx.send(Ok(batch)).await.is_err() {
                    return Ok(false);
                }
            }
        }
        Ok(!window.done())
    }

    /// Sends the windowed rows as one batch; false when the query is done.
    async fn emit(&self, rows: &[Entity], window: &mut Window) -> Result<bool> {
        let (start, len) = window.take(rows.len());
        if len > 0 {
            let rows = &rows[start..start + len];
            let mismatches = match self.store {
                // Only a remote table has other writers, who may store a
                // property with another type than the column's.
                Backend::Remote(_) => type_mismatches(&self.b.plan.columns, rows),
                Backend::Embedded(_) => 0,
            };
            {
                let mut a = self.actuals.lock();
                a.returned += len as u64;
                a.type_mismatches += mismatches;
            }
            let sent = match &self.out {
                Out::Batches(schema, tx) => {
                    let batch = to_batch(&self.b.plan.table, &self.b.plan.columns, rows, schema)?;
                    tx.send(Ok(batch)).await.is_ok()
                }
                Out::Entities(tx) => tx.send(Ok(rows.to_vec())).await.is_ok(),
            };
            if !sent {
                return Ok(false);
            }
        }
        Ok(!window.done())
    }
}

/// Property values present in `rows` whose EDM type the column does not
/// accept (they read as NULL).
fn type_mismatches(columns: &[OutputColumn], rows: &[Entity]) -> u64 {
    let mut n = 0;
    for c in columns.iter().filter(|c| c.column.role == Role::Property) {
        n += rows
            .iter()
            .filter(|e| {
                e.properties
                    .get(&c.column.name)
                    .is_some_and(|v| !c.column.ty.accepts(v))
            })
            .count() as u64;
    }
    n
}

/// Both keys hold only characters below U+D800, where UTF-16 order and
/// code-point order agree.
fn below_surrogates(e: &Entity) -> bool {
    let plain = |s: &str| s.chars().all(|c| (c as u32) < 0xD800);
    plain(&e.partition_key) && plain(&e.row_key)
}

fn key(e: &Entity) -> (&str, &str) {
    (&e.partition_key, &e.row_key)
}

/// One output column being built. A value of another type than the
/// column's reads as NULL (another writer of a shared table may have
/// stored one), as [`TableDef::value_of`] says.
enum ColumnBuilder {
    Text(StringBuilder),
    Int2(Int16Builder),
    Int4(Int32Builder),
    Int8(Int64Builder),
    Float8(Float64Builder),
    Bool(BooleanBuilder),
    Time(TimestampMicrosecondBuilder, bool),
    Date(Date32Builder),
    Uuid(FixedSizeBinaryBuilder),
    Bytea(BinaryBuilder),
}

impl ColumnBuilder {
    fn new(ty: SqlType, rows: usize) -> Self {
        match ty {
            SqlType::Text => Self::Text(StringBuilder::with_capacity(rows, rows * 16)),
            SqlType::Int2 => Self::Int2(Int16Builder::with_capacity(rows)),
            SqlType::Int4 => Self::Int4(Int32Builder::with_capacity(rows)),
            SqlType::Int8 => Self::Int8(Int64Builder::with_capacity(rows)),
            SqlType::Float8 => Self::Float8(Float64Builder::with_capacity(rows)),
            SqlType::Bool => Self::Bool(BooleanBuilder::with_capacity(rows)),
            SqlType::Timestamptz | SqlType::Timestamp => Self::Time(
                TimestampMicrosecondBuilder::with_capacity(rows),
                ty == SqlType::Timestamptz,
            ),
            SqlType::Date => Self::Date(Date32Builder::with_capacity(rows)),
            SqlType::Uuid => Self::Uuid(FixedSizeBinaryBuilder::with_capacity(rows, 16)),
            SqlType::Bytea => Self::Bytea(BinaryBuilder::with_capacity(rows, rows * 16)),
        }
    }

    /// Appends `v`, or NULL when it is missing or of another type.
    fn push(&mut self, v: Option<ValueRef<'_>>) {
        match (self, v) {
            (Self::Text(b), Some(ValueRef::String(s))) => b.append_value(s),
            (Self::Text(b), _) => b.append_null(),
            // A value beyond 16 bits (another writer's) reads as NULL.
            (Self::Int2(b), Some(ValueRef::Int32(i))) => b.append_option(i16::try_from(i).ok()),
            (Self::Int2(b), _) => b.append_null(),
            (Self::Int4(b), Some(ValueRef::Int32(i))) => b.append_value(i),
            (Self::Int4(b), _) => b.append_null(),
            (Self::Int8(b), Some(ValueRef::Int64(i))) => b.append_value(i),
            (Self::Int8(b), _) => b.append_null(),
            (Self::Float8(b), Some(ValueRef::Double(d))) => b.append_value(d),
            (Self::Float8(b), _) => b.append_null(),
            (Self::Bool(b), Some(ValueRef::Boolean(x))) => b.append_value(x),
            (Self::Bool(b), _) => b.append_null(),
            (Self::Time(b, _), Some(ValueRef::DateTime(t))) => b.append_value(t.0),
            (Self::Time(b, _), _) => b.append_null(),
            (Self::Date(b), Some(ValueRef::DateTime(t))) => {
                b.append_value(t.0.div_euclid(MICROS_PER_DAY) as i32)
            }
            (Self::Date(b), _) => b.append_null(),
            (Self::Uuid(b), Some(ValueRef::Guid(g))) => {
                b.append_value(g).expect("a GUID is 16 bytes")
            }
            (Self::Uuid(b), _) => b.append_null(),
            (Self::Bytea(b), Some(ValueRef::Binary(x))) => b.append_value(x),
            (Self::Bytea(b), _) => b.append_null(),
        }
    }

    /// Appends a stored property's value, or NULL when it is of another
    /// type. Fixed-width numbers skip the [`ValueRef`] (see
    /// [`RawProperty::int32`]).
    #[inline]
    fn push_stored(&mut self, p: &RawProperty<'_>) -> Result<()> {
        match self {
            Self::Int4(b) => b.append_option(p.int32()),
            Self::Int8(b) => b.append_option(p.int64()),
            Self::Float8(b) => b.append_option(p.double()),
            _ => self.push(Some(p.value()?)),
        }
        Ok(())
    }

    fn finish(self) -> ArrayRef {
        match self {
            Self::Text(mut b) => Arc::new(b.finish()),
            Self::Int2(mut b) => Arc::new(b.finish()),
            Self::Int4(mut b) => Arc::new(b.finish()),
            Self::Int8(mut b) => Arc::new(b.finish()),
            Self::Float8(mut b) => Arc::new(b.finish()),
            Self::Bool(mut b) => Arc::new(b.finish()),
            Self::Time(mut b, tz) => {
                let a = b.finish();
                Arc::new(if tz { a.with_timezone("UTC") } else { a })
            }
            Self::Date(mut b) => Arc::new(b.finish()),
            Self::Uuid(mut b) => Arc::new(b.finish()),
            Self::Bytea(mut b) => Arc::new(b.finish()),
        }
    }
}

fn builders(columns: &[OutputColumn], rows: usize) -> Vec<ColumnBuilder> {
    columns
        .iter()
        .map(|c| ColumnBuilder::new(c.column.ty, rows))
        .collect()
}

fn finish_batch(
    builders: Vec<ColumnBuilder>,
    rows: usize,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let arrays: Vec<ArrayRef> = builders.into_iter().map(ColumnBuilder::finish).collect();
    // The row count is explicit: a scan for `count(*)` projects no column.
    RecordBatch::try_new_with_options(
        schema.clone(),
        arrays,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows)),
    )
    .map_err(|e| PlanError::InvalidValue(e.to_string()))
}

/// The value a typed key column's stored key holds (see
/// `tablegate_catalog::keycodec`). Another client may have stored a key
/// that is none: an error, not an invented value.
fn typed_key(c: &tablegate_catalog::ColumnRef, key: &str) -> Result<Value> {
    c.ty.decode_key(key).ok_or_else(|| {
        PlanError::InvalidValue(format!(
            "stored key '{key}' is not a {} value of key column \"{}\" (it was not written through tablegate)",
            c.ty.pg_name(),
            c.name
        ))
    })
}

/// Builds a record batch of `columns` from entities.
pub fn to_batch(
    table: &TableDef,
    columns: &[OutputColumn],
    rows: &[Entity],
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let mut out = builders(columns, rows.len());
    for (c, b) in columns.iter().zip(&mut out) {
        for e in rows {
            // Borrowed where the entity holds the value: a copy per cell
            // was a large share of a scan.
            match c.column.role {
                Role::PartitionKey if c.column.ty == SqlType::Text => {
                    b.push(Some(ValueRef::String(&e.partition_key)))
                }
                Role::RowKey if c.column.ty == SqlType::Text => {
                    b.push(Some(ValueRef::String(&e.row_key)))
                }
                Role::PartitionKey => {
                    b.push(Some(typed_key(&c.column, &e.partition_key)?.as_value_ref()))
                }
                Role::RowKey => b.push(Some(typed_key(&c.column, &e.row_key)?.as_value_ref())),
                Role::Property => b.push(e.properties.get(&c.column.name).map(Value::as_value_ref)),
                _ => b.push(
                    table
                        .value_of(e, &c.column)
                        .as_ref()
                        .map(Value::as_value_ref),
                ),
            }
        }
    }
    finish_batch(out, rows.len(), schema)
}

/// Builds a record batch of `columns` from the store's undecoded entities.
///
/// Entities store their properties in name order (the codec writes them
/// from a `BTreeMap`), so each row is read as a merge of two sorted lists,
/// its properties and the wanted names: one name comparison per property,
/// and the row's properties after the last wanted name are not even framed
/// (a scan for `n` and `d` stops before a row's long text `s`).
pub fn encoded_to_batch<'a>(
    columns: &[OutputColumn],
    rows: impl ExactSizeIterator<Item = EncodedEntity<'a>>,
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let len = rows.len();
    let mut out = builders(columns, len);
    // Wanted property names in stored order, each with the output columns
    // it fills (`SELECT n, n` fills two).
    let mut wanted: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, c) in columns.iter().enumerate() {
        if c.column.role == Role::Property {
            match wanted.iter_mut().find(|(n, _)| *n == c.column.name) {
                Some((_, cols)) => cols.push(i),
                None => wanted.push((&c.column.name, vec![i])),
            }
        }
    }
    wanted.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    for e in rows {
        let (timestamp, properties) = e.open()?;
        for (i, c) in columns.iter().enumerate() {
            let key = match c.column.role {
                Role::PartitionKey => Some(e.partition_key()),
                Role::RowKey => Some(e.row_key()),
                _ => None,
            };
            if let Some(key) = key
                && c.column.ty != SqlType::Text
            {
                out[i].push(Some(typed_key(&c.column, key)?.as_value_ref()));
                continue;
            }
            let v = match c.column.role {
                Role::PartitionKey => ValueRef::String(e.partition_key()),
                Role::RowKey => ValueRef::String(e.row_key()),
                Role::Timestamp => ValueRef::DateTime(timestamp),
                Role::ETag => {
                    let tag = tablegate_store::ETag::from_timestamp(timestamp);
                    out[i].push(Some(ValueRef::String(&tag.0)));
                    continue;
                }
                Role::Property => continue,
            };
            out[i].push(Some(v));
        }
        let mut next = 0;
        for p in properties {
            if next == wanted.len() {
                break;
            }
            let p = p?;
            while next < wanted.len() {
                let (name, cols) = &wanted[next];
                match p.name_cmp(name) {
                    std::cmp::Ordering::Less => break,
                    std::cmp::Ordering::Equal => {
                        for &i in cols {
                            out[i].push_stored(&p)?;
                        }
                        next += 1;
                        break;
                    }
                    // The row has no such property: NULL.
                    std::cmp::Ordering::Greater => {
                        cols.iter().for_each(|&i| out[i].push(None));
                        next += 1;
                    }
                }
            }
        }
        for (_, cols) in &wanted[next..] {
            cols.iter().for_each(|&i| out[i].push(None));
        }
    }
    finish_batch(out, len, schema)
}

#[cfg(test)]
mod tests {
    use arrow_array::Array;
    use tablegate_catalog::{Column, ETAG_COLUMN, TIMESTAMP_COLUMN};
    use tablegate_store::{EntityWrite, LocalStore, Operation, PageRequest, Query};

    use super::*;

    fn col(name: &str, ty: SqlType) -> Column {
        Column::property(name, ty)
    }

    /// The two ways to build a batch agree: from entities, and from the
    /// store's bytes (keys, system columns, a column twice, missing
    /// properties and properties stored with another type read as NULL).
    #[test]
    fn batches_from_encoded_entities_equal_batches_from_entities() {
        let table = TableDef::new(
            "cells",
            vec![
                col("pk", SqlType::Text),
                col("rk", SqlType::Text),
                col("n", SqlType::Int4),
                col("s", SqlType::Text),
                col("d", SqlType::Float8),
                col("u", SqlType::Uuid),
                col("b", SqlType::Bytea),
                col("at", SqlType::Timestamptz),
            ],
            &["pk".into(), "rk".into()],
        )
        .expect("valid table");
        let store = LocalStore::in_memory();
        store.create_table_blocking("cells").expect("created");
        let rows = [
            EntityWrite::new("a", "1")
                .with("n", Value::Int32(7))
                .with("s", Value::String("x".into()))
                .with("d", Value::Double(2.5))
                .with("u", Value::Guid([3; 16]))
                .with("b", Value::Binary(vec![0, 1]))
                .with("at", Value::DateTime(tablegate_store::DateTime(5))),
            // Mistyped and missing properties, and one no column names.
            EntityWrite::new("a", "2")
                .with("n", Value::String("seven".into()))
                .with("d", Value::Int64(3))
                .with("zz", Value::Boolean(true)),
            EntityWrite::new("b", "").with("s", Value::String(String::new())),
        ];
        for r in rows {
            store
                .execute_blocking("cells", &[Operation::Insert(r)])
                .expect("inserted");
        }
        let mut names: Vec<String> = ["n", "pk", "rk", "s", "d", "u", "b", "at", "n"]
            .map(String::from)
            .to_vec();
        names.extend([TIMESTAMP_COLUMN.to_owned(), ETAG_COLUMN.to_owned()]);
        let columns: Vec<OutputColumn> = names
            .iter()
            .map(|n| OutputColumn {
                name: n.clone(),
                column: table.resolve(n).expect("a column"),
            })
            .collect();
        let refs: Vec<_> = columns.iter().map(|c| c.column.clone()).collect();
        let schema = TableDef::arrow_schema(&refs);
        let q = Query::full_scan();
        let decoded = store
            .query_blocking("cells", &q, &PageRequest::first(10))
            .expect("page");
        let encoded = store
            .query_blocking(
                "cells",
                &q,
                &PageRequest {
                    encoded: true,
                    ..PageRequest::first(10)
                },
            )
            .expect("page");
        assert_eq!(encoded.encoded.len(), 3);
        let a = to_batch(&table, &columns, &decoded.entities, &schema).expect("batch");
        let b = encoded_to_batch(&columns, encoded.encoded.iter(), &schema).expect("batch");
        assert_eq!(a, b);
        // And the values are the ones written.
        let n = a
            .column(0)
            .as_any()
            .downcast_ref::<arrow_array::Int32Array>();
        let n = n.expect("int column");
        assert_eq!((n.value(0), n.is_null(1), n.is_null(2)), (7, true, true));
        // No columns at all (count(*)): only the row count.
        let none = encoded_to_batch(&[], encoded.encoded.iter(), &TableDef::arrow_schema(&[]));
        assert_eq!(none.expect("batch").num_rows(), 3);
    }

    proptest::proptest! {
        /// The merge over stored properties agrees with decoding whole
        /// entities, whatever each row holds (any subset of the names,
        /// values of the column's type or another) and whatever the query
        /// selects (any order, repeats, names no row has).
        #[test]
        fn encoded_batches_agree_with_decoded_ones(
            rows in proptest::collection::vec(
                proptest::collection::btree_map(0usize..6, (0u8..3, -5i32..5), 0..6),
                1..8,
            ),
            select in proptest::collection::vec(0usize..8, 0..8),
        ) {
            // Names chosen so byte order and insertion order differ.
            const NAMES: [&str; 6] = ["n", "b", "d2", "a", "zz", "s"];
            let mut cols: Vec<Column> = vec![col("pk", SqlType::Text), col("rk", SqlType::Text)];
            cols.extend(NAMES.iter().enumerate().map(|(i, n)| {
                col(n, if i % 2 == 0 { SqlType::Int4 } else { SqlType::Text })
            }));
            let table = TableDef::new("props", cols, &["pk".into(), "rk".into()]).expect("table");
            let store = LocalStore::in_memory();
            store.create_table_blocking("props").expect("created");
            for (r, props) in rows.iter().enumerate() {
                let mut w = EntityWrite::new("k", format!("{r:03}"));
                for (&name, &(kind, v)) in props {
                    w = w.with(NAMES[name], match kind {
                        0 => Value::Int32(v),
                        1 => Value::String(format!("v{v}")),
                        _ => Value::Double(f64::from(v)),
                    });
                }
                store.execute_blocking("props", &[Operation::Insert(w)]).expect("inserted");
            }
            let all = ["pk", "rk", "n", "b", "d2", "a", "zz", "s"];
            let columns: Vec<OutputColumn> = select
                .iter()
                .map(|&i| OutputColumn {
                    name: all[i].to_owned(),
                    column: table.resolve(all[i]).expect("a column"),
                })
                .collect();
            let refs: Vec<_> = columns.iter().map(|c| c.column.clone()).collect();
            let schema = TableDef::arrow_schema(&refs);
            let page = |encoded| {
                store
                    .query_blocking("props", &Query::full_scan(), &PageRequest { encoded, ..PageRequest::first(10) })
                    .expect("page")
            };
            let a = to_batch(&table, &columns, &page(false).entities, &schema).expect("batch");
            let b = encoded_to_batch(&columns, page(true).encoded.iter(), &schema).expect("batch");
            proptest::prop_assert_eq!(a, b);
        }
    }
}
