//! The entities keyspace's layout: a partition's entities packed into
//! chunks, many entities to one engine pair. [`Packed`] wraps an engine and
//! presents the entities keyspace pair by pair as before; the other
//! keyspaces pass through untouched.
//!
//! **Why.** fjall's cost is per pair, not per byte: merging its sources,
//! filtering versions and rebuilding each prefix-truncated key. With one
//! pair per entity, fjall alone took 207–228 ms to iterate 1M entities of
//! ~150 bytes, two thirds of the whole SQL full scan's CPU. Packed, fjall
//! walks the same data in 8–12 ms, the store's undecoded pages take 95 ms
//! instead of 282 ms and an undecoded 100-row range 13.7 µs instead of 33.5
//! (`cargo bench -p tablegate-store -- 'full_scan|read'`, release); 73 ms
//! and 11 µs since those pages stopped splitting each key.
//!
//! **Layout.** A chunk holds consecutive entities of one partition (never
//! two) and is stored under the engine key of its *last* entity. So the
//! chunk that holds key `k`, if any does, is the first chunk at or after
//! `k`, and a scan walks chunks in key order. A point read finds that
//! chunk's key in memory (the *fences*: every chunk's key, ~1 per 50
//! entities) and fetches the chunk with the engine's get, which uses
//! fjall's bloom filters and block hash index, so tables whose filters rule
//! the key out are never opened. The fallback, a forward seek, merges every
//! memtable and table that overlaps the key (store bench: 3.7 µs against
//! 3.4–3.5 µs). A chunk's value is `0xC1 ++ n × (key_len
//! u16 LE ++ value_len u32 LE ++ key ++ value) ++ n × offset u32 LE ++ n
//! u32 LE`: the offsets let a point read binary-search the chunk. Entities
//! keep their whole engine key in the chunk although the partition prefix
//! repeats (lz4 compresses it away on disk), so a scan hands out keys and
//! values alike as views into the chunk: no allocation or copy per entity.
//!
//! **Writes of a few entities are deltas.** A chunk rewrite puts up to 8
//! KiB in the journal and the memtable for a one-entity write, and made a
//! one-row SQL UPDATE ~40% slower than with one pair per entity. So a
//! partition's puts in one batch go in as *deltas* (one engine pair per
//! entity, under its key and a 0x00, valued `0xD0 ++ value`) as long as
//! each chunk's *span* (the keys after the previous chunk, up to its own
//! key; or the partition's tail after its last chunk) keeps at most
//! [`ChunkLimits::deltas`]. Deletes are never deltas: they rewrite, so a
//! deleted entity leaves nothing behind (no tombstone waits for a fold
//! that may never come, as after `DROP TABLE`). The delta key sorts right after
//! its entity's key, so before the chunk that spans the entity, and a scan
//! merges the two in one pass of the engine (one snapshot); a delta
//! replaces its entity's entry. A write to a chunk's last entity is never
//! a delta: it would sort after its chunk. Point reads ask the in-memory
//! index whether a delta exists and then fetch it (one engine get more).
//! A key with neither a delta nor a chunk at or after it in its partition
//! (every key of a new PartitionKey) is absent without asking the engine:
//! a batch adds its fences and deltas to the index before the engine shows
//! it and removes the old ones after, so the index never lacks an entity
//! the engine holds.
//!
//! **Other writes rewrite the chunks they touch**, inside the caller's one
//! atomic engine batch, and fold the deltas of the spans they rewrite (the
//! deltas' deletes go in the same batch). Each chunk a batch touches (found
//! through its fence) is merged with its changes and cut again into chunks
//! of at most [`ChunkLimits`]: in equal parts when it overflows (as a
//! B-tree splits), but filling chunks up when the batch only appends after
//! the partition's last entity (a sequential load leaves full chunks, not
//! halves). Chunks that come out byte-identical are not written again.
//! Writers of one partition are serialized here by a lock stripe; the
//! store's own partition lock already serializes them, but this layer's
//! read-modify-write must not depend on its caller for correctness.
//!
//! **Deliberately limited.** A write that folds a span rewrites its chunk:
//! with the default limits, about one one-entity write in nine. Chunks that
//! deletes shrink are not merged with their neighbours. A point read still
//! fetches a whole chunk and binary-searches it (store bench: 3.4–3.5 µs
//! against 2.6 µs for one pair per entity). The index costs memory in
//! proportion to the chunks and deltas (~70 bytes per chunk, ~1.4 MB per
//! million entities of ~150 bytes, and at most 8 deltas per chunk) and a
//! walk of the entities keyspace's keys when the store opens. A table of
//! many small partitions written one entity at a time can stay all deltas
//! (one pair per entity, the old layout's costs), since a span folds only
//! when it passes the limit.
//!
//! **Older data directories** kept one pair per entity. [`Packed::open`]
//! finds no layout marker, packs the existing pairs in place (restartable:
//! a chunk's first byte tells it from an old entity value, whose first byte
//! is the codec's format version 1), then writes the marker. A directory
//! marked `chunks/1` (chunks, no deltas yet) is marked `chunks/2`, so that
//! a tablegate from before deltas refuses it instead of misreading them.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::ops::{Bound, Range};

use byteview::ByteView;
use parking_lot::{Mutex, RwLock};

use super::{Bytes, Engine, KvIter, Mutation, Space, Visitor};
use crate::codec::TABLE_PREFIX_LEN;
use crate::error::{Result, StoreError};

/// First byte of every chunk value.
const MAGIC: u8 = 0xC1;
/// Bytes before each entry's key: its u16 key length and u32 value length.
const ENTRY_HEADER: usize = 6;
/// What an entry costs a chunk besides its key and value: the header and
/// its offset in the trailer.
const ENTRY_OVERHEAD: usize = ENTRY_HEADER + 4;
/// First byte of a delta's value: the entity's value follows.
const DELTA_PUT: u8 = 0xD0;
/// Meta key recording the entities keyspace's layout.
const LAYOUT_KEY: &[u8] = b"entity_layout";
/// Chunks and deltas. A tablegate that knows only `chunks/1` refuses a
/// directory marked so, instead of misreading its deltas as damaged chunks.
const LAYOUT_CHUNKS: &[u8] = b"chunks/2";
/// Chunks only (the layout's first version): opened as it is, and marked
/// `chunks/2`.
const LAYOUT_CHUNKS_NO_DELTAS: &[u8] = b"chunks/1";
/// Old pairs packed per migration batch.
const MIGRATE_BATCH: usize = 4096;
/// The migration logs its progress every this many entities.
const MIGRATE_PROGRESS_EVERY: usize = 250_000;
const LOCK_STRIPES: usize = 256;

