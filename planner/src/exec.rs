//! The native path: a bound SELECT drives the store and yields Arrow record
//! batches, one per store page, following continuation tokens with bounded
//! memory (a two-batch channel; dropping the stream stops the scan).
//!
//! Points are direct lookups (one request per key); everything else is a
//! parallel segment scan of the partition layer. Throttled requests are
//! retried with the session's retry policy; a scan resumes from its
//! continuation token.

use std::sync::Arc;
use std::time::Instant;

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, FixedSizeBinaryBuilder, Float64Builder, Int32Builder,
    Int64Builder, StringBuilder, TimestampMicrosecondBuilder,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::SchemaRef;
use parking_lot::Mutex;
use tablegate_catalog::{Role, SqlType, TableDef};
use tablegate_store::partition::retry::{RetryStats, with_retry};
use tablegate_store::partition::scan::ScanOptions;
use tablegate_store::{Backend, Entity, RetryPolicy, TableStore, Value};
use tokio::sync::mpsc;

use crate::error::{PlanError, Result};
use crate::explain::{Actuals, store_query};
use crate::keys::AccessClass;
use crate::plan::{BoundSelect, OutputColumn, Route};
use crate::txn::Overlay;

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
            overlay: None,
        }
    }
}

/// Record batches of a running query.
#[derive(Debug)]
pub struct RowStream {
    schema: SchemaRef,
    rx: mpsc::Receiver<Result<RecordBatch>>,
    /// A point query's work, run by the first [`RowStream::next`] in the
    /// caller's own task: it sends at most one batch, and a spawned task's
    /// hand-off (a wake-up on another thread) cost more than the lookup.
    inline: Option<Inline>,
    actuals: Arc<Mutex<Actuals>>,
    class: AccessClass,
}

/// The boxed work of an inline query.
struct Inline(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>);

impl std::fmt::Debug for Inline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Inline")
    }
}

