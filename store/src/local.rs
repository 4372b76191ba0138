//! [`LocalStore`]: the embedded entity store — the "stream layer" of the
//! seeds, where data lives — over an [`Engine`] (fjall on disk, or memory).
//!
//! Writes: every write is an entity-group transaction. It takes the table's
//! write gate (shared; a drop takes it exclusively) and the lock stripe of
//! its PartitionKey, reads the current entities, applies the operations in
//! order with [`Operation::apply`], and commits the new entities plus the
//! partition's entity count in one atomic engine batch. Concurrent EGTs on
//! one partition therefore serialize, and ETag checks cannot race.
//!
//! Reads take no locks: gets read the engine directly and query pages scan
//! it, ending where [`PageRequest`] says (page size, time budget, partition
//! boundary) with a continuation token.

use std::collections::HashMap;
use std::ops::{Bound, Range};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Instant;

use byteview::ByteView;
use parking_lot::{Mutex, RwLock};

use crate::clock::{Clock, SystemClock};
use crate::codec::{self, EncodedEntities};
use crate::engine::faults::Faulty;
use crate::engine::fjall_engine::FjallEngine;
use crate::engine::health::{Health, HealthReport, Watched};
use crate::engine::memory::MemoryEngine;
use crate::engine::packed::{ChunkLimits, Packed};
use crate::engine::{Durability, Engine, Mutation, Space};
use crate::entity::{DateTime, Entity};
use crate::error::{Result, StoreError};
use crate::limits;
use crate::ops::{Effect, OpOutcome, Operation, Written, check_batch};
use crate::query::{ContinuationToken, KeyTest, Page, PageRequest, Query, Resume};
use crate::{PartitionStats, ScanEstimate, TableInfo, TableStats};

const LOCK_STRIPES: usize = 1024;
const TABLE_KEY_PREFIX: &[u8] = b"table/";
const DROPPING_KEY_PREFIX: &[u8] = b"dropping/";
const NEXT_TABLE_ID_KEY: &[u8] = b"next_table_id";
/// Entities deleted per engine batch while purging a dropped table.
const PURGE_CHUNK: usize = 4096;
/// How often (in scanned entities) a page checks its time budget.
const BUDGET_CHECK_EVERY: u64 = 64;
/// Batches of at least this many operations read the entities they touch
/// with one scan (`Inner::read_current_by_range`).
const RANGE_READ_MIN_OPS: usize = 8;

/// How to open a [`LocalStore`].
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// When writes are acknowledged relative to the disk.
    pub durability: Durability,
    /// Block cache size for the durable engine.
    pub cache_bytes: u64,
    /// A control file naming engine faults to inject, for tests (see
    /// `engine/faults.rs`); `None` in production.
    pub fault_file: Option<std::path::PathBuf>,
    /// The durable engine's memtable size for a new data directory (an
    /// existing one keeps its own); `None`: fjall's default, 64 MiB.
    pub memtable_bytes: Option<u64>,
}

impl StoreOptions {
    /// `tablegate serve`'s default block cache (`cache_mb`).
    pub const DEFAULT_CACHE_BYTES: u64 = 128 << 20;
    /// `tablegate serve`'s default memtable (`memtable_mb`).
    pub const DEFAULT_MEMTABLE_BYTES: u64 = 16 << 20;
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            durability: Durability::Sync,
            cache_bytes: Self::DEFAULT_CACHE_BYTES,
            fault_file: None,
            memtable_bytes: Some(Self::DEFAULT_MEMTABLE_BYTES),
        }
    }
}

#[derive(Debug)]
struct TableEntry {
    id: u64,
    name: String,
    /// Entities in the table (sum of the persisted partition counts).
    entities: AtomicI64,
    /// Partitions with at least one entity.
    partitions: AtomicI64,
    /// Bytes of the table's entities (sum of the persisted partition
    /// byte counts).
    bytes: AtomicI64,
    /// False when a partition's statistics predate byte counting.
    bytes_known: AtomicBool,
    /// Writers hold it shared; drop holds it exclusively.
    gate: RwLock<()>,
    dropped: AtomicBool,
}

/// The embedded entity store. Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct LocalStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    engine: Box<dyn Engine>,
    health: Arc<Health>,
    clock: Arc<dyn Clock>,
    tables: RwLock<HashMap<String, Arc<TableEntry>>>,
    /// Serializes create/drop (and table-id allocation).
    ddl: Mutex<()>,
    stripes: Vec<Mutex<()>>,
    /// Last timestamp handed out, so timestamps never repeat.
    last_ts: AtomicI64,
}

