//! Store benchmarks over a fjall-backed [`LocalStore`] in a temporary
//! directory:
//!
//! - `read/point_get` — one random entity by key;
//! - `read/range_scan_100` — 100 consecutive RowKeys of one partition, one
//!   page of 100, decoded; `read/range_scan_100_encoded` undecoded (the
//!   gateway's path);
//! - `full_scan/all_pages` — every entity of the table, pages of 1000,
//!   decoded;
//! - `full_scan/encoded_pages` — the same, undecoded (the gateway's path);
//! - `full_scan/engine_floor` — fjall alone iterating the engine pairs (the
//!   packed chunks) of a copy of the same data, nothing unpacked: what any
//!   full scan costs before the store does anything;
//! - `egt/insert_100_{sync,buffered}` — one 100-operation entity-group
//!   transaction of Inserts into a new partition;
//! - `write/replace_1_buffered` — one entity replaced in a partition of
//!   1,000, by random keys (a delta; about one write in nine folds its
//!   span into its chunk, a chunk rewrite).
//!
//! The read benchmarks share one table of 1,000 partitions × 1,000 entities
//! (a ~100-character string and an integer each), loaded once with
//! `Durability::Buffered` and 100-operation EGTs, then reopened with
//! `StoreOptions::default()` (`Durability::Sync`). `STORE_BENCH_ENTITIES`
//! overrides the size for quick checks, e.g.
//!
//! ```text
//! STORE_BENCH_ENTITIES=20000 cargo bench -p tablegate-store -- --quick
//! ```
//!
//! The table is loaded only when a read benchmark is selected, so
//! `cargo bench -p tablegate-store -- egt` runs without it. When the binary
//! runs as a test (`cargo test --benches`, no `--bench` flag) the default
//! size is small.

use std::cell::OnceCell;
use std::hint::black_box;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, SamplingMode, Throughput};
use tablegate_store::{
    Durability, EntityWrite, IfMatch, KeyBox, KeyInterval, LocalStore, Operation, PageRequest,
    Query, StoreOptions, Value,
};
use tempfile::TempDir;

const TABLE: &str = "bench";
const DEFAULT_ENTITIES: usize = 1_000_000;
/// Entities when the binary runs as a test rather than a benchmark.
const TEST_MODE_ENTITIES: usize = 2_000;
const PER_PARTITION: usize = 1_000;
const EGT_OPS: usize = 100;
const RANGE: usize = 100;
const PROGRESS_EVERY: usize = 100_000;
const STRING_CHARS: usize = 100;

fn pk(p: usize) -> String {
    format!("p{p:06}")
}

fn rk(r: usize) -> String {
    format!("r{r:06}")
}

/// An entity like the loaded ones: a ~100-character string and an integer.
fn entity(rng: &mut fastrand::Rng, pk: String, rk: String, n: i64) -> EntityWrite {
    let text: String = (0..STRING_CHARS)
        .map(|_| char::from(b'a' + rng.usize(..26) as u8))
        .collect();
    EntityWrite::new(pk, rk)
        .with("text", Value::String(text))
        .with("n", Value::Int64(n))
}

/// The shape of the loaded table.
#[derive(Debug, Clone, Copy)]
struct Shape {
    partitions: usize,
    per_partition: usize,
}

impl Shape {
    fn from_env() -> Self {
        let bench_mode = std::env::args().any(|a| a == "--bench");
        let requested = match std::env::var("STORE_BENCH_ENTITIES") {
            Ok(v) => v
                .trim()
                .replace('_', "")
                .parse::<usize>()
                .unwrap_or_else(|_| panic!("STORE_BENCH_ENTITIES={v:?} is not a number")),
            Err(_) if bench_mode => DEFAULT_ENTITIES,
            Err(_) => TEST_MODE_ENTITIES,
        };
        // At least one partition of RANGE entities, so a range scan fits.
        let per_partition = requested.clamp(RANGE, PER_PARTITION);
        let partitions = (requested / per_partition).max(1);
        Shape {
            partitions,
            per_partition,
        }
    }

    fn entities(self) -> usize {
        self.partitions * self.per_partition
    }
}

/// The loaded table, reopened with the default (Sync) options.
#[derive(Debug)]
struct Loaded {
    store: LocalStore,
    shape: Shape,
    _dir: TempDir,
}