/// How full a chunk may get (whichever of `entities` and `bytes` is reached
/// first), and how many deltas its span may hold before the next write
/// there folds them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkLimits {
    pub(crate) entities: u64,
    pub(crate) bytes: u64,
    /// 0: every write rewrites its chunks.
    pub(crate) deltas: usize,
}

impl ChunkLimits {
    /// 128 entities or 8 KiB of entries; 8 deltas per chunk.
    pub(crate) const DEFAULT: ChunkLimits = ChunkLimits {
        entities: 128,
        bytes: 8 * 1024,
        deltas: 8,
    };

    /// A chunk's capacity in [`weight`](Self::weight) units.
    fn capacity(&self) -> u64 {
        self.entities * self.bytes
    }

    /// What one entry of `entry_bytes` uses of a chunk's capacity: its
    /// share of the entity limit or of the byte limit, whichever is more.
    fn weight(&self, entry_bytes: usize) -> u64 {
        self.bytes.max(entry_bytes as u64 * self.entities)
    }
}

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(format!("entity chunk: {what}"))
}

/// Length of an entity key's partition prefix: table id, PartitionKey and
/// the 0x00 separator.
fn prefix_len(key: &[u8]) -> Result<usize> {
    key.get(TABLE_PREFIX_LEN..)
        .and_then(|rest| rest.iter().position(|b| *b == 0))
        .map(|sep| TABLE_PREFIX_LEN + sep + 1)
        .ok_or_else(|| corrupt("an entity key without a partition prefix"))
}

/// Whether `key` is at or after a scan's start.
fn after_start(key: &[u8], start: &Bound<impl AsRef<[u8]>>) -> bool {
    match start {
        Bound::Unbounded => true,
        Bound::Included(s) => key >= s.as_ref(),
        Bound::Excluded(s) => key > s.as_ref(),
    }
}

/// Whether `key` is before a scan's end.
fn before_end(key: &[u8], end: &Bound<Vec<u8>>) -> bool {
    match end {
        Bound::Unbounded => true,
        Bound::Included(e) => key <= &e[..],
        Bound::Excluded(e) => key < &e[..],
    }
}

/// The engine key of `key`'s delta: the key and a 0x00. Keys never hold
/// 0x00 after their separator (it is a forbidden key character), so no
/// entity key lies between an entity's key and its delta's: the delta
/// sorts right after its entity, before every later entity, and so before
/// the chunk that spans its entity, unless that chunk ends with it (which
/// the writes never allow: see `delta_route`).
fn delta_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.extend_from_slice(key);
    k.push(0);
    k
}

/// Whether an engine value is a delta (else it is a chunk).
fn is_delta(value: &[u8]) -> bool {
    value.first() == Some(&DELTA_PUT)
}

/// The entity key a delta's engine key is for.
fn delta_entity(engine_key: &[u8]) -> Result<&[u8]> {
    match engine_key.split_last() {
        Some((0, key)) => Ok(key),
        _ => Err(corrupt("a delta whose key does not end with 0x00")),
    }
}

/// Where a delta's entity value lies in the delta's engine value.
fn delta_value_at(value: &[u8]) -> Result<Range<usize>> {
    match value.first() {
        Some(&DELTA_PUT) => Ok(1..value.len()),
        _ => Err(corrupt("a damaged delta")),
    }
}

/// A delta's entity value.
fn delta_value(value: &Bytes) -> Result<Bytes> {
    Ok(view(value, delta_value_at(value)?))
}

/// Reads an untrusted chunk every way the store reads one (for the fuzz
/// targets): all entries in order, and a binary search for `key`.
#[cfg(feature = "fuzzing")]
pub(crate) fn read_untrusted_chunk(chunk: &[u8], key: &[u8]) -> Result<usize> {
    let mut n = 0;
    for e in Entries::new(chunk)? {
        let (k, v) = e?;
        n += chunk[k].len() + chunk[v].len();
    }
    if let Some(v) = find(chunk, key)? {
        n += chunk[v].len();
    }
    Ok(n)
}

/// A chunk's entries in order: where each key and value lies in it.
struct Entries<'a> {
    chunk: &'a [u8],
    pos: usize,
    /// Where the entries end and the offset trailer begins.
    end: usize,
}

impl<'a> Entries<'a> {
    fn new(chunk: &'a [u8]) -> Result<Self> {
        let (end, _) = trailer(chunk)?;
        Ok(Entries { chunk, pos: 1, end })
    }
}

/// Where a chunk's entries end, and how many there are.
fn trailer(chunk: &[u8]) -> Result<(usize, usize)> {
    if chunk.first() != Some(&MAGIC) || chunk.len() < 1 + 4 {
        return Err(corrupt("the value is not a chunk"));
    }
    let count_at = chunk.len() - 4;
    let count = u32::from_le_bytes(chunk[count_at..].try_into().expect("4 bytes")) as usize;
    count
        .checked_mul(4)
        .and_then(|offsets| count_at.checked_sub(offsets))
        .filter(|end| *end >= 1)
        .map(|end| (end, count))
        .ok_or_else(|| corrupt("the offset trailer is longer than the chunk"))
}

type EntryAt = (Range<usize>, Range<usize>);

/// The entry starting at `pos`, which must end by `end`.
fn entry_at(chunk: &[u8], pos: usize, end: usize) -> Result<EntryAt> {
    chunk
        .get(pos..pos + ENTRY_HEADER)
        .and_then(|h| {
            let key_len = u16::from_le_bytes([h[0], h[1]]) as usize;
            let value_len = u32::from_le_bytes([h[2], h[3], h[4], h[5]]) as usize;
            let key = pos + ENTRY_HEADER..pos + ENTRY_HEADER + key_len;
            let value = key.end..key.end + value_len;
            (value.end <= end).then_some((key, value))
        })
        .ok_or_else(|| corrupt("an entry runs past the chunk's end"))
}