/// Which files of the data directory `dir` hold the damage: its journals,
/// or its table files (the engine's log line gives the damaged block).
fn damaged_files(dir: &Path, journal: bool) -> String {
    if journal {
        let mut journals: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".jnl"))
            .collect();
        journals.sort();
        match journals.as_slice() {
            [one] => format!("in journal {}", dir.join(one).display()),
            _ => format!(
                "in one of the journals {} of {}",
                journals.join(", "),
                dir.display()
            ),
        }
    } else {
        format!(
            "in a table file under {} (the log line before this names the block)",
            dir.join("keyspaces").display()
        )
    }
}

impl LocalStore {
    /// Opens (or creates) a durable store in `path`, recovering its journal
    /// and finishing any table drop a crash interrupted.
    ///
    /// Damage it cannot recover from (a journal batch or a table block that
    /// fails its check; a torn last batch is recovered) is
    /// [`StoreError::Corrupt`] naming the files: opening never goes on past
    /// it, since that would drop acknowledged writes or serve wrong rows.
    pub fn open(path: impl AsRef<Path>, options: StoreOptions) -> Result<Self> {
        let path = path.as_ref();
        let opened = FjallEngine::open_sized(
            path,
            options.durability,
            options.cache_bytes,
            options.memtable_bytes,
        )
        .and_then(|engine| {
            let mut engine: Box<dyn Engine> = Box::new(engine);
            if let Some(control) = options.fault_file {
                engine = Box::new(Faulty::new(engine, control));
            }
            Self::with_engine(engine, Arc::new(SystemClock))
        });
        opened.map_err(|e| match e {
            StoreError::Corrupt(why) => StoreError::Corrupt(format!(
                "{why}; {}",
                damaged_files(path, why.contains("journal"))
            )),
            e => e,
        })
    }

    /// A store in memory, gone when dropped.
    pub fn in_memory() -> Self {
        Self::in_memory_with_clock(Arc::new(SystemClock))
    }

    /// A store in memory with a given clock.
    pub fn in_memory_with_clock(clock: Arc<dyn Clock>) -> Self {
        Self::with_engine(Box::new(MemoryEngine::default()), clock)
            .expect("an empty memory engine always opens")
    }

    fn with_engine(engine: Box<dyn Engine>, clock: Arc<dyn Clock>) -> Result<Self> {
        let health = Arc::new(Health::default());
        let engine = Box::new(Watched::new(engine, health.clone()));
        let inner = Inner {
            engine: Box::new(Packed::open(engine, ChunkLimits::DEFAULT)?),
            health,
            clock,
            tables: RwLock::new(HashMap::new()),
            ddl: Mutex::new(()),
            stripes: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            last_ts: AtomicI64::new(i64::MIN),
        };
        inner.load_tables()?;
        inner.finish_interrupted_drops()?;
        Ok(LocalStore {
            inner: Arc::new(inner),
        })
    }

    /// The engine's health: whether it still takes writes, and its error
    /// counts.
    pub fn health(&self) -> HealthReport {
        self.inner.health.report()
    }

    /// Bytes the store occupies on disk.
    pub fn disk_space(&self) -> u64 {
        self.inner.engine.disk_space()
    }

    /// Creates a table (names are unique case-insensitively).
    pub fn create_table_blocking(&self, name: &str) -> Result<TableInfo> {
        self.inner.create_table(name)
    }

    /// Drops a table and removes all its entities.
    pub fn drop_table_blocking(&self, name: &str) -> Result<()> {
        self.inner.drop_table(name)
    }

