//! What [`Packed`] keeps in memory about the entities keyspace: every
//! chunk's key (the *fences*, about one per 50 entities) and the entity
//! keys that have a delta.
//!
//! A point read finds its chunk's key here and fetches the chunk with the
//! engine's get, which uses fjall's bloom filters and block hash index, so
//! tables whose filters rule the key out are never opened; a forward seek
//! would merge every memtable and table that overlaps the key. A key with
//! neither a delta nor a chunk at or after it in its partition (every key
//! of a new PartitionKey) is absent without asking the engine: a batch
//! adds its fences and deltas to the index before the engine shows it and
//! removes the old ones after, so the index never lacks an entity the
//! engine holds.

use std::collections::BTreeSet;
use std::ops::Bound;

use super::Packed;
use super::layout::{delta_entity, is_delta, partition_end};
use crate::engine::Space;
use crate::error::Result;

/// What [`Packed`] keeps in memory about the entities keyspace.
#[derive(Debug, Clone, Default)]
pub(super) struct Index {
    /// Every chunk's key (its last entity's), so that a point read can
    /// fetch its chunk with the engine's own get (bloom filters, the block
    /// hash index) instead of a seek. A reader trusts only what the chunk
    /// it fetched says.
    pub(super) fences: BTreeSet<Vec<u8>>,
    /// The entity keys that have a delta, so that a point read looks for a
    /// delta only where one may be, and a write counts a span's deltas
    /// without a seek. Bounded: at most
    /// [`ChunkLimits::deltas`](super::ChunkLimits::deltas) per chunk.
    pub(super) deltas: BTreeSet<Vec<u8>>,
}

/// How a write changes the [`Index`], applied once the engine has the
/// write.
#[derive(Debug, Default)]
pub(super) struct IndexChanges {
    pub(super) fences_added: Vec<Vec<u8>>,
    pub(super) fences_removed: Vec<Vec<u8>>,
    pub(super) deltas_added: Vec<Vec<u8>>,
    pub(super) deltas_removed: Vec<Vec<u8>>,
}

impl Index {
    /// The fence at or after `key` in partition `prefix` (`last`: the last
    /// fence before `key`).
    pub(super) fn fence(&self, prefix: &[u8], key: &[u8], last: bool) -> Option<&[u8]> {
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
    pub(super) fn span(&self, prefix: &[u8], key: &[u8]) -> (Option<&[u8]>, Option<&[u8]>) {
        (
            self.fence(prefix, key, true),
            self.fence(prefix, key, false),
        )
    }

    /// The entity keys with a delta after chunk `lower` (or the partition's
    /// start) and before chunk `holder` (or `end`, the partition's end).
    pub(super) fn deltas_between<'a>(
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
pub(super) fn without(removed: Vec<Vec<u8>>, added: &[Vec<u8>]) -> Vec<Vec<u8>> {
    if removed.is_empty() || added.is_empty() {
        return removed;
    }
    let added: std::collections::HashSet<&[u8]> = added.iter().map(Vec::as_slice).collect();
    removed
        .into_iter()
        .filter(|k| !added.contains(k.as_slice()))
        .collect()
}

impl Packed {
    /// The fences and deltas of a key range, read from the engine.
    pub(super) fn load_index(&self, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> Result<Index> {
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

    /// The fence at or after `key` in partition `prefix` (`last`: the last
    /// fence before `key`). Exact when the caller holds the partition's
    /// stripe; a reader without it may see the fences a write behind.
    pub(super) fn fence(&self, prefix: &[u8], key: &[u8], last: bool) -> Option<Vec<u8>> {
        self.index
            .read()
            .fence(prefix, key, last)
            .map(<[u8]>::to_vec)
    }

    /// Reloads the index of partition `prefix` from the engine (after a
    /// failed write, which may or may not have landed).
    pub(super) fn reload_index(&self, prefix: &[u8]) -> Result<()> {
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
}
