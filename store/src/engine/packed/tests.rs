//! The packed layer against a plain ordered map (property tests over the
//! memory and fjall engines), and its layout, index, write and migration
//! rules one by one.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::index::IndexChanges;
use super::layout::{
    DELTA_PUT, ENTRY_OVERHEAD, Entries, MAGIC, delta_entity, delta_key, is_delta, partition_end,
    prefix_len,
};
use super::migrate::{LAYOUT_CHUNKS, LAYOUT_CHUNKS_NO_DELTAS, LAYOUT_KEY};
use super::write::Changes;
use super::*;
use crate::engine::memory::MemoryEngine;
use crate::error::StoreError;

/// Small limits, so that a handful of entities fills a chunk and two
/// deltas fill a span.
const TINY: ChunkLimits = ChunkLimits {
    entities: 3,
    bytes: 96,
    deltas: 2,
};

/// The same without deltas: every write rewrites chunks.
const TINY_NO_DELTAS: ChunkLimits = ChunkLimits { deltas: 0, ..TINY };

fn key(table: u8, pk: &str, rk: &str) -> Vec<u8> {
    let mut k = vec![0, 0, 0, 0, 0, 0, 0, table];
    k.extend_from_slice(pk.as_bytes());
    k.push(0);
    k.extend_from_slice(rk.as_bytes());
    k
}

fn put(k: Vec<u8>, v: &[u8]) -> Mutation {
    Mutation::Put {
        space: Space::Entities,
        key: k,
        value: v.to_vec(),
    }
}

/// The pairs [`Engine::visit`] hands out, stopping after `most`.
fn visited(
    p: &Packed,
    start: &Bound<Vec<u8>>,
    end: &Bound<Vec<u8>>,
    most: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    p.visit(
        Space::Entities,
        start.clone(),
        end.clone(),
        &mut |k, buf, v| {
            out.push((k.to_vec(), buf[v].to_vec()));
            Ok(out.len() < most)
        },
    )
    .expect("visit");
    out
}

fn pairs(iter: KvIter<'_>) -> Vec<(Vec<u8>, Vec<u8>)> {
    iter.map(|kv| {
        let (k, v) = kv.expect("pair");
        (k.to_vec(), v.to_vec())
    })
    .collect()
}

/// Every pair of the engine's entities keyspace: chunks and deltas.
fn engine_pairs(p: &Packed) -> Vec<(Vec<u8>, Vec<u8>)> {
    pairs(
        p.inner
            .scan(Space::Entities, Bound::Unbounded, Bound::Unbounded),
    )
}

/// The engine's chunks, without the deltas.
fn raw_chunks(p: &Packed) -> Vec<(Vec<u8>, Vec<u8>)> {
    engine_pairs(p)
        .into_iter()
        .filter(|(_, v)| !is_delta(v))
        .collect()
}

/// The entity keys with a delta in the engine.
fn raw_deltas(p: &Packed) -> BTreeSet<Vec<u8>> {
    engine_pairs(p)
        .into_iter()
        .filter(|(_, v)| is_delta(v))
        .map(|(k, _)| delta_entity(&k).expect("delta key").to_vec())
        .collect()
}