/// The value of `key` in `chunk`, by binary search over the offset trailer.
fn find(chunk: &[u8], key: &[u8]) -> Result<Option<Range<usize>>> {
    let (end, count) = trailer(chunk)?;
    let offset = |i: usize| {
        let at = end + 4 * i;
        u32::from_le_bytes(chunk[at..at + 4].try_into().expect("4 bytes")) as usize
    };
    let (mut lo, mut hi) = (0, count);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        let (at, value) = entry_at(chunk, offset(mid), end)?;
        match chunk[at].cmp(key) {
            std::cmp::Ordering::Less => lo = mid + 1,
            std::cmp::Ordering::Equal => return Ok(Some(value)),
            std::cmp::Ordering::Greater => hi = mid,
        }
    }
    Ok(None)
}

impl Iterator for Entries<'_> {
    type Item = Result<EntryAt>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.pos >= self.end {
            return None;
        }
        match entry_at(self.chunk, self.pos, self.end) {
            Ok(at) => {
                self.pos = at.1.end;
                Some(Ok(at))
            }
            Err(e) => {
                self.pos = self.end;
                Some(Err(e))
            }
        }
    }
}

/// A chunk being built: entries, then each entry's offset (u32 LE) and
/// their count (u32 LE), so a point read can binary-search.
struct ChunkBuilder {
    bytes: Vec<u8>,
    offsets: Vec<u32>,
}

impl ChunkBuilder {
    fn new() -> Self {
        ChunkBuilder {
            bytes: vec![MAGIC],
            offsets: Vec::new(),
        }
    }

    fn push(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
        let key_len = u16::try_from(key.len()).map_err(|_| corrupt("a key over 64 KiB"))?;
        let value_len = u32::try_from(value.len()).map_err(|_| corrupt("a value over 4 GiB"))?;
        let offset = u32::try_from(self.bytes.len()).map_err(|_| corrupt("a chunk over 4 GiB"))?;
        self.offsets.push(offset);
        self.bytes.extend_from_slice(&key_len.to_le_bytes());
        self.bytes.extend_from_slice(&value_len.to_le_bytes());
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(value);
        Ok(())
    }

    fn finish(mut self) -> Vec<u8> {
        for offset in &self.offsets {
            self.bytes.extend_from_slice(&offset.to_le_bytes());
        }
        let count = self.offsets.len() as u32;
        self.bytes.extend_from_slice(&count.to_le_bytes());
        self.bytes
    }
}

/// A view of part of a chunk (no copy).
fn view(chunk: &Bytes, at: Range<usize>) -> Bytes {
    Bytes::from(ByteView::from(chunk.clone()).slice(at))
}

/// What a chunk says about `key`: `None` if it does not span it (its first
/// entity is after the key), else the key's value or its absence.
fn spanning(chunk: &Bytes, key: &[u8]) -> Result<Option<Option<Bytes>>> {
    let (end, _) = trailer(chunk)?;
    if end == 1 {
        return Ok(None);
    }
    let (first, _) = entry_at(chunk, 1, end)?;
    if &chunk[first] > key {
        return Ok(None);
    }
    Ok(Some(find(chunk, key)?.map(|value| view(chunk, value))))
}

/// Changes bound for one chunk: the chunk (`None`: new chunks), the range
/// of the batch's changes that go to it, and whether they only append.
type Group = (Option<(Bytes, Bytes)>, Range<usize>, bool);

/// A batch's changes to one partition by engine key: the new value, or
/// `None` for a delete.
type Changes = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

/// An engine whose entities keyspace is packed into chunks.
pub(crate) struct Packed {
    inner: Box<dyn Engine>,
    limits: ChunkLimits,
    stripes: Vec<Mutex<()>>,
    /// Where the chunks end and which entities have deltas. Updated after
    /// each write, under the write's stripes, so exact for a writer; a
    /// reader may see it a write behind (see `get`).
    index: RwLock<Index>,
}

/// What [`Packed`] keeps in memory about the entities keyspace.
#[derive(Debug, Clone, Default)]
struct Index {
    /// Every chunk's key (its last entity's), so that a point read can
    /// fetch its chunk with the engine's own get (bloom filters, the block
    /// hash index) instead of a seek. A reader trusts only what the chunk
    /// it fetched says.
    fences: BTreeSet<Vec<u8>>,
    /// The entity keys that have a delta, so that a point read looks for a
    /// delta only where one may be, and a write counts a span's deltas
    /// without a seek. Bounded: at most [`ChunkLimits::deltas`] per chunk.
    deltas: BTreeSet<Vec<u8>>,
}

/// How a write changes the [`Index`], applied once the engine has the
/// write.
#[derive(Debug, Default)]
struct IndexChanges {
    fences_added: Vec<Vec<u8>>,
    fences_removed: Vec<Vec<u8>>,
    deltas_added: Vec<Vec<u8>>,
    deltas_removed: Vec<Vec<u8>>,
}

impl Index {
    /// The fence at or after `key` in partition `prefix` (`last`: the last
    /// fence before `key`).
    fn fence(&self, prefix: &[u8], key: &[u8], last: bool) -> Option<&[u8]> {
        let fence = if last {
            self.fences
                .range::<[u8], _>((Bound::Included(prefix), Bound::Excluded(key)))
                .next_back()
        } else {
            self.fences
                .range::<[u8], _>((Bound::Included(key), Bound::Unbounded))
                .next()
        };
        fence.filter(|f| f.starts_with(prefix)).map(Vec::as_slice)
    }

    /// The span `key` lies in: the partition's last chunk before it
    /// (`None`: none) and the chunk that holds it (`None`: the partition's
    /// tail, after its last chunk).
    fn span(&self, prefix: &[u8], key: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
        (
            self.fence(prefix, key, true),
            self.fence(prefix, key, false),
        )
    }

    /// The entity keys with a delta after chunk `lower` (or the partition's
    /// start) and before chunk `holder` (or `end`, the partition's end).
    fn deltas_between<'a>(
        &'a self,
        prefix: &'a [u8],
        lower: Option<&'a [u8]>,
        holder: Option<&'a [u8]>,
        end: &'a [u8],
    ) -> impl Iterator<Item = &'a Vec<u8>> + 'a {
        let start = lower.map_or(Bound::Included(prefix), Bound::Excluded);
        self.deltas
            .range::<[u8], _>((start, Bound::Excluded(holder.unwrap_or(end))))
    }
}