impl Loaded {
    fn load(shape: Shape) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let total = shape.entities();
        eprintln!(
            "loading {total} entities ({} partitions × {}) into {} ...",
            shape.partitions,
            shape.per_partition,
            dir.path().display()
        );
        let started = Instant::now();
        {
            let store = store_with_table(dir.path(), Durability::Buffered);
            let threads = std::thread::available_parallelism()
                .map_or(1, usize::from)
                .clamp(1, 4);
            let done = AtomicUsize::new(0);
            std::thread::scope(|scope| {
                for t in 0..threads {
                    let (store, done) = (store.clone(), &done);
                    scope.spawn(move || {
                        let mut rng =
                            fastrand::Rng::with_seed(0x9E37_79B9_7F4A_7C15 ^ (t as u64 + 1));
                        for p in (t..shape.partitions).step_by(threads) {
                            for first in (0..shape.per_partition).step_by(EGT_OPS) {
                                let last = (first + EGT_OPS).min(shape.per_partition);
                                let ops: Vec<_> = (first..last)
                                    .map(|r| {
                                        let n = (p * shape.per_partition + r) as i64;
                                        Operation::Insert(entity(&mut rng, pk(p), rk(r), n))
                                    })
                                    .collect();
                                store.execute_blocking(TABLE, &ops).expect("load EGT");
                                let before = done.fetch_add(ops.len(), Ordering::Relaxed);
                                let after = before + ops.len();
                                if after / PROGRESS_EVERY > before / PROGRESS_EVERY {
                                    eprintln!(
                                        "  loaded {:>9} / {total} in {:.1?}",
                                        after / PROGRESS_EVERY * PROGRESS_EVERY,
                                        started.elapsed()
                                    );
                                }
                            }
                        }
                    });
                }
            });
            let stats = store.table_stats_blocking(TABLE).expect("stats");
            assert_eq!(stats.entities, total as u64, "loaded entity count");
        }
        let store = LocalStore::open(dir.path(), StoreOptions::default()).expect("reopen store");
        eprintln!(
            "loaded {total} entities in {:.1?}; {:.1} MiB on disk",
            started.elapsed(),
            store.disk_space() as f64 / (1024.0 * 1024.0)
        );
        Loaded {
            store,
            shape,
            _dir: dir,
        }
    }
}

fn read_benches(c: &mut Criterion, loaded: &OnceCell<Loaded>, shape: Shape) {
    let get = || loaded.get_or_init(|| Loaded::load(shape));

    let mut g = c.benchmark_group("read");
    g.throughput(Throughput::Elements(1));
    let mut rng = fastrand::Rng::with_seed(42);
    let keys: Vec<(String, String)> = (0..4096)
        .map(|_| {
            (
                pk(rng.usize(..shape.partitions)),
                rk(rng.usize(..shape.per_partition)),
            )
        })
        .collect();
    let mut i = 0usize;
    g.bench_function("point_get", |b| {
        let l = get();
        b.iter(|| {
            let (p, r) = &keys[i % keys.len()];
            i = i.wrapping_add(1);
            let e = l.store.get_blocking(TABLE, p, r).expect("get");
            assert!(e.is_some(), "({p}, {r}) is loaded");
            black_box(e)
        });
    });

    g.throughput(Throughput::Elements(RANGE as u64));
    let mut rng = fastrand::Rng::with_seed(7);
    let page = PageRequest::first(RANGE);
    let queries: Vec<Query> = (0..1024)
        .map(|_| {
            let start = rng.usize(..shape.per_partition - RANGE + 1);
            Query::spans(vec![KeyBox {
                pk: KeyInterval::point(pk(rng.usize(..shape.partitions))),
                rk: KeyInterval::new(
                    Bound::Included(rk(start)),
                    Bound::Excluded(rk(start + RANGE)),
                ),
            }])
        })
        .collect();
    // `range_scan_100_encoded`: the same ranges undecoded, the gateway's path.
    for (name, encoded) in [("range_scan_100", false), ("range_scan_100_encoded", true)] {
        let mut page = page.clone();
        page.encoded = encoded;
        let mut i = 0usize;
        g.bench_function(name, |b| {
            let l = get();
            b.iter(|| {
                let q = &queries[i % queries.len()];
                i = i.wrapping_add(1);
                let p = l.store.query_blocking(TABLE, q, &page).expect("range page");
                assert_eq!(p.len(), RANGE);
                black_box(p)
            });
        });
    }
    g.finish();

    let mut g = c.benchmark_group("full_scan");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(30))
        .throughput(Throughput::Elements(shape.entities() as u64));
    for (name, encoded) in [("all_pages", false), ("encoded_pages", true)] {
        // `encoded_pages` is the path the gateway reads: pages of undecoded
        // entities (the planner decodes only the columns a query asks for).
        g.bench_function(name, |b| {
            let l = get();
            let q = Query::full_scan();
            let mut first = PageRequest::first(1000);
            first.encoded = encoded;
            b.iter(|| {
                let mut req = first.clone();
                let mut n = 0usize;
                loop {
                    let p = l.store.query_blocking(TABLE, &q, &req).expect("scan page");
                    n += p.len();
                    black_box(&p);
                    match p.continuation {
                        Some(t) => req = first.resume(t),
                        None => break,
                    }
                }
                assert_eq!(n, l.shape.entities());
                n
            });
        });
    }
    // The floor under every full scan: fjall iterating the entities
    // keyspace of a copy of the same data, chunk by chunk, nothing
    // unpacked (the store cannot scan faster than this).
    g.bench_function("engine_floor", |b| {
        let l = get();
        let (_copy, _db, entities) = engine_copy(l);
        b.iter(|| {
            let mut n = 0usize;
            for kv in entities.iter() {
                let (k, v) = kv.into_inner().expect("engine pair");
                black_box((&k, &v));
                n += 1;
            }
            assert!(n > 0);
            n
        });
    });
    g.finish();
}