/// Every chunk: one fence, one partition, keyed by its last entity,
/// entries in order, not empty, within the limits (an equal cut may pass them by
/// half an entry; one entry over the limits stands alone). Every
/// delta: in the index, not for a chunk's last entity, at most
/// `limits.deltas` in a span.
fn check_chunks(p: &Packed) {
    let chunk_keys: BTreeSet<Vec<u8>> = raw_chunks(p).into_iter().map(|(k, _)| k).collect();
    let index = p.index.read().clone();
    assert_eq!(index.fences, chunk_keys, "a fence per chunk");
    let deltas = raw_deltas(p);
    assert_eq!(index.deltas, deltas, "the index lists every delta");
    for key in &deltas {
        assert!(!chunk_keys.contains(key), "a delta sorts after its chunk");
        let prefix = &key[..prefix_len(key).expect("key")];
        let (lower, holder) = index.span(prefix, key);
        let end = partition_end(prefix);
        let n = index.deltas_between(prefix, lower, holder, &end).count();
        assert!(n <= p.limits.deltas, "{n} deltas in one span");
    }
    let mut previous_last: Option<Vec<u8>> = None;
    for (key, chunk) in raw_chunks(p) {
        let plen = prefix_len(&key).expect("chunk key");
        let entries: Vec<_> = Entries::new(&chunk)
            .expect("a chunk")
            .map(|e| e.expect("entry"))
            .collect();
        assert!(!entries.is_empty(), "empty chunk at {key:?}");
        let keys: Vec<&[u8]> = entries.iter().map(|(k, _)| &chunk[k.clone()]).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "unordered chunk");
        assert!(
            keys.iter().all(|k| k.starts_with(&key[..plen])),
            "one partition"
        );
        assert_eq!(
            &key[..],
            *keys.last().expect("entries"),
            "keyed by its last entity"
        );
        let first = keys[0].to_vec();
        if let Some(prev) = &previous_last {
            assert!(prev < &first, "chunks overlap");
        }
        previous_last = Some(key.clone());
        let used: u64 = entries
            .iter()
            .map(|(k, v)| p.limits.weight(ENTRY_OVERHEAD + k.len() + v.len()))
            .sum();
        let max = entries
            .iter()
            .map(|(k, v)| p.limits.weight(ENTRY_OVERHEAD + k.len() + v.len()))
            .max()
            .unwrap_or(0);
        assert!(
            entries.len() == 1 || used <= p.limits.capacity() + p.limits.capacity() / 2,
            "overfull chunk: {used} > {} (largest entry {max})",
            p.limits.capacity()
        );
    }
}

#[derive(Debug, Clone)]
enum Change {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
}

fn any_key() -> impl Strategy<Value = Vec<u8>> {
    (
        0u8..2,
        prop::sample::select(&["", "a", "b", "bb"][..]),
        prop::sample::select(&["", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "99"][..]),
    )
        .prop_map(|(t, pk, rk)| key(t, pk, rk))
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (any_key(), prop::collection::vec(any::<u8>(), 0..40))
            .prop_map(|(k, v)| Change::Put(k, v)),
        1 => any_key().prop_map(Change::Delete),
    ]
}

/// A scan bound: any key, a partition's or table's edge, or none.
fn bound() -> impl Strategy<Value = Bound<Vec<u8>>> {
    let edge = prop_oneof![
        any_key(),
        (0u8..3).prop_map(|t| vec![0, 0, 0, 0, 0, 0, 0, t]),
        any_key().prop_map(|mut k| {
            let plen = prefix_len(&k).expect("key");
            k.truncate(plen);
            k[plen - 1] = 1;
            k
        }),
    ];
    prop_oneof![
        1 => Just(Bound::Unbounded),
        2 => edge.clone().prop_map(Bound::Included),
        2 => edge.prop_map(Bound::Excluded),
    ]
}

/// A key to get, and a range to scan.
type Probe = (Vec<u8>, Bound<Vec<u8>>, Bound<Vec<u8>>);