/// `removed` less the keys in `added`.
fn without(removed: Vec<Vec<u8>>, added: &[Vec<u8>]) -> Vec<Vec<u8>> {
    if removed.is_empty() || added.is_empty() {
        return removed;
    }
    let added: std::collections::HashSet<&[u8]> = added.iter().map(Vec::as_slice).collect();
    removed
        .into_iter()
        .filter(|k| !added.contains(k.as_slice()))
        .collect()
}

/// The first key after partition `prefix` (which ends with the 0x00
/// separator): the prefix with 0x01 for its last byte.
fn partition_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    *end.last_mut().expect("a prefix ends with its separator") = 1;
    end
}

impl std::fmt::Debug for Packed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Packed")
            .field("inner", &self.inner)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Packed {
    /// The entities of `[start, end)`: the chunks' entries merged with the
    /// deltas.
    fn unpack(&self, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> Unpack<'_> {
        // The chunk holding `start` is the first keyed at or after it.
        let chunks = self
            .inner
            .scan(Space::Entities, start.clone(), Bound::Unbounded);
        Unpack {
            chunks,
            floor: start.map(Bytes::from),
            end,
            current: None,
            deltas: VecDeque::new(),
            last_read: None,
            exhausted: false,
            done: false,
        }
    }

    /// Wraps `inner`, packing a directory written with one pair per entity
    /// first (see the module documentation).
    pub(crate) fn open(inner: Box<dyn Engine>, limits: ChunkLimits) -> Result<Self> {
        let packed = Packed {
            inner,
            limits,
            stripes: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            index: RwLock::new(Index::default()),
        };
        match packed.inner.get(Space::Meta, LAYOUT_KEY)? {
            Some(layout) if layout == LAYOUT_CHUNKS => {}
            Some(layout) if layout == LAYOUT_CHUNKS_NO_DELTAS => packed.mark_layout(Vec::new())?,
            Some(layout) => {
                return Err(StoreError::Corrupt(format!(
                    "the entities keyspace has layout {:?}, which this tablegate does not know",
                    String::from_utf8_lossy(&layout)
                )));
            }
            None => packed.migrate()?,
        }
        let index = packed.load_index(Bound::Unbounded, Bound::Unbounded)?;
        *packed.index.write() = index;
        Ok(packed)
    }

    /// The fences and deltas of a key range, read from the engine.
    fn load_index(&self, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> Result<Index> {
        let mut index = Index::default();
        for kv in self.inner.scan(Space::Entities, start, end) {
            let (key, value) = kv?;
            if is_delta(&value) {
                index.deltas.insert(delta_entity(&key)?.to_vec());
            } else {
                index.fences.insert(key.to_vec());
            }
        }
        Ok(index)
    }

    /// Records the layout (with `batch`, atomically).
    fn mark_layout(&self, mut batch: Vec<Mutation>) -> Result<()> {
        batch.push(Mutation::Put {
            space: Space::Meta,
            key: LAYOUT_KEY.to_vec(),
            value: LAYOUT_CHUNKS.to_vec(),
        });
        self.inner.apply(batch)
    }

    /// Packs every pair of the old layout (one per entity) into chunks, in
    /// batches, then records the layout. Pairs that are already chunks (a
    /// migration a crash interrupted) are left as they are.
    fn migrate(&self) -> Result<()> {
        let mut batch = Vec::new();
        let mut run: Vec<(Bytes, Bytes)> = Vec::new();
        let mut run_weight = 0;
        let mut packed = 0usize;
        let mut reported = 0;
        for kv in self
            .inner
            .scan(Space::Entities, Bound::Unbounded, Bound::Unbounded)
        {
            let (key, value) = kv?;
            if value.first() == Some(&MAGIC) {
                packed += self.pack_run(&mut run, &mut batch)?;
                run_weight = 0;
                continue;
            }
            let plen = prefix_len(&key)?;
            let weight = self.limits.weight(ENTRY_OVERHEAD + key.len() + value.len());
            let other_partition = run
                .first()
                .is_some_and(|(k, _)| k.get(..plen) != Some(&key[..plen]));
            if other_partition || run_weight + weight > self.limits.capacity() {
                packed += self.pack_run(&mut run, &mut batch)?;
                run_weight = 0;
            }
            run.push((key, value));
            run_weight += weight;
            if batch.len() >= MIGRATE_BATCH {
                self.inner.apply(std::mem::take(&mut batch))?;
                // A large directory takes a while (1M entities: ~2.6 s).
                if packed / MIGRATE_PROGRESS_EVERY > reported {
                    reported = packed / MIGRATE_PROGRESS_EVERY;
                    tracing::info!(
                        entities = packed,
                        "packing the entities keyspace into chunks (once, for a data directory \
                         from before chunks)"
                    );
                }
            }
        }
        packed += self.pack_run(&mut run, &mut batch)?;
        self.mark_layout(batch)?;
        if packed > 0 {
            tracing::info!(
                entities = packed,
                "packed the entities keyspace into chunks"
            );
        }
        Ok(())
    }

    /// One chunk from old pairs of one partition: their deletes and the
    /// chunk's put, under the last one's key. Returns how many it packed.
    fn pack_run(&self, run: &mut Vec<(Bytes, Bytes)>, batch: &mut Vec<Mutation>) -> Result<usize> {
        let Some((last, _)) = run.last() else {
            return Ok(0);
        };
        let mut chunk = ChunkBuilder::new();
        for (key, value) in run.iter() {
            chunk.push(key, value)?;
        }
        let n = run.len();
        let last = last.to_vec();
        for (key, _) in run.drain(..n - 1) {
            batch.push(Mutation::Delete {
                space: Space::Entities,
                key: key.to_vec(),
            });
        }
        run.clear();
        batch.push(Mutation::Put {
            space: Space::Entities,
            key: last,
            value: chunk.finish(),
        });
        Ok(n)
    }

    fn stripe(&self, prefix: &[u8]) -> usize {
        (xxhash_rust::xxh3::xxh3_64(prefix) % LOCK_STRIPES as u64) as usize
    }

    /// Whether a chunk has room for more entries.
    fn has_room(&self, chunk: &[u8]) -> Result<bool> {
        let mut used = 0;
        for entry in Entries::new(chunk)? {
            let (key, value) = entry?;
            used += self.limits.weight(ENTRY_OVERHEAD + key.len() + value.len());
        }
        Ok(used < self.limits.capacity())
    }

    /// Whether a partition's changes go in as deltas. They do when the
    /// store keeps deltas (`limits.deltas` > 0), none is a delete, no
    /// changed key ends a chunk (its delta would sort after the chunk that
    /// holds its entity), and no chunk's span would then hold more than
    /// `limits.deltas` deltas. Otherwise the write rewrites chunks and
    /// folds the deltas of the spans it rewrites. The caller holds the
    /// partition's stripe, so the index is exact.
    ///
    /// Deletes always rewrite: a deleted entity then leaves nothing behind
    /// in its chunk, and dropping a table (which deletes its entities in
    /// batches) leaves no pair of it in the engine.
    fn delta_route(&self, prefix: &[u8], changes: &Changes) -> bool {
        if changes.len() > self.limits.deltas || changes.values().any(Option::is_none) {
            return false;
        }
        let index = self.index.read();
        let end = partition_end(prefix);
        // Deltas per span, by the span's chunk (`None`: after the last).
        let mut spans: BTreeMap<Option<&[u8]>, usize> = BTreeMap::new();
        for key in changes.keys() {
            if index.fences.contains(key) {
                return false;
            }
            let (lower, holder) = index.span(prefix, key);
            let count = spans
                .entry(holder)
                .or_insert_with(|| index.deltas_between(prefix, lower, holder, &end).count());
            *count += usize::from(!index.deltas.contains(key));
            if *count > self.limits.deltas {
                return false;
            }
        }
        true
    }

    /// Writes the puts of `changes` as deltas (`delta_route` admits no
    /// delete).
    fn write_deltas(&self, changes: Changes, out: &mut Vec<Mutation>, index: &mut IndexChanges) {
        for (key, value) in changes {
            let Some(value) = value else { continue };
            let mut delta = Vec::with_capacity(value.len() + 1);
            delta.push(DELTA_PUT);
            delta.extend_from_slice(&value);
            out.push(Mutation::Put {
                space: Space::Entities,
                key: delta_key(&key),
                value: delta,
            });
            index.deltas_added.push(key);
        }
    }

    /// Takes the deltas out of every span a rewrite for `changes` may cut:
    /// the spans of the changed keys and, when some change lies after the
    /// partition's last chunk, that chunk's span too (an append may
    /// rewrite it). Pushes the deltas' deletes and returns what those the
    /// batch does not replace said, in key order.
    fn fold(
        &self,
        prefix: &[u8],
        changes: &Changes,
        out: &mut Vec<Mutation>,
        index_changes: &mut IndexChanges,
    ) -> Result<Vec<(Vec<u8>, Option<Bytes>)>> {
        let keys: BTreeSet<Vec<u8>> = {
            let index = self.index.read();
            let end = partition_end(prefix);
            // No delta in the partition (a load, a new partition): no span
            // to look at per change.
            let partition = (Bound::Included(prefix), Bound::Excluded(&end[..]));
            if index.deltas.range::<[u8], _>(partition).next().is_none() {
                return Ok(Vec::new());
            }
            let mut keys = BTreeSet::new();
            let mut spans_done: BTreeSet<Option<&[u8]>> = BTreeSet::new();
            for key in changes.keys() {
                let (lower, holder) = index.span(prefix, key);
                if !spans_done.insert(holder) {
                    continue;
                }
                keys.extend(index.deltas_between(prefix, lower, holder, &end).cloned());
                if let (None, Some(last)) = (holder, lower)
                    && spans_done.insert(Some(last))
                {
                    let before_last = index.fence(prefix, last, true);
                    keys.extend(
                        index
                            .deltas_between(prefix, before_last, Some(last), &end)
                            .cloned(),
                    );
                }
            }
            keys
        };
        let mut folded = Vec::new();
        for key in keys {
            let engine_key = delta_key(&key);
            if let Some(delta) = self.inner.get(Space::Entities, &engine_key)? {
                if !changes.contains_key(&key) {
                    folded.push((key.clone(), Some(delta_value(&delta)?)));
                }
                out.push(Mutation::Delete {
                    space: Space::Entities,
                    key: engine_key,
                });
            }
            index_changes.deltas_removed.push(key);
        }
        Ok(folded)
    }

    /// Rewrites the chunks of the partition `prefix` that `changes` (full
    /// keys, `None` for a delete) touch, with the deltas of their spans,
    /// pushing the engine mutations to `out`. The caller holds the
    /// partition's stripe. Each touched chunk is found on its own, so a
    /// batch that touches both ends of a large partition reads two chunks,
    /// not the chunks between.
    fn rewrite(
        &self,
        prefix: &[u8],
        changes: &Changes,
        out: &mut Vec<Mutation>,
        index_changes: &mut IndexChanges,
    ) -> Result<()> {
        let folded = self.fold(prefix, changes, out, index_changes)?;
        // The batch's changes and the folded deltas, in key order.
        let mut merged: Vec<(&[u8], Option<&[u8]>)> =
            Vec::with_capacity(changes.len() + folded.len());
        let mut deltas = folded.iter().peekable();
        for (key, value) in changes {
            while let Some((k, v)) = deltas.next_if(|(k, _)| k < key) {
                merged.push((k, v.as_deref()));
            }
            merged.push((key, value.as_deref()));
        }
        merged.extend(deltas.map(|(k, v)| (&k[..], v.as_deref())));
        let changes = merged;
        let mut groups: Vec<Group> = Vec::new();
        let mut at = 0;
        while let Some(&(first, _)) = changes.get(at) {
            // The chunk that holds `first`: the first at or after it.
            let holder = self.chunk_at_or_after(prefix, first)?;
            if let Some(chunk) = holder {
                let n = changes[at..].partition_point(|(k, _)| *k <= &chunk.0[..]);
                groups.push((Some(chunk), at..at + n, false));
                at += n;
                continue;
            }
            // The rest append after the partition's last entity. If the
            // last chunk holds earlier changes of this batch, they join
            // that rewrite (two rewrites of one chunk would lose one);
            // else they join the last chunk if it has room, and fill
            // chunks up.
            let last = self.last_chunk_before(prefix, first)?;
            match (groups.last_mut(), last) {
                (Some((Some(touched), range, _)), Some(last)) if touched.0 == last.0 => {
                    range.end = changes.len();
                }
                (_, last) => {
                    let last = match last {
                        Some(chunk) if self.has_room(&chunk.1)? => Some(chunk),
                        _ => None,
                    };
                    groups.push((last, at..changes.len(), true));
                }
            }
            at = changes.len();
        }
        for (chunk, range, append) in groups {
            self.rewrite_chunk(chunk, &changes[range], append, out, index_changes)?;
        }
        Ok(())
    }

    /// The fence at or after `key` in partition `prefix` (`last`: the last
    /// fence before `key`). Exact when the caller holds the partition's
    /// stripe; a reader without it may see the fences a write behind.
    fn fence(&self, prefix: &[u8], key: &[u8], last: bool) -> Option<Vec<u8>> {
        self.index
            .read()
            .fence(prefix, key, last)
            .map(<[u8]>::to_vec)
    }

    /// The chunk of partition `prefix` at or after `key`: its fence, then
    /// a point get. Not a seek: in a partition written often, the memtable
    /// holds every older version of its chunks, and a seek walks them all
    /// (a one-entity replace in a partition of 1,000 took 62–84 µs that
    /// way, against 7.9 µs with one pair per entity). If the engine
    /// disagrees with the fence, the seek answers.
    fn chunk_at_or_after(&self, prefix: &[u8], key: &[u8]) -> Result<Option<(Bytes, Bytes)>> {
        if let Some(fence) = self.fence(prefix, key, false)
            && let Some(chunk) = self.inner.get(Space::Entities, &fence)?
        {
            return Ok(Some((Bytes::from(fence), chunk)));
        }
        for kv in self.inner.scan(
            Space::Entities,
            Bound::Included(key.to_vec()),
            Bound::Unbounded,
        ) {
            let (k, v) = kv?;
            if !k.starts_with(prefix) {
                break;
            }
            if !is_delta(&v) {
                return Ok(Some((k, v)));
            }
        }
        Ok(None)
    }

    /// The last chunk of partition `prefix` before `key`, the same way.
    fn last_chunk_before(&self, prefix: &[u8], key: &[u8]) -> Result<Option<(Bytes, Bytes)>> {
        if let Some(fence) = self.fence(prefix, key, true)
            && let Some(chunk) = self.inner.get(Space::Entities, &fence)?
        {
            return Ok(Some((Bytes::from(fence), chunk)));
        }
        let range = || {
            (
                Bound::Included(prefix.to_vec()),
                Bound::Excluded(key.to_vec()),
            )
        };
        match self.inner.last_in(Space::Entities, range().0, range().1)? {
            None => return Ok(None),
            Some((k, v)) if !is_delta(&v) => return Ok(Some((k, v))),
            // The last pair is a delta: walk forward for the last chunk.
            Some(_) => {}
        }
        let mut last = None;
        for kv in self.inner.scan(Space::Entities, range().0, range().1) {
            let (k, v) = kv?;
            if !is_delta(&v) {
                last = Some((k, v));
            }
        }
        Ok(last)
    }

    /// Reloads the index of partition `prefix` from the engine (after a
    /// failed write, which may or may not have landed).
    fn reload_index(&self, prefix: &[u8]) -> Result<()> {
        let end = partition_end(prefix);
        let fresh = self.load_index(
            Bound::Included(prefix.to_vec()),
            Bound::Excluded(end.clone()),
        )?;
        let mut index = self.index.write();
        let range = (Bound::Included(prefix), Bound::Excluded(&end[..]));
        let stale_fences: Vec<Vec<u8>> = index.fences.range::<[u8], _>(range).cloned().collect();
        let stale_deltas: Vec<Vec<u8>> = index.deltas.range::<[u8], _>(range).cloned().collect();
        for key in stale_fences {
            index.fences.remove(&key);
        }
        for key in stale_deltas {
            index.deltas.remove(&key);
        }
        index.fences.extend(fresh.fences);
        index.deltas.extend(fresh.deltas);
        Ok(())
    }

    /// Merges `changes` (in key order) into one chunk (or none), cuts the
    /// result, and pushes the puts of what changed and the delete of the
    /// old key if no part keeps it.
    fn rewrite_chunk(
        &self,
        old: Option<(Bytes, Bytes)>,
        changes: &[(&[u8], Option<&[u8]>)],
        append: bool,
        out: &mut Vec<Mutation>,
        index_changes: &mut IndexChanges,
    ) -> Result<()> {
        let mut merged: Vec<(&[u8], &[u8])> = Vec::new();
        let mut pending = changes.iter().copied().peekable();
        if let Some((_, chunk)) = &old {
            for entry in Entries::new(chunk)? {
                let (key, value) = entry?;
                let key = &chunk[key];
                while let Some((new_key, new_value)) = pending.next_if(|(c, _)| *c < key) {
                    merged.extend(new_value.map(|v| (new_key, v)));
                }
                match pending.next_if(|(c, _)| *c == key) {
                    Some((_, new_value)) => merged.extend(new_value.map(|v| (key, v))),
                    None => merged.push((key, &chunk[value])),
                }
            }
        }
        for (new_key, new_value) in pending {
            merged.extend(new_value.map(|v| (new_key, v)));
        }

        let mut old_kept = false;
        for part in self.cut(&merged, append) {
            let entries = &merged[part];
            let key = entries.last().expect("cut parts are not empty").0;
            let mut builder = ChunkBuilder::new();
            for (entity_key, value) in entries {
                builder.push(entity_key, value)?;
            }
            let chunk = builder.finish();
            let same_key = old.as_ref().is_some_and(|(k, _)| k[..] == *key);
            old_kept |= same_key;
            let unchanged = same_key && old.as_ref().is_some_and(|(_, v)| v[..] == chunk[..]);
            if !unchanged {
                out.push(Mutation::Put {
                    space: Space::Entities,
                    key: key.to_vec(),
                    value: chunk,
                });
                index_changes.fences_added.push(key.to_vec());
            }
        }
        if let Some((key, _)) = &old
            && !old_kept
        {
            out.push(Mutation::Delete {
                space: Space::Entities,
                key: key.to_vec(),
            });
            index_changes.fences_removed.push(key.to_vec());
        }
        Ok(())
    }

    /// Where to cut `entries` into chunks (index ranges, none empty): full
    /// chunks and a partial last one when appending, equal parts otherwise.
    fn cut(&self, entries: &[(&[u8], &[u8])], append: bool) -> Vec<Range<usize>> {
        let weights: Vec<u64> = entries
            .iter()
            .map(|(k, v)| self.limits.weight(ENTRY_OVERHEAD + k.len() + v.len()))
            .collect();
        let total: u64 = weights.iter().sum();
        let capacity = self.limits.capacity();
        let parts = total.div_ceil(capacity).max(1);
        let mut cuts = Vec::new();
        let (mut start, mut used) = (0, 0u64);
        for (i, &w) in weights.iter().enumerate() {
            let cut_here = i > start
                && if append {
                    used + w > capacity
                } else {
                    // The entry goes to the next part if most of it lies
                    // beyond this part's equal share.
                    parts * (2 * used + w) > 2 * total || used + w > capacity + capacity / 2
                };
            if cut_here {
                cuts.push(start..i);
                start = i;
                used = 0;
            }
            used += w;
        }
        if start < entries.len() {
            cuts.push(start..entries.len());
        }
        cuts
    }
}

impl Engine for Packed {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Bytes>> {
        if space != Space::Entities {
            return self.inner.get(space, key);
        }
        let plen = prefix_len(key)?;
        let (fence, has_delta) = {
            let index = self.index.read();
            let fence = index.fence(&key[..plen], key, false).map(<[u8]>::to_vec);
            (fence, index.deltas.contains(key))
        };
        // Neither a chunk that could hold the key nor a delta: absent, with
        // no seek (a new PartitionKey's every INSERT asks this). `apply`
        // adds to the index before the engine shows a write, so an entity
        // the engine holds is always in the index; a write still on its
        // way is missed as by any read that runs before it.
        if fence.is_none() && !has_delta {
            return Ok(None);
        }
        // A delta answers for its entity. One folded since the index was
        // read is gone from the engine, and its chunk then holds it.
        if has_delta && let Some(delta) = self.inner.get(space, &delta_key(key))? {
            return delta_value(&delta).map(Some);
        }
        // The fence names the chunk that should hold the key. The chunk
        // fetched under it answers only if it spans the key: chunks never
        // overlap, so then no other chunk can hold it. Otherwise (a fence a
        // write behind, or none) the seek below answers.
        if let Some(fence) = fence
            && let Some(chunk) = self.inner.get(space, &fence)?
            && let Some(found) = spanning(&chunk, key)?
        {
            return Ok(found);
        }
        // The seek: the key's own delta, if it meets it, else the first
        // chunk of the partition at or after the key.
        let own_delta = delta_key(key);
        for kv in self
            .inner
            .scan(space, Bound::Included(key.to_vec()), Bound::Unbounded)
        {
            let (engine_key, value) = kv?;
            if engine_key.get(..plen) != Some(&key[..plen]) {
                break;
            }
            if is_delta(&value) {
                if engine_key[..] == own_delta[..] {
                    return delta_value(&value).map(Some);
                }
                continue;
            }
            return Ok(find(&value, key)?.map(|at| view(&value, at)));
        }
        Ok(None)
    }

    fn scan(&self, space: Space, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> KvIter<'_> {
        if space != Space::Entities {
            return self.inner.scan(space, start, end);
        }
        Box::new(self.unpack(start, end))
    }

    fn visit(
        &self,
        space: Space,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        f: &mut Visitor<'_>,
    ) -> Result<()> {
        if space != Space::Entities {
            return self.inner.visit(space, start, end, f);
        }
        self.unpack(start, end).visit(f)
    }

    fn apply(&self, batch: Vec<Mutation>) -> Result<()> {
        let mut out = Vec::with_capacity(batch.len());
        // Changes to entities by partition prefix, then by key; a later
        // change to a key replaces an earlier one, as in any engine batch.
        let mut partitions: BTreeMap<Vec<u8>, Changes> = BTreeMap::new();
        for m in batch {
            let (key, value) = match m {
                Mutation::Put {
                    space: Space::Entities,
                    key,
                    value,
                } => (key, Some(value)),
                Mutation::Delete {
                    space: Space::Entities,
                    key,
                } => (key, None),
                other => {
                    out.push(other);
                    continue;
                }
            };
            let prefix = &key[..prefix_len(&key)?];
            match partitions.get_mut(prefix) {
                Some(changes) => {
                    changes.insert(key, value);
                }
                None => {
                    let prefix = prefix.to_vec();
                    partitions.insert(prefix, BTreeMap::from([(key, value)]));
                }
            }
        }
        if partitions.is_empty() {
            return self.inner.apply(out);
        }
        // Stripes in ascending order, so two multi-partition batches
        // cannot deadlock.
        let mut stripes: Vec<usize> = partitions.keys().map(|p| self.stripe(p)).collect();
        stripes.sort_unstable();
        stripes.dedup();
        let _held: Vec<_> = stripes.iter().map(|&s| self.stripes[s].lock()).collect();
        let mut index_changes = IndexChanges::default();
        let prefixes: Vec<Vec<u8>> = partitions.keys().cloned().collect();
        for (prefix, changes) in partitions {
            if self.limits.deltas > 0 && self.delta_route(&prefix, &changes) {
                self.write_deltas(changes, &mut out, &mut index_changes);
            } else {
                self.rewrite(&prefix, &changes, &mut out, &mut index_changes)?;
            }
        }
        // The index learns what the batch adds before the engine shows it,
        // and forgets what the batch removes only after: at every moment
        // each entity the engine holds has its chunk's fence or its delta
        // in the index, which lets a point read that finds neither answer
        // "absent" without seeking (see `get`). In between, the index
        // names a chunk or delta the engine lacks, which only costs a
        // read the engine then answers.
        let IndexChanges {
            fences_added,
            fences_removed,
            deltas_added,
            deltas_removed,
        } = index_changes;
        // A key the batch both removes and adds stays.
        let fences_removed = without(fences_removed, &fences_added);
        let deltas_removed = without(deltas_removed, &deltas_added);
        {
            let mut index = self.index.write();
            index.fences.extend(fences_added);
            index.deltas.extend(deltas_added);
        }
        if let Err(e) = self.inner.apply(out) {
            for prefix in &prefixes {
                self.reload_index(prefix)?;
            }
            return Err(e);
        }
        let mut index = self.index.write();
        for key in fences_removed {
            index.fences.remove(&key);
        }
        for key in deltas_removed {
            index.deltas.remove(&key);
        }
        Ok(())
    }

    fn disk_space(&self) -> u64 {
        self.inner.disk_space()
    }
}

/// A scan of the entities keyspace, entity by entity: the chunks' entries
/// merged with the deltas. The engine yields each delta before the chunk
/// that spans its entity, so deltas wait in order until that chunk comes,
/// or until the engine has moved past their partition (a chunk never
/// spans two), and a delta replaces its entity's entry.
struct Unpack<'a> {
    chunks: KvIter<'a>,
    /// Entities at the start of a chunk up to here were yielded already or
    /// lie before the scan's start: the start, then the previous chunk's
    /// key. (An engine whose scans re-seek, like the memory engine, can
    /// meet a chunk that a writer re-keyed to span both sides.)
    floor: Bound<Bytes>,
    end: Bound<Vec<u8>>,
    current: Option<Chunk>,
    /// Deltas read and not yet yielded, by engine key, in key order.
    deltas: VecDeque<(Bytes, Bytes)>,
    /// The engine key read last.
    last_read: Option<Bytes>,
    /// The engine has nothing more.
    exhausted: bool,
    done: bool,
}