    /// Every table, ordered by name.
    pub fn list_tables_blocking(&self) -> Vec<TableInfo> {
        let mut v: Vec<_> = self
            .inner
            .tables
            .read()
            .values()
            .map(|t| TableInfo {
                name: t.name.clone(),
            })
            .collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Reads one entity.
    pub fn get_blocking(&self, table: &str, pk: &str, rk: &str) -> Result<Option<Entity>> {
        let t = self.inner.table(table)?;
        let key = codec::entity_key(t.id, pk, rk);
        self.inner
            .engine
            .get(Space::Entities, &key)?
            .map(|v| codec::decode_entity(pk, rk, &v, None))
            .transpose()
    }

    /// Applies an entity-group transaction atomically. A failure names the
    /// failing operation's index and nothing is applied.
    pub fn execute_blocking(&self, table: &str, ops: &[Operation]) -> Result<Vec<OpOutcome>> {
        self.inner.execute(table, ops)
    }

    /// Makes every write so far durable (see [`crate::deferring_sync`]).
    pub fn sync_blocking(&self) -> Result<()> {
        self.inner.engine.sync()
    }

    /// Reads one page of a query.
    pub fn query_blocking(&self, table: &str, query: &Query, page: &PageRequest) -> Result<Page> {
        self.inner.query(table, query, page)
    }

    /// Where the next page of `query` would start: the PartitionKey (for
    /// routing only: it may carry a trailing U+0001 meaning "just after this
    /// partition"), or `None` when nothing is left to scan.
    pub(crate) fn page_start(
        &self,
        table: &str,
        query: &Query,
        req: &PageRequest,
    ) -> Result<Option<String>> {
        let t = self.inner.table(table)?;
        let from = req
            .continuation
            .as_ref()
            .map(|c| c.decode(query.fingerprint(&t.name)))
            .transpose()?
            .map(|r| r.start_key(t.id));
        for (start, end) in query.byte_ranges(t.id) {
            if from.as_ref().is_some_and(|f| *f >= end) {
                continue;
            }
            let start = match from {
                Some(f) if f > start => f,
                _ => start,
            };
            let rest = &start[codec::TABLE_PREFIX_LEN..];
            let pk_end = rest.iter().position(|b| *b == 0).unwrap_or(rest.len());
            return Ok(Some(String::from_utf8_lossy(&rest[..pk_end]).into_owned()));
        }
        Ok(None)
    }

    /// Estimates what a scan of `query` would read, without reading values:
    /// partitions wholly inside a span count from statistics; partially
    /// covered partitions are probed by counting keys, up to `probe_cap`
    /// entities each (beyond that the partition count is used).
    pub fn estimate_blocking(
        &self,
        table: &str,
        query: &Query,
        probe_cap: u64,
    ) -> Result<ScanEstimate> {
        let t = self.inner.table(table)?;
        let mut est = ScanEstimate::default();
        // The ranges are sorted and disjoint, so a partition several of
        // them cross (two RowKey ranges of one PartitionKey) comes up in
        // consecutive ones: it counts once.
        let mut last_pk: Option<String> = None;
        let mut last_scanned = 0u64;
        for (start, end) in query.byte_ranges(t.id) {
            // Partitions intersecting [start, end), from the stats keyspace.
            let pk_of = |k: &[u8]| -> Vec<u8> {
                let rest = &k[codec::TABLE_PREFIX_LEN..];
                let n = rest.iter().position(|b| *b <= 1).unwrap_or(rest.len());
                rest[..n].to_vec()
            };
            let lo = [&codec::table_prefix(t.id)[..], &pk_of(&start)].concat();
            let next_table = codec::table_prefix(t.id + 1).to_vec();
            let hi = if end >= next_table {
                Bound::Excluded(next_table)
            } else {
                Bound::Included([&codec::table_prefix(t.id)[..], &pk_of(&end)].concat())
            };
            let scan = self
                .inner
                .engine
                .scan(Space::Stats, Bound::Included(lo), hi);
            for kv in scan {
                let (k, v) = kv?;
                let pk = decode_stats_pk(&k)?;
                let count = decode_stats(&v)?.entities;
                let p_start = codec::partition_start(t.id, pk);
                let p_end = codec::partition_end(t.id, pk);
                if p_end <= start || p_start >= end {
                    continue;
                }
                let covered = if p_start >= start && p_end <= end {
                    count
                } else {
                    // Partly covered: count keys in the overlap, bounded.
                    let from = start.clone().max(p_start.clone());
                    let to = end.clone().min(p_end.clone());
                    let keys = |lo: Vec<u8>, hi: Vec<u8>| {
                        self.inner
                            .engine
                            .scan(Space::Entities, Bound::Included(lo), Bound::Excluded(hi))
                            .take(probe_cap as usize)
                            .count() as u64
                    };
                    let n = keys(from.clone(), to.clone());
                    if n < probe_cap {
                        n
                    } else {
                        // At least the cap; at most what the keys before
                        // and after the overlap (also counted up to the
                        // cap) leave of the partition. The middle is
                        // within 2x of the truth when either bound is
                        // close to it.
                        let outside = keys(p_start, from) + keys(to, p_end);
                        let upper = count.saturating_sub(outside).max(n);
                        n + (upper - n) / 2
                    }
                };
                if covered > 0 {
                    est.scanned += covered;
                    est.largest_partition = est.largest_partition.max(count);
                    if last_pk.as_deref() == Some(pk) {
                        last_scanned += covered;
                    } else {
                        est.partitions += 1;
                        last_pk = Some(pk.to_owned());
                        last_scanned = covered;
                    }
                    est.largest_scanned = est.largest_scanned.max(last_scanned);
                }
            }
        }
        Ok(est)
    }

    /// Entity and partition counts of a table.
    pub fn table_stats_blocking(&self, table: &str) -> Result<TableStats> {
        let t = self.inner.table(table)?;
        Ok(TableStats {
            entities: t.entities.load(Ordering::Relaxed).max(0) as u64,
            partitions: t.partitions.load(Ordering::Relaxed).max(0) as u64,
            bytes: t
                .bytes_known
                .load(Ordering::Relaxed)
                .then(|| t.bytes.load(Ordering::Relaxed).max(0) as u64),
        })
    }

    /// Per-partition entity counts for PartitionKeys in `[lo, hi]` bounds, at
    /// most `limit` partitions (in key order).
    pub fn partition_stats_blocking(
        &self,
        table: &str,
        lo: Bound<&str>,
        hi: Bound<&str>,
        limit: usize,
    ) -> Result<Vec<PartitionStats>> {
        let t = self.inner.table(table)?;
        let key = |pk: &str| codec::stats_key(t.id, pk);
        let start = match lo {
            Bound::Unbounded => Bound::Included(codec::table_prefix(t.id).to_vec()),
            Bound::Included(p) => Bound::Included(key(p)),
            Bound::Excluded(p) => Bound::Excluded(key(p)),
        };
        let end = match hi {
            Bound::Unbounded => Bound::Excluded(codec::table_prefix(t.id + 1).to_vec()),
            Bound::Included(p) => Bound::Included(key(p)),
            Bound::Excluded(p) => Bound::Excluded(key(p)),
        };
        let mut out = Vec::new();
        for kv in self.inner.engine.scan(Space::Stats, start, end).take(limit) {
            let (k, v) = kv?;
            out.push(PartitionStats {
                partition_key: decode_stats_pk(&k)?.to_owned(),
                entities: decode_stats(&v)?.entities,
            });
        }
        Ok(out)
    }
}

fn decode_stats_pk(k: &[u8]) -> Result<&str> {
    std::str::from_utf8(&k[codec::TABLE_PREFIX_LEN..])
        .map_err(|_| StoreError::Corrupt("statistics key is not UTF-8".into()))
}

/// A partition's persisted statistics: its entity count and their bytes,
/// big-endian u64s. A value of the count alone predates byte counting.
#[derive(Debug, Clone, Copy, Default)]
struct PartitionCounts {
    entities: u64,
    bytes: Option<u64>,
}

impl PartitionCounts {
    fn encode(self) -> Vec<u8> {
        let mut v = self.entities.to_be_bytes().to_vec();
        if let Some(b) = self.bytes {
            v.extend_from_slice(&b.to_be_bytes());
        }
        v
    }
}

fn decode_stats(v: &[u8]) -> Result<PartitionCounts> {
    let (count, bytes) = match v.len() {
        8 => (v, None),
        16 => (&v[..8], Some(decode_count(&v[8..])?)),
        _ => {
            return Err(StoreError::Corrupt(
                "partition statistics are not 8 or 16 bytes".into(),
            ));
        }
    };
    Ok(PartitionCounts {
        entities: decode_count(count)?,
        bytes,
    })
}

fn decode_count(v: &[u8]) -> Result<u64> {
    Ok(u64::from_be_bytes(v.try_into().map_err(|_| {
        StoreError::Corrupt("partition count is not 8 bytes".into())
    })?))
}

fn table_meta_key(lower: &str) -> Vec<u8> {
    [TABLE_KEY_PREFIX, lower.as_bytes()].concat()
}

fn dropping_key(id: u64) -> Vec<u8> {
    [DROPPING_KEY_PREFIX, &id.to_be_bytes()].concat()
}

fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    *end.last_mut().expect("non-empty prefix") += 1;
    end
}

