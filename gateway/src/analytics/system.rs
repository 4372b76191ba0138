//! The system views in schema `tablegate`: what the partition layer and
//! the gateway are doing, as SQL.
//!
//! | view | one row per |
//! | --- | --- |
//! | `tables` | store table: key columns, entities, PartitionKeys, range partitions |
//! | `range_partitions` | range partition: bounds, serving server, entities, load |
//! | `servers` | partition server: ranges, load against capacity |
//! | `hot_partitions` | PartitionKey running at ≥ 50% of its target (warm) or ≥ 90% (hot) |
//! | `insert_patterns` | table whose inserts follow the append-only / prepend-only anti-pattern |
//! | `query_counters` | query class: statements, errors, time, entities scanned and returned |
//! | `statements` | normalized statement and class: calls, time, rows, entities scanned (the workload) |
//! | `throttle_counters` | throttling scope (partition, server, account): requests refused |
//! | `balance_events` | split or move the balancer made |
//! | `health` | the storage engine: whether it takes writes, why not, error counts |
//!
//! Each view is computed when a query scans it, so it is always current.
//! They are views (`TableType::View`), so psql lists them with
//! `\dv tablegate.*`. Load figures are over the store's load window
//! (10 s by default).

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::Result;
use datafusion::datasource::MemTable;
use datafusion::logical_expr::{Expr, TableType};
use datafusion::physical_plan::ExecutionPlan;
use tablegate_planner::Planner;
use tablegate_store::partition::{BalanceAction, HotLevel, InsertPatternKind};

use crate::telemetry::telemetry;

/// The schema's name.
pub const SCHEMA: &str = "tablegate";

/// The views, in the order `\dv` lists them (alphabetical).
pub const VIEWS: [&str; 11] = [
    "balance_events",
    "health",
    "hot_partitions",
    "indexes",
    "insert_patterns",
    "query_counters",
    "range_partitions",
    "servers",
    "statements",
    "tables",
    "throttle_counters",
];

/// Most hot partitions listed.
const HOT_LIMIT: usize = 100;

/// The `tablegate` schema.
#[derive(Debug)]
pub struct SystemSchema {
    planner: Planner,
}

impl SystemSchema {
    /// Over `planner`'s catalog and store.
    pub fn new(planner: Planner) -> Self {
        SystemSchema { planner }
    }
}