impl RowStream {
    /// The result schema.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The next batch; `None` at the end.
    pub async fn next(&mut self) -> Option<Result<RecordBatch>> {
        if let Some(Inline(work)) = self.inline.take() {
            work.await;
        }
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
fn check_native(b: &BoundSelect, opts: &ExecOptions) -> Result<()> {
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
    if b.access.class == AccessClass::FullScan && !opts.allow_full_scan {
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

/// Starts a bound SELECT on the native path.
pub fn execute(store: &Backend, b: &BoundSelect, opts: &ExecOptions) -> Result<RowStream> {
    check_native(b, opts)?;
    let cols: Vec<_> = b.plan.columns.iter().map(|c| c.column.clone()).collect();
    let schema = TableDef::arrow_schema(&cols);
    // Column names in the result may be aliases.
    let schema = Arc::new(arrow_schema::Schema::new(
        schema
            .fields()
            .iter()
            .zip(&b.plan.columns)
            .map(|(f, c)| f.as_ref().clone().with_name(&c.name))
            .collect::<Vec<_>>(),
    ));
    let actuals = Arc::new(Mutex::new(Actuals::default()));
    // Two slots: an inline point query sends one batch, or one error.
    let (tx, rx) = mpsc::channel(2);
    let task = Task {
        store: store.clone(),
        b: b.clone(),
        opts: opts.clone(),
        out: Out::Batches(schema.clone(), tx),
        actuals: actuals.clone(),
    };
    let inline = if b.access.class == AccessClass::Point {
        Some(Inline(Box::pin(task.run_to_end())))
    } else {
        spawn(task);
        None
    };
    Ok(RowStream {
        schema,
        rx,
        inline,
        actuals,
        class: b.access.class,
    })
}

/// Entity pages of a running scan (UPDATE and DELETE read through this).
#[derive(Debug)]
pub struct EntityStream {
    rx: mpsc::Receiver<Result<Vec<Entity>>>,
}

impl EntityStream {
    /// The next page of matched entities, in key order; `None` at the end.
    pub async fn next(&mut self) -> Option<Result<Vec<Entity>>> {
        self.rx.recv().await
    }
}

/// Starts a bound SELECT that yields whole entities instead of rows.
pub fn scan_entities(store: &Backend, b: &BoundSelect, opts: &ExecOptions) -> Result<EntityStream> {
    check_native(b, opts)?;
    let (tx, rx) = mpsc::channel(2);
    spawn(Task {
        store: store.clone(),
        b: b.clone(),
        opts: opts.clone(),
        out: Out::Entities(tx),
        actuals: Arc::new(Mutex::new(Actuals::default())),
    });
    Ok(EntityStream { rx })
}

fn spawn(task: Task) {
    tokio::spawn(task.run_to_end());
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
    async fn run_to_end(self) {
        let started = Instant::now();
        let r = self.run().await;
        self.actuals.lock().elapsed = started.elapsed();
        if let Err(e) = r {
            self.out.fail(e).await;
        }
    }

    async fn run(&self) -> Result<()> {
        let access = &self.b.access;
        let table = self.b.plan.table.name.clone();
        let overlay = self.opts.overlay.as_deref();
        let mut window = Window {
            skip: self.b.offset,
            left: self.b.limit,
        };
        if window.done() || access.class == AccessClass::Empty {
            return Ok(());
        }
        if access.class == AccessClass::Point {
            let mut rows = Vec::new();
            for s in &access.spans {
                let (pk, rk) = (
                    s.pk.as_point().expect("point class").to_owned(),
                    s.rk.as_point().expect("point class").to_owned(),
                );
                if let Some(staged) = overlay.and_then(|o| o.get(&table, &pk, &rk)) {
                    if let Some(e) = staged
                        && access.filter.as_ref().is_none_or(|f| f.matches(e))
                    {
                        rows.push(e.clone());
                    }
                    continue;
                }
                let mut stats = RetryStats::default();
                let got = with_retry(&self.opts.retry, &mut stats, || {
                    self.store.get(&table, &pk, &rk)
                })
                .await?;
                let mut a = self.actuals.lock();
                a.lookups += 1;
                a.retries += stats.retries;
                a.backoff += stats.backoff;
                if let Some(e) = got {
                    a.scanned += 1;
                    a.servers.extend(self.server_of(&pk));
                    if access.filter.as_ref().is_none_or(|f| f.matches(&e)) {
                        rows.push(e);
                    }
                }
            }
            return self.emit(&rows, &mut window).await.map(|_| ());
        }
        // Staged entities of the open transaction that this query selects,
        // merged into the store's pages in key order; the store's versions
        // of staged keys are hidden.
        let mut extras: std::collections::VecDeque<Entity> = overlay
            .filter(|o| o.table.eq_ignore_ascii_case(&table))
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
        let parallelism = if access.class == AccessClass::RowRange {
            1
        } else {
            self.opts.parallelism
        };
        // LIMIT is pushed into the store: a page counts returned entities,
        // so no page needs more than LIMIT + OFFSET of them.
        let page_size = match self.b.limit {
            Some(l) => {
                (l.saturating_add(self.b.offset)).clamp(1, self.opts.page_size as u64) as usize
            }
            None => self.opts.page_size,
        };
        let mut stream = self.store.scan(
            &table,
            &query,
            ScanOptions {
                page_size,
                limit: self
                    .b
                    .limit
                    .map(|l| l.saturating_add(self.b.offset).saturating_add(hidden)),
                parallelism,
                retry: self.opts.retry.clone(),
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
                        if o.covers(&table, &e.partition_key, &e.row_key) {
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
            if !self.emit(&rows, &mut window).await? {
                return Ok(());
            }
        }
        let rest: Vec<Entity> = extras.into_iter().collect();
        self.emit(&rest, &mut window).await?;
        Ok(())
    }

    fn server_of(&self, pk: &str) -> Option<usize> {
        let layout = self.store.layout(&self.b.plan.table.name).ok()?;
        let i = layout
            .partition_point(|(lo, _, _)| lo.as_str() <= pk)
            .saturating_sub(1);
        layout.get(i).map(|l| l.2)
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

fn key(e: &Entity) -> (&str, &str) {
    (&e.partition_key, &e.row_key)
}

/// Builds a record batch of `columns` from entities.
pub fn to_batch(
    table: &TableDef,
    columns: &[OutputColumn],
    rows: &[Entity],
    schema: &SchemaRef,
) -> Result<RecordBatch> {
    let mut arrays: Vec<ArrayRef> = Vec::with_capacity(columns.len());
    for c in columns {
        let values = rows.iter().map(|e| table.value_of(e, &c.column));
        let array: ArrayRef = match c.column.ty {
            SqlType::Text => {
                let mut b = StringBuilder::with_capacity(rows.len(), rows.len() * 16);
                for v in values {
                    match v {
                        Some(Value::String(s)) => b.append_value(s),
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
            SqlType::Int4 => {
                let mut b = Int32Builder::with_capacity(rows.len());
                for v in values {
                    b.append_option(match v {
                        Some(Value::Int32(i)) => Some(i),
                        _ => None,
                    });
                }
                Arc::new(b.finish())
            }
            SqlType::Int8 => {
                let mut b = Int64Builder::with_capacity(rows.len());
                for v in values {
                    b.append_option(match v {
                        Some(Value::Int64(i)) => Some(i),
                        _ => None,
                    });
                }
                Arc::new(b.finish())
            }
            SqlType::Float8 => {
                let mut b = Float64Builder::with_capacity(rows.len());
                for v in values {
                    b.append_option(match v {
                        Some(Value::Double(d)) => Some(d),
                        _ => None,
                    });
                }
                Arc::new(b.finish())
            }
            SqlType::Bool => {
                let mut b = BooleanBuilder::with_capacity(rows.len());
                for v in values {
                    b.append_option(match v {
                        Some(Value::Boolean(x)) => Some(x),
                        _ => None,
                    });
                }
                Arc::new(b.finish())
            }
            SqlType::Timestamptz | SqlType::Timestamp => {
                let mut b = TimestampMicrosecondBuilder::with_capacity(rows.len());
                for v in values {
                    b.append_option(match v {
                        Some(Value::DateTime(t)) => Some(t.0),
                        _ => None,
                    });
                }
                let a = b.finish();
                Arc::new(if c.column.ty == SqlType::Timestamptz {
                    a.with_timezone("UTC")
                } else {
                    a
                })
            }
            SqlType::Uuid => {
                let mut b = FixedSizeBinaryBuilder::with_capacity(rows.len(), 16);
                for v in values {
                    match v {
                        Some(Value::Guid(g)) => b
                            .append_value(g)
                            .map_err(|e| PlanError::InvalidValue(e.to_string()))?,
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
            SqlType::Bytea => {
                let mut b = BinaryBuilder::with_capacity(rows.len(), rows.len() * 16);
                for v in values {
                    match v {
                        Some(Value::Binary(x)) => b.append_value(x),
                        _ => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
        };
        arrays.push(array);
    }
    // The row count is explicit: a scan for `count(*)` projects no column.
    RecordBatch::try_new_with_options(
        schema.clone(),
        arrays,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(rows.len())),
    )
    .map_err(|e| PlanError::InvalidValue(e.to_string()))
}