/// The chunk a scan is inside.
struct Chunk {
    key: Bytes,
    value: ByteView,
    pos: usize,
    /// Where its entries end.
    end: usize,
    /// Still skipping entries at or before the floor.
    at_floor: bool,
    /// Its last entity is before the scan's end, so every entry is: no
    /// key comparison per entry.
    before_end: bool,
}

impl Chunk {
    /// The next entry past `floor`, not yet taken (`None`: no more).
    fn peek(&mut self, floor: &Bound<Bytes>) -> Result<Option<EntryAt>> {
        while self.pos < self.end {
            let at = entry_at(&self.value, self.pos, self.end)?;
            if self.at_floor {
                if !after_start(&self.value[at.0.clone()], floor) {
                    self.pos = at.1.end;
                    continue;
                }
                self.at_floor = false;
            }
            return Ok(Some(at));
        }
        Ok(None)
    }
}

/// What one step of an [`Unpack`] yields.
enum Next {
    /// The entry at these ranges of the current chunk.
    Entry(EntryAt),
    /// A delta: its engine key and value, as stored.
    Delta(Bytes, Bytes),
}

impl Unpack<'_> {
    /// One step of the merge: an entity to yield, or `None` to step again
    /// (with `done` set at the end).
    fn step(&mut self) -> Result<Option<Next>> {
        if let Some(chunk) = &mut self.current {
            let Some(at) = chunk.peek(&self.floor)? else {
                self.floor = Bound::Excluded(chunk.key.clone());
                self.current = None;
                return Ok(None);
            };
            let key = &chunk.value[at.0.clone()];
            let delta_first = match self.deltas.front() {
                Some((delta, _)) => {
                    let entity = delta_entity(delta)?;
                    if entity == key {
                        // The delta replaces this entry.
                        chunk.pos = at.1.end;
                    }
                    entity <= key
                }
                None => false,
            };
            if !delta_first {
                chunk.pos = at.1.end;
                if !chunk.before_end && !before_end(key, &self.end) {
                    self.done = true;
                    return Ok(None);
                }
                return Ok(Some(Next::Entry(at)));
            }
        } else if !self.deltas_ready()? {
            match self.chunks.next().transpose()? {
                None => self.exhausted = true,
                Some((key, value)) => {
                    if is_delta(&value) {
                        self.deltas.push_back((key.clone(), value));
                    } else {
                        let (end, _) = trailer(&value)?;
                        self.current = Some(Chunk {
                            before_end: before_end(&key, &self.end),
                            key: key.clone(),
                            value: value.into(),
                            pos: 1,
                            end,
                            at_floor: true,
                        });
                    }
                    self.last_read = Some(key);
                }
            }
            return Ok(None);
        }
        // The first waiting delta goes now.
        let Some((key, value)) = self.deltas.pop_front() else {
            self.done = true;
            return Ok(None);
        };
        let entity = delta_entity(&key)?;
        if !after_start(entity, &self.floor) {
            return Ok(None);
        }
        if !before_end(entity, &self.end) {
            self.done = true;
            return Ok(None);
        }
        Ok(Some(Next::Delta(key, value)))
    }

    /// [`Engine::visit`] over this merge: each entity as a view into its
    /// chunk (or its delta), with no slice taken.
    fn visit(&mut self, f: &mut Visitor<'_>) -> Result<()> {
        while !self.done {
            let go_on = match self.step() {
                Ok(None) => continue,
                Ok(Some(Next::Entry(at))) => {
                    let chunk = self.current.as_ref().expect("an entry's chunk");
                    f(&chunk.value[at.0], &chunk.value, at.1)
                }
                Ok(Some(Next::Delta(key, value))) => delta_value_at(&value)
                    .and_then(|at| f(&key[..key.len() - 1], &ByteView::from(value), at)),
                Err(e) => Err(e),
            };
            if !go_on.inspect_err(|_| self.done = true)? {
                self.done = true;
            }
        }
        Ok(())
    }

    /// Whether the first waiting delta may go without waiting for a chunk
    /// (also when none waits and the engine has nothing more): the engine
    /// has nothing more, or has moved past the delta's partition.
    fn deltas_ready(&self) -> Result<bool> {
        if self.exhausted {
            return Ok(true);
        }
        let (Some((first, _)), Some(last)) = (self.deltas.front(), &self.last_read) else {
            return Ok(false);
        };
        let plen = prefix_len(first)?;
        Ok(!last.starts_with(&first[..plen]))
    }
}

impl Iterator for Unpack<'_> {
    type Item = Result<(Bytes, Bytes)>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            match self.step() {
                Ok(Some(Next::Entry(at))) => {
                    let chunk = self.current.as_ref().expect("an entry's chunk");
                    return Some(Ok((
                        Bytes::from(chunk.value.slice(at.0)),
                        Bytes::from(chunk.value.slice(at.1)),
                    )));
                }
                Ok(Some(Next::Delta(key, value))) => {
                    return Some(delta_value(&value).map(|v| (view(&key, 0..key.len() - 1), v)));
                }
                Ok(None) => {}
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::engine::memory::MemoryEngine;

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
            let engine = crate::engine::fjall_engine::FjallEngine::open(
                dir.path(),
                crate::engine::Durability::Buffered,
                1 << 20,
            )
            .expect("open");
            let p = Packed::open(Box::new(engine), limits).expect("packed");
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
}
