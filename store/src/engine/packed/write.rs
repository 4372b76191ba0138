//! Batch writes to the entities keyspace.
//!
//! **Writes of a few entities are deltas.** A chunk rewrite puts up to 8
//! KiB in the journal and the memtable for a one-entity write, and made a
//! one-row SQL UPDATE markedly slower than with one pair per entity. So a
//! partition's puts in one batch go in as *deltas* (one engine pair per
//! entity) as long as each chunk's *span* (the keys after the previous
//! chunk, up to its own key; or the partition's tail after its last chunk)
//! keeps at most [`ChunkLimits::deltas`](super::ChunkLimits::deltas).
//! Deletes are never deltas: they rewrite, so a deleted entity leaves
//! nothing behind (no tombstone waits for a fold that may never come, as
//! after `DROP TABLE`). A write to a chunk's last entity is never a delta:
//! it would sort after its chunk.
//!
//! **Other writes rewrite the chunks they touch**, inside the caller's one
//! atomic engine batch, and fold the deltas of the spans they rewrite (the
//! deltas' deletes go in the same batch). Each chunk a batch touches (found
//! through its fence) is merged with its changes and cut again into chunks
//! of at most [`ChunkLimits`](super::ChunkLimits): in equal parts when it
//! overflows (as a B-tree splits), but filling chunks up when the batch
//! only appends after the partition's last entity (a sequential load
//! leaves full chunks, not halves). Chunks that come out byte-identical
//! are not written again. Writers of one partition are serialized here by
//! a lock stripe; the store's own partition lock already serializes them,
//! but this layer's read-modify-write must not depend on its caller for
//! correctness.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, Range};

use super::index::{IndexChanges, without};
use super::layout::{
    ChunkBuilder, DELTA_PUT, ENTRY_OVERHEAD, Entries, delta_key, delta_value, is_delta,
    partition_end, prefix_len,
};
use super::{LOCK_STRIPES, Packed};
use crate::engine::{Bytes, Mutation, Space};
use crate::error::Result;

/// Changes bound for one chunk: the chunk (`None`: new chunks), the range
/// of the batch's changes that go to it, and whether they only append.
type Group = (Option<(Bytes, Bytes)>, Range<usize>, bool);

/// A batch's changes to one partition by engine key: the new value, or
/// `None` for a delete.
pub(super) type Changes = BTreeMap<Vec<u8>, Option<Vec<u8>>>;

impl Packed {
    /// [`Engine::apply`](crate::engine::Engine::apply): entity changes
    /// by partition, as deltas or rewrites; the other keyspaces' mutations
    /// as they are.
    pub(super) fn apply_batch(&self, batch: Vec<Mutation>) -> Result<()> {
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
        // "absent" without seeking (see `get_entity`). In between, the index
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
    pub(super) fn rewrite(
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

    /// The chunk of partition `prefix` at or after `key`: its fence, then
    /// a point get. Not a seek: in a partition written often, the memtable
    /// holds every older version of its chunks, and a seek walks them all
    /// (which made a one-entity replace in a large partition many times
    /// slower than with one pair per entity). If the engine disagrees with
    /// the fence, the seek answers.
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