/// fjall opened on a copy of the loaded store's directory, and its entities
/// keyspace (the copy's directory is removed when the `TempDir` drops).
fn engine_copy(l: &Loaded) -> (TempDir, fjall::Database, fjall::Keyspace) {
    let copy = tempfile::tempdir().expect("tempdir");
    copy_dir(l._dir.path(), copy.path());
    let db = fjall::Database::builder(copy.path())
        .cache_size(StoreOptions::default().cache_bytes)
        .open()
        .expect("open the copy with fjall");
    let entities = db
        .keyspace("entities", fjall::KeyspaceCreateOptions::default)
        .expect("entities keyspace");
    (copy, db, entities)
}

/// Copies a closed-for-writing data directory (the loaded store takes no
/// writes once reopened, so its files do not change under the copy).
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            std::fs::create_dir_all(&target).expect("mkdir");
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

fn write_benches(c: &mut Criterion) {
    let mut g = c.benchmark_group("egt");
    g.throughput(Throughput::Elements(EGT_OPS as u64));
    for (name, durability) in [
        ("insert_100_sync", Durability::Sync),
        ("insert_100_buffered", Durability::Buffered),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = store_with_table(dir.path(), durability);
        let mut rng = fastrand::Rng::with_seed(99);
        let mut partition = 0usize;
        g.bench_function(name, |b| {
            b.iter_batched(
                || {
                    // A new partition each iteration; built outside the timing.
                    partition += 1;
                    (0..EGT_OPS)
                        .map(|r| {
                            Operation::Insert(entity(&mut rng, pk(partition), rk(r), r as i64))
                        })
                        .collect::<Vec<_>>()
                },
                |ops| {
                    let out = store.execute_blocking(TABLE, &ops).expect("EGT");
                    black_box(out)
                },
                BatchSize::SmallInput,
            );
        });
    }
    g.finish();

    // One entity replaced in a partition of PER_PARTITION: with entities
    // packed into chunks this rewrites the entity's whole chunk.
    let mut g = c.benchmark_group("write");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = store_with_table(dir.path(), Durability::Buffered);
    let mut rng = fastrand::Rng::with_seed(7);
    for first in (0..PER_PARTITION).step_by(EGT_OPS) {
        let ops: Vec<_> = (first..first + EGT_OPS)
            .map(|r| Operation::Insert(entity(&mut rng, pk(0), rk(r), r as i64)))
            .collect();
        store
            .execute_blocking(TABLE, &ops)
            .expect("fill the partition");
    }
    g.bench_function("replace_1_buffered", |b| {
        b.iter_batched(
            || {
                let r = rng.usize(..PER_PARTITION);
                [Operation::Replace {
                    entity: entity(&mut rng, pk(0), rk(r), r as i64),
                    if_match: IfMatch::Any,
                }]
            },
            |ops| black_box(store.execute_blocking(TABLE, &ops).expect("replace")),
            BatchSize::SmallInput,
        );
    });
    g.finish();
}

/// A store in `dir` with the bench table created.
fn store_with_table(dir: &std::path::Path, durability: Durability) -> LocalStore {
    let options = StoreOptions {
        durability,
        ..StoreOptions::default()
    };
    let store = LocalStore::open(dir, options).expect("open store");
    store.create_table_blocking(TABLE).expect("create table");
    store
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let shape = Shape::from_env();
    let loaded = OnceCell::new();
    read_benches(&mut c, &loaded, shape);
    write_benches(&mut c);
    // Drop the loaded store (and its directory) before the summary.
    drop(loaded);
    c.final_summary();
}