#[async_trait]
impl SchemaProvider for SystemSchema {
    fn table_names(&self) -> Vec<String> {
        VIEWS.iter().map(|s| s.to_string()).collect()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        Ok(VIEWS.iter().find(|v| **v == name).map(|v| {
            Arc::new(SystemView {
                name: v,
                schema: view_schema(v),
                planner: self.planner.clone(),
            }) as Arc<dyn TableProvider>
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        VIEWS.contains(&name)
    }
}

/// One view: its schema is fixed, its rows are computed per scan.
#[derive(Debug)]
struct SystemView {
    name: &'static str,
    schema: SchemaRef,
    planner: Planner,
}

fn text(name: &str) -> Field {
    Field::new(name, DataType::Utf8, true)
}
fn int(name: &str) -> Field {
    Field::new(name, DataType::Int64, true)
}
fn float(name: &str) -> Field {
    Field::new(name, DataType::Float64, true)
}
fn boolean(name: &str) -> Field {
    Field::new(name, DataType::Boolean, true)
}

fn timestamp(name: &str) -> Field {
    Field::new(
        name,
        DataType::Timestamp(
            datafusion::arrow::datatypes::TimeUnit::Microsecond,
            Some("+00:00".into()),
        ),
        true,
    )
}

fn view_schema(name: &str) -> SchemaRef {
    let fields = match name {
        "tables" => vec![
            text("table_name"),
            text("partition_key"),
            text("row_key"),
            int("columns"),
            int("entities"),
            int("partition_keys"),
            int("range_partitions"),
            int("index_entities"),
        ],
        "range_partitions" => vec![
            text("table_name"),
            text("lower_bound"),
            text("upper_bound"),
            int("server"),
            int("entities"),
            int("partition_keys"),
            float("load_per_sec"),
            boolean("offline"),
        ],
        "servers" => vec![
            int("server"),
            int("range_partitions"),
            float("load_per_sec"),
            int("capacity_per_sec"),
            float("utilization"),
        ],
        "hot_partitions" => vec![
            text("table_name"),
            text("partition_key"),
            float("load_per_sec"),
            int("target_per_sec"),
            text("level"),
        ],
        "insert_patterns" => vec![
            text("table_name"),
            text("pattern"),
            float("share"),
            int("inserts"),
            text("advice"),
        ],
        "query_counters" => vec![
            text("class"),
            int("statements"),
            int("errors"),
            float("total_ms"),
            float("avg_ms"),
            int("entities_scanned"),
            int("rows_returned"),
            int("throttled_retries"),
            float("backoff_ms"),
        ],
        "statements" => vec![
            text("query"),
            text("class"),
            int("calls"),
            int("errors"),
            float("total_ms"),
            float("mean_ms"),
            float("max_ms"),
            int("rows"),
            int("entities_scanned"),
            float("scanned_per_call"),
            int("throttled_retries"),
            timestamp("first_seen"),
            timestamp("last_seen"),
        ],
        "throttle_counters" => vec![text("scope"), int("target_per_sec"), int("throttled")],
        "indexes" => vec![
            text("table_name"),
            text("index_name"),
            text("columns"),
            boolean("is_unique"),
            text("kind"),
            int("operations_per_insert"),
            int("rows_per_transaction"),
            text("definition"),
            text("state"),
            int("build_rows_read"),
            int("build_entries_written"),
            timestamp("build_started"),
            int("pending_partitions"),
            float("lag_ms"),
            int("rows_applied"),
        ],
        "health" => vec![
            text("component"),
            text("state"),
            boolean("accepts_writes"),
            boolean("disk_full"),
            text("cause"),
            timestamp("since"),
            int("write_errors"),
            int("read_errors"),
            text("advice"),
        ],
        _ => vec![
            timestamp("at"),
            text("table_name"),
            text("action"),
            text("detail"),
        ],
    };
    Arc::new(Schema::new(fields))
}

/// Column builders for a view's rows, in schema order.
#[derive(Default)]
struct Rows {
    columns: Vec<Column>,
}

enum Column {
    Text(Vec<Option<String>>),
    Int(Vec<Option<i64>>),
    Float(Vec<Option<f64>>),
    Bool(Vec<Option<bool>>),
    Micros(Vec<Option<i64>>),
}

/// One cell of a row.
enum Cell {
    T(Option<String>),
    I(Option<i64>),
    F(Option<f64>),
    B(bool),
    Us(Option<i64>),
}

/// The index entities of `def`, of `total` entities in its partitions:
/// (those among them, those in its global indexes' tables). Every row has
/// exactly one entry per local index (`tablegate index verify` checks it),
/// so the rows are `total / (1 + local indexes)`; a local index still
/// building and queue entries not yet applied are counted as rows.
fn index_entities(
    store: &tablegate_store::PartitionedStore,
    def: &tablegate_planner::catalog::TableDef,
    total: u64,
) -> tablegate_store::Result<(u64, u64)> {
    let local = def
        .indexes
        .iter()
        .filter(|i| !i.global && !i.building)
        .count() as u64;
    let own = total - total / (1 + local);
    let mut global = 0;
    for ix in def.indexes.iter().filter(|i| i.global) {
        match store.table_stats_blocking(&ix.global_table(&def.name)) {
            Ok(s) => global += s.entities,
            Err(tablegate_store::StoreError::TableNotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok((own, global))
}

fn t(s: impl Into<String>) -> Cell {
    Cell::T(Some(s.into()))
}
fn i(n: impl TryInto<i64>) -> Cell {
    Cell::I(n.try_into().ok())
}
fn f(x: f64) -> Cell {
    Cell::F(Some(x))
}

impl Rows {
    fn push(&mut self, row: Vec<Cell>) {
        if self.columns.is_empty() {
            self.columns = row
                .iter()
                .map(|c| match c {
                    Cell::T(_) => Column::Text(Vec::new()),
                    Cell::I(_) => Column::Int(Vec::new()),
                    Cell::F(_) => Column::Float(Vec::new()),
                    Cell::B(_) => Column::Bool(Vec::new()),
                    Cell::Us(_) => Column::Micros(Vec::new()),
                })
                .collect();
        }
        for (col, cell) in self.columns.iter_mut().zip(row) {
            match (col, cell) {
                (Column::Text(v), Cell::T(x)) => v.push(x),
                (Column::Int(v), Cell::I(x)) => v.push(x),
                (Column::Float(v), Cell::F(x)) => v.push(x),
                (Column::Bool(v), Cell::B(x)) => v.push(Some(x)),
                (Column::Micros(v), Cell::Us(x)) => v.push(x),
                // Rows are written below with the schema's cell kinds.
                _ => unreachable!("cell kind differs from its column"),
            }
        }
    }

    fn batch(self, schema: SchemaRef) -> Result<RecordBatch> {
        if self.columns.is_empty() {
            return Ok(RecordBatch::new_empty(schema));
        }
        let arrays: Vec<ArrayRef> = self
            .columns
            .into_iter()
            .zip(schema.fields())
            .map(|(c, field)| -> ArrayRef {
                match c {
                    Column::Text(v) => Arc::new(StringArray::from(v)),
                    Column::Int(v) => Arc::new(Int64Array::from(v)),
                    Column::Float(v) => Arc::new(Float64Array::from(v)),
                    Column::Bool(v) => Arc::new(BooleanArray::from(v)),
                    Column::Micros(v) => Arc::new(
                        datafusion::arrow::array::TimestampMicrosecondArray::from(v)
                            .with_data_type(field.data_type().clone()),
                    ),
                }
            })
            .collect();
        Ok(RecordBatch::try_new(schema, arrays)?)
    }
}

impl SystemView {
    fn rows(&self) -> Result<RecordBatch> {
        // Range partitions, servers, hot partitions, insert patterns,
        // throttle counters and balancer events belong to tablegate's own
        // partition layer: a remote table service keeps them to itself, so
        // on that backend those views are empty and table counts are NULL.
        let part = self.planner.store().partitioned();
        let mut rows = Rows::default();
        let err = |e: tablegate_store::StoreError| {
            datafusion::common::DataFusionError::External(Box::new(e))
        };
        match self.name {
            "tables" => {
                for def in self.planner.catalog().tables() {
                    let mut row = vec![
                        t(&def.name),
                        t(&def.partition_key),
                        Cell::T(def.row_key.clone()),
                        i(def.star().len()),
                    ];
                    match part {
                        Some(store) => {
                            let stats = store.table_stats_blocking(&def.name).map_err(err)?;
                            let ranges = store.ranges(&def.name).map_err(err)?.len();
                            let index = index_entities(store, &def, stats.entities).map_err(err)?;
                            row.extend([
                                i(stats.entities.saturating_sub(index.0)),
                                i(stats.partitions),
                                i(ranges),
                                i(index.0 + index.1),
                            ]);
                        }
                        None => {
                            row.extend([Cell::I(None), Cell::I(None), Cell::I(None), Cell::I(None)])
                        }
                    }
                    rows.push(row);
                }
            }
            "indexes" => {
                let builds: std::collections::HashMap<String, tablegate_planner::IndexBuild> =
                    self.planner.index_builds().into_iter().collect();
                for def in self.planner.catalog().tables() {
                    for ix in &def.indexes {
                        let build = builds.get(&ix.name).filter(|b| b.table == def.name);
                        let mut row = vec![
                            t(&def.name),
                            t(&ix.name),
                            t(ix.columns.join(", ")),
                            Cell::B(ix.unique),
                            t(if ix.global { "global" } else { "local" }),
                            i(tablegate_planner::index::ops_per_row(&def, false)),
                            i(tablegate_planner::index::rows_per_group(&def, true)),
                            t(format!(
                                "CREATE {}INDEX {} ON {} ({}){}{}",
                                if ix.unique { "UNIQUE " } else { "" },
                                ix.name,
                                def.name,
                                ix.columns.join(", "),
                                if ix.include.is_empty() {
                                    String::new()
                                } else {
                                    format!(" INCLUDE ({})", ix.include.join(", "))
                                },
                                if ix.global { " GLOBAL" } else { "" }
                            )),
                            // Building on another gateway shows no counts.
                            t(if ix.building { "building" } else { "ready" }),
                            Cell::I(build.map(|b| b.rows_read as i64)),
                            Cell::I(build.map(|b| b.entries_written as i64)),
                            Cell::Us(build.and_then(|b| {
                                let since = b.started.duration_since(std::time::UNIX_EPOCH).ok()?;
                                i64::try_from(since.as_micros()).ok()
                            })),
                        ];
                        // This gateway's maintainer: how far behind it is.
                        let lag = ix.global.then(|| self.planner.maintainer().lag(&def.name));
                        row.extend([
                            Cell::I(lag.as_ref().map(|l| l.partitions as i64)),
                            Cell::F(
                                lag.as_ref()
                                    .map(|l| l.oldest.map_or(0.0, |d| d.as_secs_f64() * 1000.0)),
                            ),
                            Cell::I(lag.as_ref().map(|l| l.applied as i64)),
                        ]);
                        rows.push(row);
                    }
                }
            }
            "range_partitions" => {
                let Some(store) = part else {
                    return rows.batch(self.schema.clone());
                };
                for def in self.planner.catalog().tables() {
                    for r in store.ranges(&def.name).map_err(err)? {
                        rows.push(vec![
                            t(&def.name),
                            t(r.lo),
                            Cell::T(r.hi),
                            i(r.server),
                            i(r.entities),
                            i(r.partitions),
                            f(r.load_per_sec),
                            Cell::B(r.offline),
                        ]);
                    }
                }
            }
            "servers" => {
                let Some(store) = part else {
                    return rows.batch(self.schema.clone());
                };
                for s in store.servers() {
                    let cap = s.capacity_per_sec;
                    rows.push(vec![
                        i(s.server),
                        i(s.ranges),
                        f(s.load_per_sec),
                        Cell::I(cap.and_then(|c| i64::try_from(c).ok())),
                        Cell::F(cap.map(|c| s.load_per_sec / c.max(1) as f64)),
                    ]);
                }
            }
            "hot_partitions" => {
                let Some(store) = part else {
                    return rows.batch(self.schema.clone());
                };
                for h in store.hot_partitions(HOT_LIMIT) {
                    rows.push(vec![
                        t(h.table),
                        t(h.partition_key),
                        f(h.load_per_sec),
                        i(h.target_per_sec),
                        t(match h.level {
                            HotLevel::Warm => "warm",
                            HotLevel::Hot => "hot",
                        }),
                    ]);
                }
            }
            "insert_patterns" => {
                let Some(store) = part else {
                    return rows.batch(self.schema.clone());
                };
                for p in store.insert_patterns() {
                    let (name, advice) = match p.kind {
                        InsertPatternKind::AppendOnly => (
                            "append-only",
                            "new PartitionKeys always sort last: every insert lands on the last range partition; prefix keys with a hash or spread them",
                        ),
                        InsertPatternKind::PrependOnly => (
                            "prepend-only",
                            "new PartitionKeys always sort first: every insert lands on the first range partition; prefix keys with a hash or spread them",
                        ),
                    };
                    rows.push(vec![
                        t(p.table),
                        t(name),
                        f(p.share),
                        i(p.inserts),
                        t(advice),
                    ]);
                }
            }
            "query_counters" => {
                for (class, s) in telemetry().snapshot() {
                    let total_ms = s.total.as_secs_f64() * 1e3;
                    rows.push(vec![
                        t(class.name()),
                        i(s.statements),
                        i(s.errors),
                        f(total_ms),
                        Cell::F((s.statements > 0).then(|| total_ms / s.statements as f64)),
                        i(s.scanned),
                        i(s.returned),
                        i(s.retries),
                        f(s.backoff.as_secs_f64() * 1e3),
                    ]);
                }
            }
            "statements" => {
                for e in crate::statements::statements().snapshot() {
                    let s = &e.stats;
                    let ms = |d: std::time::Duration| f(d.as_secs_f64() * 1e3);
                    let per_call = |n: u64| f(n as f64 / s.calls.max(1) as f64);
                    rows.push(vec![
                        t(e.query.to_string()),
                        t(e.class),
                        i(s.calls),
                        i(s.errors),
                        ms(s.total),
                        f(s.total.as_secs_f64() * 1e3 / s.calls.max(1) as f64),
                        ms(s.max),
                        i(s.rows),
                        i(s.scanned),
                        per_call(s.scanned),
                        i(s.retries),
                        Cell::Us(Some(s.first_seen)),
                        Cell::Us(Some(s.last_seen)),
                    ]);
                }
            }
            "health" => {
                // A remote table service reports its own failures on each
                // request; only the embedded engine has a health to show.
                let Some(store) = part else {
                    return rows.batch(self.schema.clone());
                };
                let h = store.local().health();
                let failure = h.failure.as_ref();
                let advice = match failure {
                    None => "",
                    Some(f) if f.disk_full => {
                        "free space on the data directory's disk, then restart tablegate: every acknowledged write is recovered"
                    }
                    Some(_) => {
                        "check the disk and the system log, then restart tablegate: every acknowledged write is recovered"
                    }
                };
                rows.push(vec![
                    t("storage engine"),
                    t(if failure.is_some() {
                        "writes stopped"
                    } else {
                        "ok"
                    }),
                    Cell::B(failure.is_none()),
                    Cell::B(failure.is_some_and(|f| f.disk_full)),
                    Cell::T(failure.map(|f| f.cause.clone())),
                    Cell::Us(failure.map(|f| f.since_micros)),
                    i(h.write_errors),
                    i(h.read_errors),
                    Cell::T((!advice.is_empty()).then(|| advice.to_owned())),
                ]);
            }
            "throttle_counters" => {
                let Some(store) = part else {
                    return rows.batch(self.schema.clone());
                };
                let c = store.throttle_counts();
                let targets = store.config().targets.clone();
                let target = |pick: fn(&tablegate_store::Targets) -> u64| {
                    Cell::I(targets.as_ref().and_then(|t| i64::try_from(pick(t)).ok()))
                };
                rows.push(vec![
                    t("partition"),
                    target(|t| t.per_partition),
                    i(c.partition),
                ]);
                rows.push(vec![t("server"), target(|t| t.per_server), i(c.server)]);
                rows.push(vec![t("account"), target(|t| t.per_account), i(c.account)]);
            }
            _ => {
                let Some(store) = part else {
                    return rows.batch(self.schema.clone());
                };
                for e in store.balance_events() {
                    let (action, detail) = match e.action {
                        BalanceAction::Split { at } => {
                            ("split", format!("new range starts at '{at}'"))
                        }
                        BalanceAction::Move { lo, from, to } => (
                            "move",
                            format!("range from '{lo}' moved from server {from} to server {to}"),
                        ),
                    };
                    rows.push(vec![
                        Cell::Us(Some(e.at_micros)),
                        t(e.table),
                        t(action),
                        t(detail),
                    ]);
                }
            }
        }
        rows.batch(self.schema.clone())
    }
}

#[async_trait]
impl TableProvider for SystemView {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::View
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let batch = self.rows()?;
        MemTable::try_new(self.schema.clone(), vec![vec![batch]])?
            .scan(state, projection, filters, limit)
            .await
    }
}