impl Inner {
    fn load_tables(&self) -> Result<()> {
        let mut tables = self.tables.write();
        let scan = self.engine.scan(
            Space::Meta,
            Bound::Included(TABLE_KEY_PREFIX.to_vec()),
            Bound::Excluded(prefix_end(TABLE_KEY_PREFIX)),
        );
        for kv in scan {
            let (k, v) = kv?;
            let lower = std::str::from_utf8(&k[TABLE_KEY_PREFIX.len()..])
                .map_err(|_| StoreError::Corrupt("table key is not UTF-8".into()))?;
            if v.len() < 8 {
                return Err(StoreError::Corrupt("table record too short".into()));
            }
            let id = u64::from_be_bytes(v[..8].try_into().expect("8 bytes"));
            let name = String::from_utf8(v[8..].to_vec())
                .map_err(|_| StoreError::Corrupt("table name is not UTF-8".into()))?;
            let (mut entities, mut partitions, mut bytes) = (0i64, 0i64, Some(0i64));
            let stats = self.engine.scan(
                Space::Stats,
                Bound::Included(codec::table_prefix(id).to_vec()),
                Bound::Excluded(codec::table_prefix(id + 1).to_vec()),
            );
            for kv in stats {
                let (_, v) = kv?;
                let counts = decode_stats(&v)?;
                entities += counts.entities as i64;
                bytes = bytes.zip(counts.bytes).map(|(sum, b)| sum + b as i64);
                partitions += 1;
            }
            tables.insert(
                lower.to_owned(),
                Arc::new(TableEntry {
                    id,
                    name,
                    entities: AtomicI64::new(entities),
                    partitions: AtomicI64::new(partitions),
                    bytes: AtomicI64::new(bytes.unwrap_or(0)),
                    bytes_known: AtomicBool::new(bytes.is_some()),
                    gate: RwLock::new(()),
                    dropped: AtomicBool::new(false),
                }),
            );
        }
        Ok(())
    }

