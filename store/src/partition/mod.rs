//! The partition layer: what makes the store a *partitioned* store in the
//! sense of the seeds. Data stays in the engine ([`LocalStore`]);
//! this layer decides who serves it and how fast.
//!
//! - [`map`] — each table's range partitions and their partition servers.
//! - [`PartitionedStore`] — every request is **routed** to the server that
//!   owns its range, **throttled** there ([`throttle`]: per PartitionKey,
//!   per server, per account), **metered** ([`load`]), and a query page
//!   **ends where a range served by another server begins**
//!   ([`map::TableMap::server_boundary_after`]).
//! - [`scan`] — partition-range and full scans fanned out across servers in
//!   parallel (bounded), pages still delivered in clustered-key order.
//! - The **balancer** ([`PartitionedStore::rebalance`]) splits the hottest
//!   range of a server that stayed over capacity for a whole window and
//!   moves part of it to the least-loaded server; the moving range is
//!   offline briefly and answers ServerBusy.
//! - [`retry`] — the retry policy callers use for ServerBusy and timeouts.
//! - [`keyviz`] — what each PartitionKey was asked for over time (read,
//!   written, throttled), for the console's key visualizer.
//!
//! Deliberately limited: a multi-partition scan page is metered against its
//! server and the account, not against each PartitionKey it passes through
//! (the store does not report per-partition scan counts); a page that spans
//! several ranges of one server is metered to the range it started in.

mod history;
pub mod keyviz;
pub(crate) mod load;
pub(crate) mod map;
pub mod sample;
pub mod scan;
pub mod throttle;

use std::collections::{HashMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use crate::api::{PartitionStats, TableInfo, TableStats};
use crate::clock::{Clock, SystemClock};
use crate::entity::{Entity, EntityWrite, Value};
use crate::error::{Result, StoreError};
use crate::local::LocalStore;
use crate::lowercase;
use crate::ops::{OpOutcome, Operation};
use crate::query::{KeyBox, Page, PageRequest, Query};

use keyviz::{History, KeyVizView, Traffic};
use load::{LoadTracker, Meter, Pair, with_entry};
use map::TableMap;
use throttle::{BucketKind, Scope, Throttle};

pub use throttle::{Targets, ThrottleCounts};

/// The system table holding partition maps. Hidden from listings, and the
/// `tgsys_` prefix is reserved.
const MAP_TABLE: &str = "tgsys_partition_map";
/// The system table holding the key visualizer's history.
const KEYVIZ_TABLE: &str = "tgsys_keyviz";
const SYSTEM_PREFIX: &str = "tgsys_";
/// Balancer events kept for the system views.
const MAX_EVENTS: usize = 256;

/// How the partition layer behaves.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionConfig {
    /// Number of partition servers (default 4).
    pub servers: usize,
    /// Scalability targets; `None` is `throttle = off`.
    pub targets: Option<Targets>,
    /// How long a server must stay over capacity before the balancer acts.
    pub balance_window: Duration,
    /// How long a moving range is offline.
    pub move_offline: Duration,
    /// The window over which "current load" is shown (hot partitions, views).
    pub load_window: Duration,
    /// Warm at this share of the PartitionKey target.
    pub warm_share: f64,
    /// Hot at this share of the PartitionKey target.
    pub hot_share: f64,
    /// The key visualizer's time slot (one column of its heat map, at its
    /// finest).
    pub keyviz_slot: Duration,
    /// Slots the key visualizer keeps per tier (the oldest is dropped):
    /// by default an hour at the slot width, six at 6× and sixty at 60×.
    pub keyviz_slots: usize,
}

impl Default for PartitionConfig {
    fn default() -> Self {
        PartitionConfig {
            servers: 4,
            targets: Some(Targets::default()),
            balance_window: Duration::from_secs(60),
            move_offline: Duration::from_millis(200),
            load_window: Duration::from_secs(10),
            warm_share: 0.5,
            hot_share: 0.9,
            keyviz_slot: Duration::from_secs(10),
            keyviz_slots: 360,
        }
    }
}

/// One range partition as operators see it.
#[derive(Debug, Clone, PartialEq)]
pub struct RangeInfo {
    /// Table name.
    pub table: String,
    /// Inclusive lower PartitionKey bound (`""` = start of the table).
    pub lo: String,
    /// Exclusive upper bound; `None` = end of the table.
    pub hi: Option<String>,
    /// Serving partition server.
    pub server: usize,
    /// Entities stored in the range.
    pub entities: u64,
    /// PartitionKeys with entities in the range.
    pub partitions: u64,
    /// Entities/s over the load window.
    pub load_per_sec: f64,
    /// Offline while moving.
    pub offline: bool,
}

/// One partition server as operators see it.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerInfo {
    /// Server id (0-based).
    pub server: usize,
    /// Range partitions it serves.
    pub ranges: usize,
    /// Entities/s over the load window.
    pub load_per_sec: f64,
    /// Its capacity (`None` with throttling off).
    pub capacity_per_sec: Option<u64>,
}