fn run_against_model(p: &Packed, batches: &[Vec<Change>], probes: &[Probe]) {
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for batch in batches {
        let mut mutations = Vec::new();
        for c in batch {
            match c {
                Change::Put(k, v) => {
                    model.insert(k.clone(), v.clone());
                    mutations.push(put(k.clone(), v));
                }
                Change::Delete(k) => {
                    model.remove(k);
                    mutations.push(Mutation::Delete {
                        space: Space::Entities,
                        key: k.clone(),
                    });
                }
            }
        }
        p.apply(mutations).expect("apply");
        check_chunks(p);
        let all = pairs(p.scan(Space::Entities, Bound::Unbounded, Bound::Unbounded));
        let expected: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        assert_eq!(all, expected, "full scan");
        let (from, to) = (Bound::Unbounded, Bound::Unbounded);
        assert_eq!(visited(p, &from, &to, usize::MAX), expected, "full visit");
        for (k, start, end) in probes {
            let get = |p: &Packed| p.get(Space::Entities, k).expect("get").map(|v| v.to_vec());
            assert_eq!(get(p), model.get(k).cloned(), "get {k:?}");
            // An index a write ahead, naming a chunk the engine does
            // not hold (yet, or any more): the seek must take over.
            let fences = p.index.read().fences.clone();
            p.index.write().fences.insert(k.clone());
            assert_eq!(
                get(p),
                model.get(k).cloned(),
                "get {k:?} with a fence ahead"
            );
            // A write behind: without the fence of the chunk that holds
            // the key, which a split since moved it to (the next
            // chunk's fence then answers). The seek must take over.
            // (An index a write behind never lacks every fence and
            // delta of an entity: `apply` adds before it removes.)
            let mut stale = fences.clone();
            let holder = stale
                .range::<[u8], _>((Bound::Included(&k[..]), Bound::Unbounded))
                .next()
                .cloned();
            if let Some(holder) = holder {
                stale.remove(&holder);
            }
            p.index.write().fences = stale;
            let prefix = &k[..prefix_len(k).expect("entity key")];
            let named = {
                let index = p.index.read();
                index.fence(prefix, k, false).is_some() || index.deltas.contains(k)
            };
            if named {
                assert_eq!(
                    get(p),
                    model.get(k).cloned(),
                    "get {k:?} with a stale fence"
                );
            } else {
                // An index that names no chunk or delta for the key
                // was read before the key was written: absent then.
                assert_eq!(get(p), None, "get {k:?} with no fence left");
            }
            p.index.write().fences = fences;
            // A delta the index still lists after it was folded.
            let listed = !p.index.write().deltas.insert(k.clone());
            assert_eq!(
                get(p),
                model.get(k).cloned(),
                "get {k:?} with a stale delta"
            );
            if !listed {
                p.index.write().deltas.remove(k);
            }
            let expected: Vec<_> = if crate::engine::memory::empty_range(start, end) {
                Vec::new()
            } else {
                model
                    .range((start.clone(), end.clone()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            };
            assert_eq!(
                pairs(p.scan(Space::Entities, start.clone(), end.clone())),
                expected,
                "scan {start:?}..{end:?}"
            );
            assert_eq!(
                visited(p, start, end, usize::MAX),
                expected,
                "visit {start:?}..{end:?}"
            );
            // A visitor that stops: the first pairs, and no more.
            let half = expected.len().div_ceil(2).max(1);
            assert_eq!(
                visited(p, start, end, half),
                expected[..half.min(expected.len())],
                "visit {start:?}..{end:?} stopping after {half}"
            );
        }
    }
}

fn probes() -> impl Strategy<Value = Vec<Probe>> {
    prop::collection::vec((any_key(), bound(), bound()), 1..6)
}

/// Batches of one or two changes (deltas, mostly) and longer ones.
fn batches(n: usize) -> impl Strategy<Value = Vec<Vec<Change>>> {
    let batch = prop_oneof![
        prop::collection::vec(change(), 1..3),
        prop::collection::vec(change(), 1..12),
    ];
    prop::collection::vec(batch, 1..n)
}

fn limits() -> impl Strategy<Value = ChunkLimits> {
    prop_oneof![Just(TINY), Just(TINY_NO_DELTAS)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Same batches, same answers as a plain ordered map: gets, full
    /// and bounded scans, with chunks of three entities, with and
    /// without deltas.
    #[test]
    fn packed_memory_engine_matches_a_map(
        batches in batches(16),
        probes in probes(),
        limits in limits(),
    ) {
        let p = Packed::open(Box::new(MemoryEngine::default()), limits).expect("open");
        run_against_model(&p, &batches, &probes);
    }
}

/// The packed layer over a fjall engine in `dir` (buffered: no fsyncs).
fn over_fjall(dir: &std::path::Path, limits: ChunkLimits) -> Packed {
    let engine = crate::engine::fjall_engine::FjallEngine::open(
        dir,
        crate::engine::Durability::Buffered,
        1 << 20,
    )
    .expect("open");
    Packed::open(Box::new(engine), limits).expect("packed")
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The same over fjall (its reverse seek and snapshot scans).
    #[test]
    fn packed_fjall_engine_matches_a_map(
        batches in batches(10),
        probes in probes(),
        limits in limits(),
    ) {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = over_fjall(dir.path(), limits);
        run_against_model(&p, &batches, &probes);
    }
}

/// Appending one entity at a time fills chunks up instead of halving
/// them; inserting into a full chunk splits it in two.
#[test]
fn appends_fill_chunks_and_inserts_split_them() {
    let p = Packed::open(Box::new(MemoryEngine::default()), TINY_NO_DELTAS).expect("open");
    for i in 0..7 {
        p.apply(vec![put(key(1, "p", &format!("{:02}", i * 2)), b"v")])
            .expect("append");
    }
    let sizes = |p: &Packed| -> Vec<usize> {
        engine_pairs(p)
            .iter()
            .map(|(_, c)| Entries::new(c).expect("chunk").count())
            .collect()
    };
    assert_eq!(
        sizes(&p),
        vec![3, 3, 1],
        "sequential appends leave full chunks"
    );
    p.apply(vec![put(key(1, "p", "01"), b"v")]).expect("insert");
    assert_eq!(
        sizes(&p),
        vec![2, 2, 3, 1],
        "a full chunk split in equal parts"
    );
    check_chunks(&p);
}

/// The mutations that rewriting `changes` into partition "p" of table
/// 1 would apply.
fn rewrite_p(p: &Packed, changes: &Changes) -> Vec<Mutation> {
    let mut out = Vec::new();
    p.rewrite(
        &key(1, "p", ""),
        changes,
        &mut out,
        &mut IndexChanges::default(),
    )
    .expect("rewrite");
    out
}

/// Entities "0" to "8" of partition "p" of table 1 (three chunks of
/// three), loaded in one batch.
fn nine_entities() -> Packed {
    let p = Packed::open(Box::new(MemoryEngine::default()), TINY).expect("open");
    let load: Vec<_> = (0..9)
        .map(|i| put(key(1, "p", &i.to_string()), b"v"))
        .collect();
    p.apply(load).expect("load");
    p
}

/// A rewrite leaves chunks the batch did not change alone.
#[test]
fn unchanged_chunks_are_not_rewritten() {
    let p = nine_entities();
    let changes = BTreeMap::from([(key(1, "p", "4"), Some(b"w".to_vec()))]);
    let out = rewrite_p(&p, &changes);
    assert_eq!(out.len(), 1, "one chunk rewritten: {out:?}");
    let deleting_absent = BTreeMap::from([(key(1, "p", "44"), None)]);
    let out = rewrite_p(&p, &deleting_absent);
    assert!(
        out.is_empty(),
        "deleting a missing key writes nothing: {out:?}"
    );
}

/// An engine that counts the pairs its gets and scans yield.
#[derive(Debug, Default)]
struct Counting {
    inner: MemoryEngine,
    read: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Engine for Counting {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Bytes>> {
        let got = self.inner.get(space, key)?;
        if got.is_some() {
            self.read.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(got)
    }
    fn scan(&self, space: Space, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> KvIter<'_> {
        let read = self.read.clone();
        Box::new(self.inner.scan(space, start, end).inspect(move |_| {
            read.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }))
    }
    fn apply(&self, batch: Vec<Mutation>) -> Result<()> {
        self.inner.apply(batch)
    }
    fn disk_space(&self) -> u64 {
        0
    }
}

/// Partition "p" of `rows` entities over a [`Counting`] engine, and
/// its counter, at zero.
fn counted_partition(rows: usize) -> (Packed, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let engine = Counting::default();
    let read = engine.read.clone();
    let p = Packed::open(Box::new(engine), TINY).expect("open");
    let load: Vec<_> = (0..rows)
        .map(|i| put(key(1, "p", &format!("{i:02}")), b"v"))
        .collect();
    p.apply(load).expect("load");
    read.store(0, std::sync::atomic::Ordering::Relaxed);
    (p, read)
}

/// A batch touching both ends of a long partition reads and rewrites
/// the two chunks it touches, not the ones between.
#[test]
fn a_batch_reads_only_the_chunks_it_touches() {
    let (p, read) = counted_partition(30);
    let changes = BTreeMap::from([
        (key(1, "p", "00"), Some(b"w".to_vec())),
        (key(1, "p", "29"), Some(b"w".to_vec())),
    ]);
    let out = rewrite_p(&p, &changes);
    assert_eq!(out.len(), 2, "two chunks rewritten: {out:?}");
    let chunks_read = read.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(chunks_read, 2, "of the partition's 10 chunks");
}

/// A key whose partition has neither a chunk at or after it nor a
/// delta for it is answered from the index: the engine is not asked,
/// whereas a seek would have walked into the next partition's chunk.
/// Once such a key is written, reads find it.
#[test]
fn a_key_with_no_chunk_or_delta_is_absent_without_reading() {
    let (p, read) = counted_partition(6);
    // Partition "o" sorts before "p": a seek from it meets p's chunks.
    assert_eq!(p.get(Space::Entities, &key(1, "o", "00")).unwrap(), None);
    // After p's last chunk: p's tail holds no delta for it.
    assert_eq!(p.get(Space::Entities, &key(1, "p", "99")).unwrap(), None);
    assert_eq!(read.load(std::sync::atomic::Ordering::Relaxed), 0);
    p.apply(vec![put(key(1, "o", "00"), b"w")])
        .expect("write o");
    p.apply(vec![put(key(1, "p", "99"), b"w")])
        .expect("write p");
    for k in [key(1, "o", "00"), key(1, "p", "99")] {
        let got = p.get(Space::Entities, &k).unwrap();
        assert_eq!(got.as_deref(), Some(&b"w"[..]), "{k:?}");
    }
}

/// A directory in the old layout (one pair per entity, no marker) is
/// packed on open; opening it again finds the marker and does nothing.
#[test]
fn old_layout_is_packed_on_open() {
    let raw = MemoryEngine::default();
    let mut old = Vec::new();
    for pk in ["a", "b"] {
        for i in 0..5 {
            let k = key(1, pk, &i.to_string());
            old.push((k.clone(), vec![1, i]));
            raw.apply(vec![put(k, &[1, i])]).expect("old pair");
        }
    }
    let p = Packed::open(Box::new(raw), TINY).expect("open");
    check_chunks(&p);
    assert_eq!(
        pairs(p.scan(Space::Entities, Bound::Unbounded, Bound::Unbounded)),
        old
    );
    assert_eq!(layout(&p).as_deref(), Some(LAYOUT_CHUNKS));
    let chunks = engine_pairs(&p);
    assert_eq!(chunks.len(), 4, "two chunks per partition of five");
    let again = Packed::open(p.inner, TINY).expect("reopen");
    assert_eq!(
        pairs(again.scan(Space::Entities, Bound::Unbounded, Bound::Unbounded)),
        old
    );
}

/// Marks an engine's layout, as a tablegate that wrote it would have.
fn mark(raw: &MemoryEngine, layout: &[u8]) {
    raw.apply(vec![Mutation::Put {
        space: Space::Meta,
        key: LAYOUT_KEY.to_vec(),
        value: layout.to_vec(),
    }])
    .expect("marker");
}

/// The layout a store is marked with.
fn layout(p: &Packed) -> Option<Vec<u8>> {
    let marker = p.inner.get(Space::Meta, LAYOUT_KEY).expect("meta");
    marker.map(|m| m.to_vec())
}

/// Damaged chunks are errors, not panics.
#[test]
fn damaged_chunks_are_reported() {
    let raw = MemoryEngine::default();
    raw.apply(vec![put(key(1, "p", "a"), &[MAGIC, 9, 0])])
        .expect("damaged chunk");
    raw.apply(vec![put(key(1, "q", "a"), &[0x7f])])
        .expect("not a chunk");
    // A sound trailer, an entry whose RowKey length runs past the end.
    let lying = [
        &[MAGIC, 200, 0, 0, 0, 0, 0][..],
        &1u32.to_le_bytes(),
        &1u32.to_le_bytes(),
    ]
    .concat();
    raw.apply(vec![put(key(1, "r", "a"), &lying)])
        .expect("lying entry");
    // A trailer counting more offsets than the chunk holds.
    raw.apply(vec![put(
        key(1, "s", "a"),
        &[MAGIC, 0xff, 0xff, 0xff, 0x7f],
    )])
    .expect("lying trailer");
    mark(&raw, LAYOUT_CHUNKS);
    let p = Packed::open(Box::new(raw), TINY).expect("open");
    for k in [
        key(1, "p", "a"),
        key(1, "q", "a"),
        key(1, "r", "a"),
        key(1, "s", "a"),
    ] {
        assert!(matches!(
            p.get(Space::Entities, &k),
            Err(StoreError::Corrupt(_))
        ));
    }
    let scanned: Vec<_> = p
        .scan(Space::Entities, Bound::Unbounded, Bound::Unbounded)
        .collect();
    assert_eq!(scanned.len(), 1);
    assert!(matches!(scanned[0], Err(StoreError::Corrupt(_))));
    // Three appends are too many for deltas: they read the chunk.
    let appends = ["b", "c", "d"].map(|rk| put(key(1, "p", rk), b"v"));
    assert!(matches!(
        p.apply(appends.to_vec()),
        Err(StoreError::Corrupt(_))
    ));
    // The index lists a delta the engine holds something else for.
    let p = Packed::open(p.inner, TINY).expect("reopen");
    p.inner
        .apply(vec![put(delta_key(&key(1, "t", "a")), &[DELTA_PUT + 1, 0])])
        .expect("damaged delta");
    p.index.write().deltas.insert(key(1, "t", "a"));
    assert!(matches!(
        p.get(Space::Entities, &key(1, "t", "a")),
        Err(StoreError::Corrupt(_))
    ));
}

/// A one-entity write goes in as a delta and leaves its chunk alone;
/// the write that would put a third delta in the span folds them all
/// into the chunk. Reads see every write either way.
#[test]
fn single_writes_are_deltas_until_their_span_folds() {
    let p = nine_entities();
    let chunks = raw_chunks(&p);
    assert_eq!(chunks.len(), 3);
    let read = |rk: &str| {
        p.get(Space::Entities, &key(1, "p", rk))
            .expect("get")
            .map(|v| v.to_vec())
    };
    let values = || -> Vec<(String, Vec<u8>)> {
        pairs(p.scan(Space::Entities, Bound::Unbounded, Bound::Unbounded))
            .into_iter()
            .map(|(k, v)| (String::from_utf8(k[10..].to_vec()).expect("rk"), v))
            .collect()
    };
    let mut model: BTreeMap<String, Vec<u8>> =
        (0..9).map(|i| (i.to_string(), b"v".to_vec())).collect();
    let mut write = |changes: &[(&str, Option<&[u8]>)]| {
        let mut batch = Vec::new();
        for (rk, value) in changes {
            match value {
                Some(v) => {
                    model.insert(rk.to_string(), v.to_vec());
                    batch.push(put(key(1, "p", rk), v));
                }
                None => {
                    model.remove(*rk);
                    batch.push(Mutation::Delete {
                        space: Space::Entities,
                        key: key(1, "p", rk),
                    });
                }
            }
        }
        p.apply(batch).expect("write");
        check_chunks(&p);
        let expected: Vec<_> = model.clone().into_iter().collect();
        assert_eq!(values(), expected, "scan");
        for (rk, v) in &model {
            assert_eq!(read(rk).as_ref(), Some(v), "get {rk}");
        }
    };
    // Two deltas in the middle chunk's span (the keys after "2", up to
    // "5").
    write(&[("3", Some(b"w"))]);
    write(&[("4", Some(b"w"))]);
    assert_eq!(raw_chunks(&p), chunks, "no chunk rewritten");
    assert_eq!(raw_deltas(&p).len(), 2);
    // Deltas in the first span and after the partition's last chunk.
    write(&[("0", Some(b"x")), ("9", Some(b"y"))]);
    assert_eq!(raw_chunks(&p), chunks, "still no chunk rewritten");
    assert_eq!(raw_deltas(&p).len(), 4);
    // A chunk's last entity is never a delta: it sorts after its chunk.
    // The rewrite folds the first span's delta.
    write(&[("2", Some(b"z"))]);
    assert_ne!(raw_chunks(&p), chunks, "rewritten");
    assert!(!raw_deltas(&p).contains(&key(1, "p", "0")), "folded");
    // A third delta in the middle span folds it.
    write(&[("35", Some(b"u"))]);
    let left = raw_deltas(&p);
    assert!(
        !left.contains(&key(1, "p", "3")) && !left.contains(&key(1, "p", "4")),
        "the span's deltas were folded: {left:?}"
    );
    // Deletes rewrite, and leave no pair behind: not in a chunk, not as
    // a delta.
    write(&[("9", None)]);
    assert!(raw_deltas(&p).is_empty(), "the tail's delta went with it");
    write(&[("7", None)]);
    let all = engine_pairs(&p);
    for gone in ["7", "9"] {
        let k = key(1, "p", gone);
        assert!(
            all.iter().all(|(_, v)| !v.windows(k.len()).any(|w| w == k)),
            "{gone} left in the engine"
        );
    }
    // Reopened, the index comes back from the engine.
    let again = Packed::open(p.inner, TINY).expect("reopen");
    check_chunks(&again);
}

/// A directory of the layout's first version (chunks, no deltas) opens
/// as it is and is marked with the version that has deltas.
#[test]
fn chunks_without_deltas_are_marked_on_open() {
    let raw = MemoryEngine::default();
    mark(&raw, LAYOUT_CHUNKS_NO_DELTAS);
    let p = Packed::open(Box::new(raw), TINY).expect("open");
    assert_eq!(layout(&p).as_deref(), Some(LAYOUT_CHUNKS));
}

/// A scan reads one state of the engine: while a writer keeps deleting and
/// re-adding the entities after a range (so the chunk holding the range is
/// re-keyed back and forth), every scan of the range and every point read
/// in it finds all of its entities. A scan that saw the chunk's new key
/// written after it passed that key, and the old key's delete, lost them
/// all (an index lookup answered no rows while the table held them).
#[test]
fn fjall_scans_are_snapshots_while_chunks_are_rekeyed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = &over_fjall(dir.path(), ChunkLimits::DEFAULT);
    let range = |c: char| key(1, "p", &c.to_string());
    let kept: Vec<Vec<u8>> = (0..10).map(|i| key(1, "p", &format!("a{i:04}"))).collect();
    let tail: Vec<Vec<u8>> = (0..10).map(|i| key(1, "p", &format!("q{i}"))).collect();
    p.apply(
        kept.iter()
            .chain(&tail)
            .map(|k| put(k.clone(), b"v"))
            .collect(),
    )
    .expect("load");
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for round in 0..3_000 {
                let batch = if round % 2 == 0 {
                    tail.iter()
                        .map(|k| Mutation::Delete {
                            space: Space::Entities,
                            key: k.clone(),
                        })
                        .collect()
                } else {
                    tail.iter().map(|k| put(k.clone(), b"w")).collect()
                };
                p.apply(batch).expect("write");
            }
            stop.store(true, std::sync::atomic::Ordering::Release);
        });
        let mut scans = 0;
        while !stop.load(std::sync::atomic::Ordering::Acquire) || scans < 100 {
            let seen = visited(
                p,
                &Bound::Included(range('a')),
                &Bound::Excluded(range('b')),
                usize::MAX,
            );
            assert_eq!(seen.len(), kept.len(), "scan {scans} lost entities");
            let seen = pairs(p.scan(
                Space::Entities,
                Bound::Included(range('a')),
                Bound::Excluded(range('b')),
            ));
            assert_eq!(seen.len(), kept.len(), "scan {scans} lost entities");
            for k in &kept {
                assert!(
                    p.get(Space::Entities, k).expect("get").is_some(),
                    "read {scans}"
                );
            }
            scans += 1;
        }
        writer.join().expect("writer");
    });
}

