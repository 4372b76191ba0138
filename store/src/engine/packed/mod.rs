//! The entities keyspace's layout: a partition's entities packed into
//! chunks, many entities to one engine pair. [`Packed`] wraps an engine and
//! presents the entities keyspace pair by pair as before; the other
//! keyspaces pass through untouched.
//!
//! **Why.** fjall's cost is per pair, not per byte: merging its sources,
//! filtering versions and rebuilding each prefix-truncated key. With one
//! pair per entity, fjall's iteration was most of a full scan's CPU; with
//! many entities per pair it walks the same data many times faster
//! (figures in `bench/results/packed-layout.md`).
//!
//! **The parts.**
//! - [`layout`]: the bytes. A chunk holds consecutive entities of one
//!   partition (never two) under the key of its *last* entity, and can be
//!   binary-searched; a *delta* is one entity's newer value in a pair of
//!   its own.
//! - [`index`]: every chunk's key (the *fences*) and the entities with a
//!   delta, in memory, so a point read fetches its chunk with the engine's
//!   get instead of a seek, and answers "absent" without the engine when
//!   neither names the key.
//! - [`read`]: point reads, and scans that merge chunks with deltas in one
//!   pass of the engine.
//! - [`write`](mod@write): batches. A few puts go in as deltas; other
//!   writes rewrite the chunks they touch, folding in those chunks'
//!   deltas.
//! - [`migrate`]: data directories from before chunks, or before deltas.
//!
//! **Deliberately limited.** A write that folds a span rewrites its chunk:
//! with the default limits, about one one-entity write in nine. Chunks that
//! deletes shrink are not merged with their neighbours. A point read still
//! fetches a whole chunk and binary-searches it, a little slower than a
//! read of one pair per entity. The index costs memory in proportion to
//! the chunks and deltas (~70 bytes per chunk, ~1.4 MB per million
//! entities of ~150 bytes, and at most 8 deltas per chunk) and a walk of
//! the entities keyspace's keys when the store opens. A table of many
//! small partitions written one entity at a time can stay all deltas (one
//! pair per entity, the old layout's costs), since a span folds only when
//! it passes the limit.

mod index;
mod layout;
mod migrate;
mod read;
#[cfg(test)]
mod tests;
mod write;

use std::ops::Bound;

use parking_lot::{Mutex, RwLock};

use self::index::Index;
#[cfg(feature = "fuzzing")]
pub(crate) use self::layout::read_untrusted_chunk;
use super::{Bytes, Engine, KvIter, Mutation, Space, Visitor};
use crate::error::Result;

/// Locks serializing a partition's writers, picked by a hash of its prefix.
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

/// An engine whose entities keyspace is packed into chunks.
pub(crate) struct Packed {
    inner: Box<dyn Engine>,
    limits: ChunkLimits,
    stripes: Vec<Mutex<()>>,
    /// Where the chunks end and which entities have deltas. Updated after
    /// each write, under the write's stripes, so exact for a writer; a
    /// reader may see it a write behind (see `Packed::get_entity`).
    index: RwLock<Index>,
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
    /// Wraps `inner`, packing a directory written with one pair per entity
    /// first (see [`migrate`]).
    pub(crate) fn open(inner: Box<dyn Engine>, limits: ChunkLimits) -> Result<Self> {
        let packed = Packed {
            inner,
            limits,
            stripes: (0..LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
            index: RwLock::new(Index::default()),
        };
        packed.upgrade_layout()?;
        let index = packed.load_index(Bound::Unbounded, Bound::Unbounded)?;
        *packed.index.write() = index;
        Ok(packed)
    }
}

impl Engine for Packed {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Bytes>> {
        if space != Space::Entities {
            return self.inner.get(space, key);
        }
        self.get_entity(key)
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
        self.apply_batch(batch)
    }

    fn sync(&self) -> Result<()> {
        self.inner.sync()
    }

    fn disk_space(&self) -> u64 {
        self.inner.disk_space()
    }
}