/// How hot a PartitionKey runs relative to its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HotLevel {
    /// At or over the warm share of the target.
    Warm,
    /// At or over the hot share of the target.
    Hot,
}

/// A PartitionKey running near or over its target.
#[derive(Debug, Clone, PartialEq)]
pub struct HotPartition {
    /// Table name.
    pub table: String,
    /// The PartitionKey.
    pub partition_key: String,
    /// Entities/s over the load window.
    pub load_per_sec: f64,
    /// The per-PartitionKey target.
    pub target_per_sec: u64,
    /// Warm or hot.
    pub level: HotLevel,
}

/// The insert anti-patterns of the seeds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InsertPatternKind {
    /// New PartitionKeys always sort last (timestamps, counters).
    AppendOnly,
    /// New PartitionKeys always sort first (reverse timestamps).
    PrependOnly,
}

/// A detected insert pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct InsertPattern {
    /// Table name.
    pub table: String,
    /// Which pattern.
    pub kind: InsertPatternKind,
    /// Recent share of inserts that follow it (0..1).
    pub share: f64,
    /// Inserts observed.
    pub inserts: u64,
}

/// What the balancer did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BalanceAction {
    /// A range was split so that a new range starts at `at`.
    Split {
        /// First PartitionKey of the new range.
        at: String,
    },
    /// A range moved between servers.
    Move {
        /// Lower bound of the moved range.
        lo: String,
        /// Old server.
        from: usize,
        /// New server.
        to: usize,
    },
}

/// A balancer event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BalanceEvent {
    /// When, in clock microseconds.
    pub at_micros: i64,
    /// Table name.
    pub table: String,
    /// What happened.
    pub action: BalanceAction,
}

/// The embedded store with its partition layer. Cheap to clone.
#[derive(Debug, Clone)]
pub struct PartitionedStore {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    store: LocalStore,
    config: PartitionConfig,
    clock: Arc<dyn Clock>,
    /// By lower-case table name.
    maps: RwLock<HashMap<String, TableMap>>,
    throttle: Throttle,
    load: Mutex<LoadTracker>,
    events: Mutex<VecDeque<BalanceEvent>>,
    keyviz: Mutex<History>,
    /// Held by a save of the key visualizer's history (one at a time).
    keyviz_save: Mutex<()>,
    /// The history is written back (it could be read at open).
    keyviz_persist: std::sync::atomic::AtomicBool,
}

/// Where a request goes.
struct Route {
    lo: String,
    server: usize,
    /// For queries: where the page must stop.
    stop: Option<String>,
}

fn is_system(name: &str) -> bool {
    name.len() >= SYSTEM_PREFIX.len()
        && name[..SYSTEM_PREFIX.len()].eq_ignore_ascii_case(SYSTEM_PREFIX)
}

fn micros(d: Duration) -> i64 {
    d.as_micros().min(i64::MAX as u128) as i64
}

fn window_secs(d: Duration) -> i64 {
    d.as_secs().max(1) as i64
}

impl PartitionedStore {
    /// Puts the partition layer over `store`, loading persisted maps.
    pub fn new(store: LocalStore, config: PartitionConfig) -> Result<Self> {
        Self::with_clock(store, config, Arc::new(SystemClock))
    }

