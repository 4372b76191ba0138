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
use tablegate_catalog::{SqlType, TableDef};
use tablegate_store::partition::retry::{RetryStats, with_retry};
use tablegate_store::partition::scan::ScanOptions;
use tablegate_store::{Entity, PartitionedStore, RetryPolicy, TableStore, Value};
use tokio::sync::mpsc;

use crate::error::{PlanError, Result};
use crate::explain::{Actuals, store_query};
use crate::keys::AccessClass;
use crate::plan::{BoundSelect, OutputColumn, Route};

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
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            page_size: 1000,
            retry: RetryPolicy::default(),
            parallelism: 4,
            allow_full_scan: true,
        }
    }
}

/// Record batches of a running query.
#[derive(Debug)]
pub struct RowStream {
    schema: SchemaRef,
    rx: mpsc::Receiver<Result<RecordBatch>>,
    actuals: Arc<Mutex<Actuals>>,
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

/// Starts a bound SELECT on the native path.
pub fn execute(store: &PartitionedStore, b: &BoundSelect, opts: &ExecOptions) -> Result<RowStream> {
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
    let (tx, rx) = mpsc::channel(2);
    let task = Task {
        store: store.clone(),
        b: b.clone(),
        opts: opts.clone(),
        schema: schema.clone(),
        actuals: actuals.clone(),
    };
    tokio::spawn(async move {
        let started = Instant::now();
        let r = task.run(&tx).await;
        task.actuals.lock().elapsed = started.elapsed();
        if let Err(e) = r {
            let _ = tx.send(Err(e)).await;
        }
    });
    Ok(RowStream {
        schema,
        rx,
        actuals,
    })
}

struct Task {
    store: PartitionedStore,
    b: BoundSelect,
    opts: ExecOptions,
    schema: SchemaRef,
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
    async fn run(&self, tx: &mpsc::Sender<Result<RecordBatch>>) -> Result<()> {
        let access = &self.b.access;
        let table = self.b.plan.table.name.clone();
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
            return self.emit(&rows, &mut window, tx).await.map(|_| ());
        }
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
                limit: self.b.limit.map(|l| l.saturating_add(self.b.offset)),
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
            if !self.emit(&page.entities, &mut window, tx).await? {
                return Ok(());
            }
        }
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
    async fn emit(
        &self,
        rows: &[Entity],
        window: &mut Window,
        tx: &mpsc::Sender<Result<RecordBatch>>,
    ) -> Result<bool> {
        let (start, len) = window.take(rows.len());
        if len > 0 {
            let batch = to_batch(
                &self.b.plan.table,
                &self.b.plan.columns,
                &rows[start..start + len],
                &self.schema,
            )?;
            self.actuals.lock().returned += len as u64;
            if tx.send(Ok(batch)).await.is_err() {
                return Ok(false);
            }
        }
        Ok(!window.done())
    }
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
    RecordBatch::try_new(schema.clone(), arrays).map_err(|e| PlanError::InvalidValue(e.to_string()))
}