    fn finish_interrupted_drops(&self) -> Result<()> {
        let pending: Vec<u64> = self
            .engine
            .scan(
                Space::Meta,
                Bound::Included(DROPPING_KEY_PREFIX.to_vec()),
                Bound::Excluded(prefix_end(DROPPING_KEY_PREFIX)),
            )
            .map(|kv| {
                let (k, _) = kv?;
                let id = k[DROPPING_KEY_PREFIX.len()..]
                    .try_into()
                    .map_err(|_| StoreError::Corrupt("dropping key malformed".into()))?;
                Ok(u64::from_be_bytes(id))
            })
            .collect::<Result<_>>()?;
        for id in pending {
            self.purge(id)?;
        }
        Ok(())
    }

    fn table(&self, name: &str) -> Result<Arc<TableEntry>> {
        self.tables
            .read()
            .get(&*crate::lowercase(name))
            .cloned()
            .ok_or_else(|| StoreError::TableNotFound {
                name: name.to_owned(),
            })
    }

    fn create_table(&self, name: &str) -> Result<TableInfo> {
        limits::check_table_name(name)?;
        let _ddl = self.ddl.lock();
        let lower = name.to_ascii_lowercase();
        if let Some(existing) = self.tables.read().get(&lower) {
            return Err(StoreError::TableExists {
                name: existing.name.clone(),
            });
        }
        let id = match self.engine.get(Space::Meta, NEXT_TABLE_ID_KEY)? {
            Some(v) => decode_count(&v)?,
            None => 1,
        };
        let mut record = id.to_be_bytes().to_vec();
        record.extend_from_slice(name.as_bytes());
        self.engine.apply(vec![
            Mutation::Put {
                space: Space::Meta,
                key: table_meta_key(&lower),
                value: record,
            },
            Mutation::Put {
                space: Space::Meta,
                key: NEXT_TABLE_ID_KEY.to_vec(),
                value: (id + 1).to_be_bytes().to_vec(),
            },
        ])?;
        self.tables.write().insert(
            lower,
            Arc::new(TableEntry {
                id,
                name: name.to_owned(),
                entities: AtomicI64::new(0),
                partitions: AtomicI64::new(0),
                bytes: AtomicI64::new(0),
                bytes_known: AtomicBool::new(true),
                gate: RwLock::new(()),
                dropped: AtomicBool::new(false),
            }),
        );
        Ok(TableInfo {
            name: name.to_owned(),
        })
    }

    fn drop_table(&self, name: &str) -> Result<()> {
        let _ddl = self.ddl.lock();
        let t = self.table(name)?;
        {
            // Wait for in-flight writes; new ones see `dropped`.
            let _gate = t.gate.write();
            t.dropped.store(true, Ordering::SeqCst);
            // The table disappears and the purge is recorded in one batch, so
            // a crash mid-purge is finished at the next open.
            self.engine.apply(vec![
                Mutation::Delete {
                    space: Space::Meta,
                    key: table_meta_key(&name.to_ascii_lowercase()),
                },
                Mutation::Put {
                    space: Space::Meta,
                    key: dropping_key(t.id),
                    value: Vec::new(),
                },
            ])?;
            self.tables.write().remove(&name.to_ascii_lowercase());
        }
        self.purge(t.id)
    }