    /// Same, with an injected clock (tests).
    pub fn with_clock(
        store: LocalStore,
        config: PartitionConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<Self> {
        let config = PartitionConfig {
            servers: config.servers.max(1),
            ..config
        };
        for system in [MAP_TABLE, KEYVIZ_TABLE] {
            match store.create_table_blocking(system) {
                Ok(_) | Err(StoreError::TableExists { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let shared = Shared {
            keyviz: Mutex::new(History::new(
                micros(config.keyviz_slot),
                config.keyviz_slots,
            )),
            throttle: Throttle::new(config.targets.clone()),
            store,
            config,
            clock,
            maps: RwLock::new(HashMap::new()),
            load: Mutex::new(LoadTracker::default()),
            events: Mutex::new(VecDeque::new()),
            keyviz_save: Mutex::new(()),
            keyviz_persist: std::sync::atomic::AtomicBool::new(true),
        };
        let tables = shared.store.list_tables_blocking();
        for t in tables.iter().filter(|t| !is_system(&t.name)) {
            let map = shared.load_map(&t.name)?;
            shared.maps.write().insert(t.name.to_ascii_lowercase(), map);
        }
        match shared.load_history() {
            Ok(saved) => {
                let refused = shared.keyviz.lock().restore(saved, shared.now());
                if refused > 0 {
                    tracing::warn!(
                        slots = refused,
                        "key visualizer history: skipped damaged slots or slots of another width"
                    );
                }
            }
            Err(e) => {
                tracing::warn!(
                    error = %e,
                    "cannot read the key visualizer's history: it starts empty and is not written this run"
                );
                shared
                    .keyviz_persist
                    .store(false, std::sync::atomic::Ordering::Relaxed);
            }
        }
        Ok(PartitionedStore {
            shared: Arc::new(shared),
        })
    }

    /// The entity store underneath (no routing, no throttling).
    pub fn local(&self) -> &LocalStore {
        &self.shared.store
    }

    /// The configuration in force.
    pub fn config(&self) -> &PartitionConfig {
        &self.shared.config
    }

    /// Creates a table, served at first by one range partition.
    pub fn create_table_blocking(&self, name: &str) -> Result<TableInfo> {
        if is_system(name) {
            return Err(StoreError::InvalidTableName {
                name: name.to_owned(),
                reason: "names starting with tgsys_ are reserved for the system",
            });
        }
        let info = self.shared.store.create_table_blocking(name)?;
        let server = self.shared.initial_server(name);
        self.shared
            .maps
            .write()
            .insert(name.to_ascii_lowercase(), TableMap::single(server));
        Ok(info)
    }

    /// Drops a table, its data and its partition map.
    pub fn drop_table_blocking(&self, name: &str) -> Result<()> {
        if is_system(name) {
            return Err(StoreError::TableNotFound {
                name: name.to_owned(),
            });
        }
        self.shared.store.drop_table_blocking(name)?;
        let lower = name.to_ascii_lowercase();
        self.shared.maps.write().remove(&lower);
        self.shared.delete_partition(MAP_TABLE, &lower)?;
        if let Err(e) = self.shared.forget_history(&lower) {
            // Its rows stay until they age out; a table created under the
            // name meanwhile would show them.
            tracing::warn!(error = %e, table = %lower, "cannot delete a dropped table's key visualizer history");
        }
        Ok(())
    }

    /// User tables, by name.
    pub fn list_tables_blocking(&self) -> Vec<TableInfo> {
        let mut v = self.shared.store.list_tables_blocking();
        v.retain(|t| !is_system(&t.name));
        v
    }

    /// Point read, routed and throttled (costs one entity).
    pub fn get_blocking(&self, table: &str, pk: &str, rk: &str) -> Result<Option<Entity>> {
        let route = self.shared.route_counted(table, pk, 1)?;
        let scope = Scope {
            table,
            partition: Some(pk),
            server: route.server,
        };
        self.shared.admit(scope, 1, pk)?;
        let r = self.shared.store.get_blocking(table, pk, rk);
        self.shared.charge(scope, &route, 1);
        self.shared.traffic(table, pk, Traffic::Read, 1);
        r
    }

    /// Makes every write so far durable (see [`crate::deferring_sync`]).
    pub fn sync_blocking(&self) -> Result<()> {
        self.shared.store.sync_blocking()
    }

    /// An entity-group transaction, routed to its partition's server and
    /// throttled by its operation count.
    pub fn execute_blocking(&self, table: &str, ops: &[Operation]) -> Result<Vec<OpOutcome>> {
        let Some(first) = ops.first() else {
            return self.shared.store.execute_blocking(table, ops);
        };
        let pk = first.keys().0.to_owned();
        let route = self.shared.route_counted(table, &pk, ops.len() as u64)?;
        let scope = Scope {
            table,
            partition: Some(&pk),
            server: route.server,
        };
        let cost = ops.len() as u64;
        self.shared.admit(scope, cost, &pk)?;
        let r = self.shared.store.execute_blocking(table, ops);
        self.shared.charge(scope, &route, cost);
        self.shared.traffic(table, &pk, Traffic::Written, cost);
        if let Ok(outcomes) = &r
            && outcomes.iter().any(|o| !o.existed && o.wrote())
        {
            let mut load = self.shared.load.lock();
            load.inserts
                .entry(table.to_ascii_lowercase())
                .or_default()
                .record(&pk);
        }
        r
    }

    /// One page of a query: routed to the server owning the range where the
    /// page starts, ending where another server's range begins.
    pub fn query_blocking(&self, table: &str, query: &Query, req: &PageRequest) -> Result<Page> {
        if is_system(table) {
            return Err(StoreError::TableNotFound {
                name: table.to_owned(),
            });
        }
        req.validate()?;
        let Some(start) = self.shared.store.page_start(table, query, req)? else {
            return Ok(Page {
                entities: Vec::new(),
                encoded: Default::default(),
                scanned: 0,
                continuation: None,
                next_partition_key: None,
            });
        };
        let route = self.shared.route_counted(table, &start, 1)?;
        let single = single_partition(query);
        let scope = Scope {
            table,
            partition: single,
            server: route.server,
        };
        self.shared.admit(scope, 1, &start)?;
        let mut req = req.clone();
        // The page scans no more than the buckets hold: the query pays for
        // its own reading, page by page (the next page waits for refill).
        let budget = self.shared.throttle.budget(scope, self.shared.now());
        req.max_scanned = match (req.max_scanned, budget) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        req.stop_at_partition = match (req.stop_at_partition.take(), route.stop.clone()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let r = self.shared.store.query_blocking(table, query, &req);
        let cost = r.as_ref().map_or(1, |p| p.scanned.max(1));
        self.shared.charge(scope, &route, cost);
        // A page is counted at its first entity's PartitionKey (at the key
        // its range starts from when it returned none).
        let at = match &r {
            Ok(p) if !p.entities.is_empty() => p.entities[0].partition_key.as_str(),
            Ok(p) if !p.encoded.is_empty() => p.encoded.get(0).partition_key(),
            _ => single.unwrap_or(&start),
        };
        let kind = if single.is_some() {
            Traffic::Read
        } else {
            Traffic::Scanned
        };
        self.shared.traffic(table, at, kind, cost);
        r
    }

    /// Table counts (metadata; not throttled).
    pub fn table_stats_blocking(&self, table: &str) -> Result<TableStats> {
        self.shared.check_user_table(table)?;
        self.shared.store.table_stats_blocking(table)
    }

    /// Partition counts (metadata; not throttled).
    pub fn partition_stats_blocking(
        &self,
        table: &str,
        lo: Bound<&str>,
        hi: Bound<&str>,
        limit: usize,
    ) -> Result<Vec<PartitionStats>> {
        self.shared.check_user_table(table)?;
        self.shared
            .store
            .partition_stats_blocking(table, lo, hi, limit)
    }

    /// `table`'s range partitions as (lower bound, upper bound, server),
    /// without statistics (cheap; for planning).
    pub fn layout(&self, table: &str) -> Result<Vec<(String, Option<String>, usize)>> {
        let (_, map) = self.shared.map_of(table)?;
        Ok(map
            .ranges
            .iter()
            .enumerate()
            .map(|(i, r)| (r.lo.clone(), map.hi(i).map(str::to_owned), r.server))
            .collect())
    }

    /// The partition server serving `pk` of `table` (`None` for a table
    /// that does not exist): what EXPLAIN ANALYZE reports for a point
    /// lookup. Reads the map in place; [`Self::layout`] copies all of it.
    pub fn server_of(&self, table: &str, pk: &str) -> Option<usize> {
        self.shared
            .with_map(table, |m| m.ranges[m.locate(pk)].server)
            .ok()
    }

    /// Estimates what scanning `query` would read (statistics and bounded
    /// probes; not throttled).
    pub fn estimate_blocking(&self, table: &str, query: &Query) -> Result<crate::ScanEstimate> {
        self.shared.check_user_table(table)?;
        self.shared.store.estimate_blocking(table, query, 10_000)
    }

    /// Splits `table`'s range so that a new range starts at PartitionKey
    /// `at` (same server). No-op if a range already starts there.
    pub fn split_blocking(&self, table: &str, at: &str) -> Result<()> {
        crate::limits::check_key(crate::KeyKind::PartitionKey, at)?;
        let lower = self.shared.check_user_table(table)?;
        let server = {
            let mut maps = self.shared.maps.write();
            let map = maps.get_mut(&lower).expect("checked");
            match map.split(at) {
                Some(i) => map.ranges[i].server,
                None => return Ok(()),
            }
        };
        self.shared.persist_range(&lower, at, server)?;
        self.shared
            .event(&lower, BalanceAction::Split { at: at.to_owned() });
        Ok(())
    }

    /// Moves the range starting at `lo` to `server`; it is offline for the
    /// configured move time.
    pub fn move_range_blocking(&self, table: &str, lo: &str, server: usize) -> Result<()> {
        let lower = self.shared.check_user_table(table)?;
        if server >= self.shared.config.servers {
            return Err(StoreError::InvalidQuery {
                reason: format!("there are {} partition servers", self.shared.config.servers),
            });
        }
        let from = {
            let mut maps = self.shared.maps.write();
            let map = maps.get_mut(&lower).expect("checked");
            let Some(r) = map.ranges.iter_mut().find(|r| r.lo == lo) else {
                return Err(StoreError::InvalidQuery {
                    reason: format!("no range partition of {table} starts at {lo:?}"),
                });
            };
            let from = r.server;
            r.server = server;
            r.offline_until =
                self.shared.now() + self.shared.config.move_offline.as_micros() as i64;
            from
        };
        self.shared.persist_range(&lower, lo, server)?;
        self.shared.event(
            &lower,
            BalanceAction::Move {
                lo: lo.to_owned(),
                from,
                to: server,
            },
        );
        Ok(())
    }

    /// One balancer pass: for every server over capacity for the whole
    /// balance window, split its hottest range and move a part to the
    /// least-loaded server. Returns what it did.
    pub fn rebalance(&self) -> Vec<BalanceEvent> {
        self.shared.rebalance()
    }

    /// Runs [`rebalance`](Self::rebalance) every second until the store is
    /// dropped everywhere else.
    pub fn spawn_balancer(&self) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(&self.shared);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let Some(shared) = weak.upgrade() else { return };
                tokio::task::spawn_blocking(move || {
                    shared.rebalance();
                    if let Err(e) = shared.save_history(false) {
                        tracing::warn!(error = %e, "cannot write the key visualizer's history");
                    }
                })
                .await
                .ok();
            }
        })
    }

    /// Range partitions of `table` with their servers, sizes and load.
    pub fn ranges(&self, table: &str) -> Result<Vec<RangeInfo>> {
        let (lower, map) = self.shared.map_of(table)?;
        let now = self.shared.now();
        let w = window_secs(self.shared.config.load_window);
        let name = self
            .list_tables_blocking()
            .into_iter()
            .find(|t| t.name.eq_ignore_ascii_case(table))
            .map_or_else(|| table.to_owned(), |t| t.name);
        let mut out = Vec::with_capacity(map.ranges.len());
        for (i, r) in map.ranges.iter().enumerate() {
            let hi = map.hi(i).map(str::to_owned);
            let stats = self.shared.store.partition_stats_blocking(
                table,
                Bound::Included(&r.lo),
                hi.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
                usize::MAX,
            )?;
            let load = self.shared.load.lock();
            out.push(RangeInfo {
                table: name.clone(),
                lo: r.lo.clone(),
                hi,
                server: r.server,
                entities: stats.iter().map(|s| s.entities).sum(),
                partitions: stats.len() as u64,
                load_per_sec: load
                    .ranges
                    .get(&Pair(&lower, &r.lo))
                    .map_or(0.0, |m| m.rate(now, w)),
                offline: r.offline_until > now,
            });
        }
        Ok(out)
    }

    /// Every partition server with its load.
    pub fn servers(&self) -> Vec<ServerInfo> {
        let now = self.shared.now();
        let w = window_secs(self.shared.config.load_window);
        let maps = self.shared.maps.read();
        let load = self.shared.load.lock();
        (0..self.shared.config.servers)
            .map(|s| ServerInfo {
                server: s,
                ranges: maps
                    .values()
                    .map(|m| m.ranges.iter().filter(|r| r.server == s).count())
                    .sum(),
                load_per_sec: load.servers.get(&s).map_or(0.0, |m| m.rate(now, w)),
                capacity_per_sec: self.shared.config.targets.as_ref().map(|t| t.per_server),
            })
            .collect()
    }

    /// PartitionKeys at or over the warm share of their target, hottest
    /// first, at most `limit`.
    pub fn hot_partitions(&self, limit: usize) -> Vec<HotPartition> {
        let now = self.shared.now();
        let c = &self.shared.config;
        let w = window_secs(c.load_window);
        let target = c
            .targets
            .as_ref()
            .map_or(Targets::default().per_partition, |t| t.per_partition);
        let load = self.shared.load.lock();
        let mut hot: Vec<HotPartition> = load
            .partitions
            .iter()
            .filter_map(|((table, pk), m)| {
                let rate = m.rate(now, w);
                let share = rate / target as f64;
                let level = if share >= c.hot_share {
                    HotLevel::Hot
                } else if share >= c.warm_share {
                    HotLevel::Warm
                } else {
                    return None;
                };
                Some(HotPartition {
                    table: table.clone(),
                    partition_key: pk.clone(),
                    load_per_sec: rate,
                    target_per_sec: target,
                    level,
                })
            })
            .collect();
        hot.sort_by(|a, b| b.load_per_sec.total_cmp(&a.load_per_sec));
        hot.truncate(limit);
        hot
    }

    /// Tables whose inserts follow the append-only or prepend-only pattern.
    pub fn insert_patterns(&self) -> Vec<InsertPattern> {
        let load = self.shared.load.lock();
        let mut v: Vec<InsertPattern> = load
            .inserts
            .iter()
            .filter_map(|(table, t)| {
                t.pattern().map(|(kind, share)| InsertPattern {
                    table: table.clone(),
                    kind,
                    share,
                    inserts: t.inserts,
                })
            })
            .collect();
        v.sort_by(|a, b| a.table.cmp(&b.table));
        v
    }

    /// Requests refused by each kind of target since start.
    pub fn throttle_counts(&self) -> ThrottleCounts {
        self.shared.throttle.counts()
    }

    /// Recent balancer events, oldest first.
    pub fn balance_events(&self) -> Vec<BalanceEvent> {
        self.shared.events.lock().iter().cloned().collect()
    }

    /// The key visualizer's history of `table` over the last `window`
    /// (entities read, written and throttled per PartitionKey per slot),
    /// in at most `max_buckets` rows.
    pub fn key_visualizer(
        &self,
        table: &str,
        max_buckets: usize,
        window: Duration,
    ) -> Result<KeyVizView> {
        let table = self.shared.check_user_table(table)?;
        let history = self.shared.keyviz.lock();
        Ok(history.view(&table, max_buckets, self.shared.now(), micros(window)))
    }

    /// The statements (by the tags [`crate::api::statement_scope`] gave
    /// them) that asked most of `table`'s keys `lo..=hi` in the view over
    /// `window`'s columns starting in `from..to` (clock microseconds):
    /// `(tag, entities)`, the most first, and every entity counted there.
    pub fn key_visualizer_statements(
        &self,
        table: &str,
        (lo, hi): (&str, &str),
        (from, to): (i64, i64),
        window: Duration,
    ) -> Result<(Vec<(u64, u64)>, u64)> {
        let table = self.shared.check_user_table(table)?;
        let history = self.shared.keyviz.lock();
        Ok(history.statements(&table, lo, hi, from, to, micros(window), self.shared.now()))
    }

    /// The width of the key visualizer's columns over `window`.
    pub fn key_visualizer_column(&self, window: Duration) -> Duration {
        let w = self.shared.keyviz.lock().column_micros(micros(window));
        Duration::from_micros(w.max(0) as u64)
    }

    /// Writes the key visualizer's history, the filling slot included (at
    /// shutdown; the balancer writes finished slots as it goes).
    pub fn save_key_visualizer_blocking(&self) -> Result<()> {
        self.shared.save_history(true)
    }

    /// The clock the layer runs on, in microseconds (what balance events
    /// and key visualizer slots are stamped with).
    pub fn now_micros(&self) -> i64 {
        self.shared.now()
    }
}

/// The PartitionKey when every span of the query lies in one partition.
fn single_partition(q: &Query) -> Option<&str> {
    let first = q.spans.first()?.pk.as_point()?;
    q.spans
        .iter()
        .all(|b: &KeyBox| b.pk.as_point() == Some(first))
        .then_some(first)
}

impl Shared {
    fn now(&self) -> i64 {
        self.clock.now_micros()
    }

    /// New tables spread over servers by a stable hash of their name.
    fn initial_server(&self, name: &str) -> usize {
        let h = xxhash_rust::xxh3::xxh3_64(name.to_ascii_lowercase().as_bytes());
        (h % self.config.servers as u64) as usize
    }

    /// `f` of a user table's partition map, read in place under the maps'
    /// read lock (per-query paths: [`Self::map_of`] copies the map).
    fn with_map<R>(&self, table: &str, f: impl FnOnce(&TableMap) -> R) -> Result<R> {
        let lower = lowercase(table);
        let maps = self.maps.read();
        match maps.get(&*lower) {
            Some(map) if !is_system(&lower) => Ok(f(map)),
            _ => Err(StoreError::TableNotFound {
                name: table.to_owned(),
            }),
        }
    }

    /// A user table's lower-case name and a copy of its partition map.
    fn map_of(&self, table: &str) -> Result<(String, TableMap)> {
        let lower = self.check_user_table(table)?;
        let map =
            self.maps
                .read()
                .get(&lower)
                .cloned()
                .ok_or_else(|| StoreError::TableNotFound {
                    name: table.to_owned(),
                })?;
        Ok((lower, map))
    }

    fn check_user_table(&self, table: &str) -> Result<String> {
        let lower = table.to_ascii_lowercase();
        if is_system(&lower) || !self.maps.read().contains_key(&lower) {
            return Err(StoreError::TableNotFound {
                name: table.to_owned(),
            });
        }
        Ok(lower)
    }

    fn route(&self, table: &str, pk: &str) -> Result<Route> {
        let lower = lowercase(table);
        let maps = self.maps.read();
        let map = maps
            .get(&*lower)
            .filter(|_| !is_system(&lower))
            .ok_or_else(|| StoreError::TableNotFound {
                name: table.to_owned(),
            })?;
        let i = map.locate(pk);
        let r = &map.ranges[i];
        let now = self.now();
        if r.offline_until > now {
            let retry_after = Duration::from_micros((r.offline_until - now) as u64);
            let scope = format!(
                "range partition [{:?}, {}) of table {table}",
                r.lo,
                map.hi(i).map_or("end".to_owned(), |h| format!("{h:?}"))
            );
            return Err(StoreError::ServerBusy {
                reason: format!(
                    "{scope} is moving to partition server {}; retry in {} ms",
                    r.server,
                    retry_after.as_millis().max(1)
                ),
                scope,
                target_per_sec: None,
                retry_after,
            });
        }
        Ok(Route {
            lo: r.lo.clone(),
            server: r.server,
            stop: map.server_boundary_after(i).map(str::to_owned),
        })
    }

    /// [`Shared::route`], counting a request refused because its range is
    /// moving as throttled traffic.
    fn route_counted(&self, table: &str, pk: &str, demand: u64) -> Result<Route> {
        self.route(table, pk).inspect_err(|e| {
            if matches!(e, StoreError::ServerBusy { .. }) {
                self.traffic(table, pk, Traffic::Throttled, demand);
            }
        })
    }

    /// Counts traffic for the key visualizer.
    fn traffic(&self, table: &str, pk: &str, t: Traffic, n: u64) {
        let now = self.now();
        let tag = crate::api::statement_tag();
        self.keyviz
            .lock()
            .record(&lowercase(table), pk, t, n, tag, now);
    }

    /// Admits `demand` entities at `scope`, whose request starts at
    /// PartitionKey `at`; a refusal is counted against `at`.
    fn admit(&self, scope: Scope<'_>, demand: u64, at: &str) -> Result<()> {
        let now = self.now();
        match self.throttle.admit(scope, now) {
            Ok(()) => Ok(()),
            Err(refused) => {
                self.traffic(scope.table, at, Traffic::Throttled, demand);
                // Refused demand still shows in the load meters: a server
                // refusing requests is over capacity whatever it admitted.
                let w = window_secs(self.config.balance_window)
                    .max(window_secs(self.config.load_window));
                let mut load = self.load.lock();
                let server = load.servers.entry(scope.server).or_default();
                if refused.kind == BucketKind::Server {
                    server.mark_over(now, w);
                }
                if let Some(pk) = scope.partition {
                    let table = lowercase(scope.table);
                    with_entry(&mut load.partitions, (&table, pk), Meter::default, |m| {
                        m.add(now, demand, w);
                    });
                }
                Err(refused.error)
            }
        }
    }

    fn charge(&self, scope: Scope<'_>, route: &Route, cost: u64) {
        let now = self.now();
        self.throttle.charge(scope, cost, now);
        let w = window_secs(self.config.balance_window).max(window_secs(self.config.load_window));
        let table = lowercase(scope.table);
        let mut load = self.load.lock();
        load.servers
            .entry(scope.server)
            .or_default()
            .add(now, cost, w);
        let add = |m: &mut Meter| m.add(now, cost, w);
        with_entry(&mut load.ranges, (&table, &route.lo), Meter::default, add);
        if let Some(pk) = scope.partition {
            with_entry(&mut load.partitions, (&table, pk), Meter::default, add);
        }
        load.prune(now, w);
    }

    fn event(&self, table: &str, action: BalanceAction) {
        let mut ev = self.events.lock();
        if ev.len() == MAX_EVENTS {
            ev.pop_front();
        }
        ev.push_back(BalanceEvent {
            at_micros: self.now(),
            table: table.to_owned(),
            action,
        });
    }

    fn load_map(&self, table: &str) -> Result<TableMap> {
        let lower = table.to_ascii_lowercase();
        let mut map = TableMap::single(self.initial_server(&lower));
        let q = Query::spans(vec![KeyBox::partition(lower.clone())]);
        let mut req = PageRequest::first(crate::limits::MAX_PAGE_SIZE);
        loop {
            let page = self.store.query_blocking(MAP_TABLE, &q, &req)?;
            for e in &page.entities {
                let server = match e.properties.get("server") {
                    Some(Value::Int32(s)) => (*s).max(0) as usize % self.config.servers,
                    _ => {
                        return Err(StoreError::Corrupt(format!(
                            "partition map entry of {table} has no server"
                        )));
                    }
                };
                map.split(&e.row_key);
                let i = map.locate(&e.row_key);
                map.ranges[i].server = server;
            }
            match page.continuation {
                Some(t) => req = req.resume(t),
                None => return Ok(map),
            }
        }
    }

    fn persist_range(&self, table: &str, lo: &str, server: usize) -> Result<()> {
        let op = Operation::InsertOrReplace(
            EntityWrite::new(table, lo).with("server", Value::Int32(server as i32)),
        );
        self.store.execute_blocking(MAP_TABLE, &[op]).map(|_| ())
    }

    /// Deletes PartitionKey `pk` of system table `system`.
    fn delete_partition(&self, system: &str, pk: &str) -> Result<()> {
        self.delete_all(system, &Query::spans(vec![KeyBox::partition(pk)]))
    }

    /// Deletes every entity of system table `system` that `q` selects,
    /// one transaction per PartitionKey of each page.
    fn delete_all(&self, system: &str, q: &Query) -> Result<()> {
        loop {
            let page = self
                .store
                .query_blocking(system, q, &PageRequest::first(100))?;
            if page.entities.is_empty() {
                return Ok(());
            }
            // A page is in key order: its PartitionKeys come in runs.
            for group in page
                .entities
                .chunk_by(|a, b| a.partition_key == b.partition_key)
            {
                let ops: Vec<_> = group
                    .iter()
                    .map(|e| Operation::Delete {
                        partition_key: e.partition_key.clone(),
                        row_key: e.row_key.clone(),
                        if_match: crate::IfMatch::Any,
                    })
                    .collect();
                self.store.execute_blocking(system, &ops)?;
            }
        }
    }

    fn rebalance(&self) -> Vec<BalanceEvent> {
        let Some(targets) = self.config.targets.clone() else {
            return Vec::new();
        };
        let now = self.now();
        let w = window_secs(self.config.balance_window);
        let mut done = Vec::new();
        for server in 0..self.config.servers {
            let over = self
                .load
                .lock()
                .servers
                .get(&server)
                .is_some_and(|m| m.over_for(now, w, targets.per_server));
            if !over {
                continue;
            }
            if let Some(ev) = self.relieve(server, now, w) {
                done.extend(ev);
            }
        }
        done
    }

    /// Splits or moves load off `server`. Returns the events, or `None` when
    /// nothing can help (one hot PartitionKey alone on its server).
    fn relieve(&self, server: usize, now: i64, w: i64) -> Option<Vec<BalanceEvent>> {
        let maps = self.maps.read().clone();
        let load = self.load.lock();
        // The hottest range on this server.
        let (table, idx, _) = maps
            .iter()
            .flat_map(|(t, m)| {
                m.ranges
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.server == server)
                    .map(move |(i, r)| (t, i, r))
            })
            .map(|(t, i, r)| {
                let rate = load
                    .ranges
                    .get(&(t.clone(), r.lo.clone()))
                    .map_or(0.0, |m| m.rate(now, w));
                (t.clone(), i, rate)
            })
            .max_by(|a, b| a.2.total_cmp(&b.2))?;
        let map = &maps[&table];
        let lo = map.ranges[idx].lo.clone();
        let hi = map.hi(idx).map(str::to_owned);
        // Loaded PartitionKeys inside it, in key order.
        let mut pks: Vec<(String, f64)> = load
            .partitions
            .iter()
            .filter(|((t, pk), _)| {
                *t == table
                    && pk.as_str() >= lo.as_str()
                    && hi.as_deref().is_none_or(|h| pk.as_str() < h)
            })
            .map(|((_, pk), m)| (pk.clone(), m.rate(now, w)))
            .filter(|(_, r)| *r > 0.0)
            .collect();
        pks.sort_by(|a, b| a.0.cmp(&b.0));
        let target = (0..self.config.servers)
            .filter(|s| *s != server)
            .min_by(|a, b| {
                let ra = load.servers.get(a).map_or(0.0, |m| m.rate(now, w));
                let rb = load.servers.get(b).map_or(0.0, |m| m.rate(now, w));
                ra.total_cmp(&rb)
            })?;
        let server_ranges = maps
            .values()
            .flat_map(|m| &m.ranges)
            .filter(|r| r.server == server)
            .count();
        drop(load);
        let before = self.events.lock().len();
        if pks.len() >= 2 {
            // Split at the load-weighted median, keeping both halves loaded.
            let total: f64 = pks.iter().map(|p| p.1).sum();
            let mut acc = 0.0;
            let mut at = pks.len() - 1;
            for (i, (_, r)) in pks.iter().enumerate() {
                acc += r;
                if acc >= total / 2.0 {
                    at = (i + 1).min(pks.len() - 1);
                    break;
                }
            }
            let at = pks[at.max(1)].0.clone();
            self.split_and_move(&table, &at, target).ok()?;
        } else if server_ranges >= 2 {
            self.move_range(&table, &lo, target).ok()?;
        } else {
            return None;
        }
        // A fresh window must pass before this server is judged again.
        let mut load = self.load.lock();
        for s in [server, target] {
            if let Some(m) = load.servers.get_mut(&s) {
                m.reset();
            }
        }
        let ev = self.events.lock();
        Some(ev.iter().skip(before).cloned().collect())
    }

    fn split_and_move(&self, table: &str, at: &str, to: usize) -> Result<()> {
        let created = {
            let mut maps = self.maps.write();
            let map = maps
                .get_mut(table)
                .ok_or_else(|| StoreError::TableNotFound {
                    name: table.to_owned(),
                })?;
            map.split(at).is_some()
        };
        if created {
            self.event(table, BalanceAction::Split { at: at.to_owned() });
        }
        self.move_range(table, at, to)
    }

    fn move_range(&self, table: &str, lo: &str, to: usize) -> Result<()> {
        let from = {
            let mut maps = self.maps.write();
            let map = maps
                .get_mut(table)
                .ok_or_else(|| StoreError::TableNotFound {
                    name: table.to_owned(),
                })?;
            let r = map.ranges.iter_mut().find(|r| r.lo == lo).ok_or_else(|| {
                StoreError::InvalidQuery {
                    reason: format!("no range starts at {lo:?}"),
                }
            })?;
            let from = r.server;
            r.server = to;
            r.offline_until = self.now() + self.config.move_offline.as_micros() as i64;
            from
        };
        self.persist_range(table, lo, to)?;
        self.event(
            table,
            BalanceAction::Move {
                lo: lo.to_owned(),
                from,
                to,
            },
        );
        Ok(())
    }
}

crate::api::table_store_over_blocking!(PartitionedStore);