/// A point read never goes back in time while a writer folds an entity's
/// delta into its chunk: the fold's batch deletes the delta before it puts
/// the chunk, and a read that saw the delete but not the put answered the
/// chunk's older value.
#[test]
fn point_reads_never_see_half_a_fold() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = over_fjall(dir.path(), ChunkLimits::DEFAULT);
    let k = |rk: &str| key(1, "p", rk);
    let (watched, other) = (k("a3"), k("a7"));
    p.apply(
        (0..10)
            .map(|i| put(k(&format!("a{i}")), &0u64.to_be_bytes()))
            .collect(),
    )
    .expect("load");
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            for round in 1..3_000u64 {
                // The new value as a delta, then a delete in the same span,
                // which folds it into the chunk.
                p.apply(vec![put(watched.clone(), &round.to_be_bytes())])
                    .expect("delta");
                p.apply(vec![put(k("a5x"), b"x")]).expect("delta");
                p.apply(vec![Mutation::Delete {
                    space: Space::Entities,
                    key: k("a5x"),
                }])
                .expect("fold");
            }
            stop.store(true, std::sync::atomic::Ordering::Release);
        });
        let mut last = 0u64;
        let mut reads = 0u64;
        while !stop.load(std::sync::atomic::Ordering::Acquire) || reads < 1_000 {
            let v = p.get(Space::Entities, &watched).expect("get");
            let v = u64::from_be_bytes(v.expect("present")[..8].try_into().expect("u64"));
            assert!(v >= last, "read {reads}: value {v} after {last}");
            last = v;
            assert!(p.get(Space::Entities, &other).expect("get").is_some());
            reads += 1;
        }
    });
}