    /// Deletes every entity and statistic of table `id`, in chunks.
    fn purge(&self, id: u64) -> Result<()> {
        for space in [Space::Entities, Space::Stats] {
            loop {
                let keys: Vec<Vec<u8>> = self
                    .engine
                    .scan(
                        space,
                        Bound::Included(codec::table_prefix(id).to_vec()),
                        Bound::Excluded(codec::table_prefix(id + 1).to_vec()),
                    )
                    .take(PURGE_CHUNK)
                    .map(|kv| kv.map(|(k, _)| k.to_vec()))
                    .collect::<Result<_>>()?;
                if keys.is_empty() {
                    break;
                }
                self.engine.apply(
                    keys.into_iter()
                        .map(|key| Mutation::Delete { space, key })
                        .collect(),
                )?;
            }
        }
        self.engine.apply(vec![Mutation::Delete {
            space: Space::Meta,
            key: dropping_key(id),
        }])
    }

    fn stripe(&self, id: u64, pk: &str) -> &Mutex<()> {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(pk.as_bytes(), id);
        &self.stripes[(h % LOCK_STRIPES as u64) as usize]
    }

    /// A timestamp later than every one handed out before and than `floor`.
    fn next_timestamp(&self, floor: i64) -> DateTime {
        let now = self.clock.now_micros();
        let prev = self
            .last_ts
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| {
                Some(now.max(last.saturating_add(1)).max(floor))
            })
            .expect("closure always returns Some");
        DateTime(now.max(prev.saturating_add(1)).max(floor))
    }

    fn execute(&self, table: &str, ops: &[Operation]) -> Result<Vec<OpOutcome>> {
        check_batch(ops)?;
        let t = self.table(table)?;
        let _gate = t.gate.read();
        if t.dropped.load(Ordering::SeqCst) {
            return Err(StoreError::TableNotFound {
                name: table.to_owned(),
            });
        }
        let pk = ops[0].keys().0;
        let _stripe = self.stripe(t.id, pk).lock();

        // Read the current state of every entity the batch touches.
        let current = self.read_current(t.id, pk, ops)?;
        // Timestamps strictly increase per entity even if the wall clock
        // stepped back since the last write.
        let floor = current
            .iter()
            .flatten()
            .map(|c| c.timestamp.0.saturating_add(1))
            .max()
            .unwrap_or(i64::MIN);
        let timestamp = self.next_timestamp(floor);

        let mut batch = Vec::with_capacity(ops.len() + 1);
        let mut outcomes = Vec::with_capacity(ops.len());
        let mut delta: i64 = 0;
        let mut delta_bytes: i64 = 0;
        for (i, (op, cur)) in ops.iter().zip(current).enumerate() {
            let existed = cur.is_some();
            if let Some(c) = &cur {
                let props = c.properties.iter().map(|(k, v)| (k.as_str(), v));
                delta_bytes -= codec::stored_len(pk, op.keys().1, props) as i64;
            }
            let effect = op.apply(cur).map_err(|e| e.at_operation(i))?;
            let (pk, rk) = op.keys();
            let key = codec::entity_key(t.id, pk, rk);
            let written = match effect {
                // The operation's own properties are encoded where they
                // are; the outcome keeps only the Timestamp.
                Effect::PutSent(w) => {
                    let value = codec::encode_properties(timestamp, w.non_null());
                    delta_bytes += (key.len() + value.len()) as i64;
                    batch.push(Mutation::Put {
                        space: Space::Entities,
                        key,
                        value,
                    });
                    Written::AsSent(timestamp)
                }
                Effect::PutMerged(properties) => {
                    let value = codec::encode_value(timestamp, &properties);
                    delta_bytes += (key.len() + value.len()) as i64;
                    batch.push(Mutation::Put {
                        space: Space::Entities,
                        key,
                        value,
                    });
                    Written::Entity(op.stamped(properties, timestamp))
                }
                Effect::Delete => {
                    batch.push(Mutation::Delete {
                        space: Space::Entities,
                        key,
                    });
                    Written::Deleted
                }
            };
            delta += match &written {
                Written::Deleted => -1,
                _ => i64::from(!existed),
            };
            outcomes.push(OpOutcome { existed, written });
        }

        // The partition's entity and byte counts commit in the same atomic
        // batch.
        let stats_key = codec::stats_key(t.id, pk);
        let prior = match self.engine.get(Space::Stats, &stats_key)? {
            Some(v) => decode_stats(&v)?,
            None => PartitionCounts {
                entities: 0,
                bytes: Some(0),
            },
        };
        let before = prior.entities as i64;
        let after = before + delta;
        if delta != 0 || (delta_bytes != 0 && prior.bytes.is_some()) {
            let counts = PartitionCounts {
                entities: after.max(0) as u64,
                bytes: prior
                    .bytes
                    .map(|b| (b as i64).saturating_add(delta_bytes).max(0) as u64),
            };
            batch.push(if after > 0 {
                Mutation::Put {
                    space: Space::Stats,
                    key: stats_key,
                    value: counts.encode(),
                }
            } else {
                Mutation::Delete {
                    space: Space::Stats,
                    key: stats_key,
                }
            });
        }
        self.engine.apply(batch)?;
        t.entities.fetch_add(delta, Ordering::Relaxed);
        t.bytes.fetch_add(delta_bytes, Ordering::Relaxed);
        match (before > 0, after > 0) {
            (false, true) => t.partitions.fetch_add(1, Ordering::Relaxed),
            (true, false) => t.partitions.fetch_sub(1, Ordering::Relaxed),
            _ => 0,
        };
        Ok(outcomes)
    }

    /// The stored entity at each operation's key, in operation order (all
    /// in partition `pk`, which the caller holds the write stripe of).
    fn read_current(&self, id: u64, pk: &str, ops: &[Operation]) -> Result<Vec<Option<Entity>>> {
        if ops.len() >= RANGE_READ_MIN_OPS
            && let Some(found) = self.read_current_by_range(id, pk, ops)?
        {
            return Ok(found);
        }
        ops.iter()
            .map(|op| {
                let rk = op.keys().1;
                self.engine
                    .get(Space::Entities, &codec::entity_key(id, pk, rk))?
                    .map(|v| codec::decode_entity(pk, rk, &v, None))
                    .transpose()
            })
            .collect()
    }

    /// [`read_current`](Self::read_current) as one ordered scan from the
    /// batch's lowest RowKey to its highest, instead of a lookup per key: a
    /// lookup is a seek to its chunk, a scan seeks once. Inserting 100 new rows into one partition (the multi-row
    /// INSERT and the 100-INSERT transaction) finds an empty span. `None`
    /// when the span holds more than twice as many entities as the batch
    /// touches: lookups are then cheaper than walking the others.
    fn read_current_by_range(
        &self,
        id: u64,
        pk: &str,
        ops: &[Operation],
    ) -> Result<Option<Vec<Option<Entity>>>> {
        // Same PartitionKey, so RowKey order is engine key order.
        let mut order: Vec<usize> = (0..ops.len()).collect();
        order.sort_unstable_by_key(|&i| ops[i].keys().1);
        let (Some(&first), Some(&last)) = (order.first(), order.last()) else {
            return Ok(Some(Vec::new()));
        };
        let lo = codec::entity_key(id, pk, ops[first].keys().1);
        let hi = codec::entity_key(id, pk, ops[last].keys().1);
        let mut current: Vec<Option<Entity>> = (0..ops.len()).map(|_| None).collect();
        let mut next = 0;
        let budget = ops.len() * 2;
        let iter = self
            .engine
            .scan(Space::Entities, Bound::Included(lo), Bound::Included(hi));
        for (visited, kv) in iter.enumerate() {
            if visited >= budget {
                return Ok(None);
            }
            let (k, v) = kv?;
            let (_, rk) = codec::split_entity_key(&k)?;
            while next < order.len() && ops[order[next]].keys().1 < rk {
                next += 1;
            }
            if let Some(&i) = order.get(next)
                && ops[i].keys().1 == rk
            {
                current[i] = Some(codec::decode_entity(pk, rk, &v, None)?);
                next += 1;
            }
        }
        Ok(Some(current))
    }

    fn query(&self, table: &str, query: &Query, req: &PageRequest) -> Result<Page> {
        req.validate()?;
        let t = self.table(table)?;
        let fingerprint = query.fingerprint(&t.name);
        let resume_from = req
            .continuation
            .as_ref()
            .map(|c| c.decode(fingerprint))
            .transpose()?
            .map(|r| r.start_key(t.id));
        let stop_key = req
            .stop_at_partition
            .as_ref()
            .map(|p| codec::partition_start(t.id, p));
        // Decode the filter's properties too, then drop those not asked for.
        let (decode_props, strip) = match (&query.projection, &query.filter) {
            (Some(p), Some(f)) => {
                let mut all = p.clone();
                f.properties(&mut all);
                let strip = all.len() > p.len();
                (Some(all), strip)
            }
            (p, _) => (p.clone(), false),
        };
        // Undecoded entities need only the filter's properties decoded,
        // and no decoding at all without a filter.
        let filter_props = query.filter.as_ref().map(|f| {
            let mut v = Vec::new();
            f.properties(&mut v);
            v
        });

        let started = Instant::now();
        let mut page = Page {
            entities: Vec::new(),
            encoded: EncodedEntities::default(),
            scanned: 0,
            continuation: None,
            next_partition_key: None,
        };
        let token = |resume: Resume| Some(ContinuationToken::encode(fingerprint, &resume));
        let ranges = query.byte_ranges(t.id);
        // Keys need no test when the byte ranges are the spans (a
        // partition, a RowKey range), and only the RowKey when every span
        // has the same RowKey bounds (a scan across partitions).
        let key_test = query.key_test();
        for (ri, (start, end)) in ranges.iter().enumerate() {
            if let Some(from) = &resume_from
                && end <= from
            {
                continue;
            }
            let start = match &resume_from {
                Some(from) if from > start => from.clone(),
                _ => start.clone(),
            };
            // Clip at the partition boundary the caller asked us to stop at.
            let (end, clipped) = match &stop_key {
                Some(stop) if stop < end => (stop.clone(), true),
                _ => (end.clone(), false),
            };
            if start < end {
                // Set at the entity that fills the page or spends its time;
                // the visit stops at the next one, which says there is more.
                let mut ended = false;
                let mut more = false;
                let mut last = Vec::new();
                let visit = &mut |k: &[u8], buf: &ByteView, v: Range<usize>| -> Result<bool> {
                    if ended {
                        more = true;
                        return Ok(false);
                    }
                    page.scanned += 1;
                    let (pk, rk) = codec::split_entity_key_bytes(k)?;
                    let in_span = match key_test {
                        KeyTest::None => true,
                        KeyTest::RowKey(r) => r.contains_bytes(rk),
                        KeyTest::Spans => query.spans.iter().any(|b| b.contains_bytes(pk, rk)),
                    };
                    if in_span && req.encoded && query.filter.is_none() {
                        // Nothing reads the keys here: no UTF-8 check per
                        // entity (a full scan for an aggregate).
                        page.encoded.push(k, pk.len(), buf, v);
                    } else if in_span {
                        let (pk, rk) = codec::entity_key_strs(pk, rk)?;
                        let value = &buf[v.clone()];
                        if req.encoded {
                            let selected = match (&query.filter, &filter_props) {
                                (Some(f), Some(props)) => {
                                    f.matches(&codec::decode_entity(pk, rk, value, Some(props))?)
                                }
                                _ => true,
                            };
                            if selected {
                                page.encoded.push(k, pk.len(), buf, v);
                            }
                        } else {
                            let mut e =
                                codec::decode_entity(pk, rk, value, decode_props.as_deref())?;
                            if query.filter.as_ref().is_none_or(|f| f.matches(&e)) {
                                if strip && let Some(p) = &query.projection {
                                    e.properties.retain(|name, _| p.contains(name));
                                }
                                page.entities.push(e);
                            }
                        }
                    }
                    let full = page.len() >= req.max_entities
                        || req.max_scanned.is_some_and(|m| page.scanned >= m);
                    let out_of_time = page.scanned.is_multiple_of(BUDGET_CHECK_EVERY)
                        && started.elapsed() >= req.time_budget;
                    if full || out_of_time {
                        ended = true;
                        last.extend_from_slice(k);
                    }
                    Ok(true)
                };
                self.engine.visit(
                    Space::Entities,
                    Bound::Included(start),
                    Bound::Excluded(end),
                    visit,
                )?;
                if ended {
                    if more || ri + 1 < ranges.len() || clipped {
                        let (pk, rk) = codec::split_entity_key(&last)?;
                        page.next_partition_key = Some(pk.to_owned());
                        page.continuation = token(Resume {
                            partition_key: pk.to_owned(),
                            row_key: rk.to_owned(),
                            inclusive: false,
                        });
                    }
                    return Ok(page);
                }
            }
            if clipped {
                page.next_partition_key = req.stop_at_partition.clone();
                page.continuation = token(Resume {
                    partition_key: req.stop_at_partition.clone().unwrap_or_default(),
                    row_key: String::new(),
                    inclusive: true,
                });
                return Ok(page);
            }
        }
        Ok(page)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_statistics_read_both_layouts() {
        let now = PartitionCounts {
            entities: 3,
            bytes: Some(120),
        };
        let back = decode_stats(&now.encode()).unwrap();
        assert_eq!((back.entities, back.bytes), (3, Some(120)));
        // A count alone was written before bytes were counted.
        let old = decode_stats(&7u64.to_be_bytes()).unwrap();
        assert_eq!((old.entities, old.bytes), (7, None));
        assert!(decode_stats(&[0; 12]).is_err());
    }
}
