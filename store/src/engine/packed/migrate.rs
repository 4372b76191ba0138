//! Data directories from before the current layout, and the marker that
//! records the layout.
//!
//! Older data directories kept one pair per entity. [`Packed::open`] finds
//! no layout marker, packs the existing pairs in place (restartable: a
//! chunk's first byte tells it from an old entity value, whose first byte
//! is the codec's format version 1), then writes the marker. A directory
//! marked `chunks/1` (chunks, no deltas yet) is marked `chunks/2`, so that
//! a tablegate from before deltas refuses it instead of misreading them.

use std::ops::Bound;

use super::Packed;
use super::layout::{ChunkBuilder, ENTRY_OVERHEAD, MAGIC, prefix_len};
use crate::engine::{Bytes, Mutation, Space};
use crate::error::{Result, StoreError};

/// Meta key recording the entities keyspace's layout.
pub(super) const LAYOUT_KEY: &[u8] = b"entity_layout";
/// Chunks and deltas. A tablegate that knows only `chunks/1` refuses a
/// directory marked so, instead of misreading its deltas as damaged chunks.
pub(super) const LAYOUT_CHUNKS: &[u8] = b"chunks/2";
/// Chunks only (the layout's first version): opened as it is, and marked
/// `chunks/2`.
pub(super) const LAYOUT_CHUNKS_NO_DELTAS: &[u8] = b"chunks/1";
/// Old pairs packed per migration batch.
const MIGRATE_BATCH: usize = 4096;
/// The migration logs its progress every this many entities.
const MIGRATE_PROGRESS_EVERY: usize = 250_000;

impl Packed {
    /// Brings the entities keyspace to the current layout, as its marker
    /// says it is, or refuses a layout this tablegate does not know.
    pub(super) fn upgrade_layout(&self) -> Result<()> {
        match self.inner.get(Space::Meta, LAYOUT_KEY)? {
            Some(layout) if layout == LAYOUT_CHUNKS => {}
            Some(layout) if layout == LAYOUT_CHUNKS_NO_DELTAS => self.mark_layout(Vec::new())?,
            Some(layout) => {
                return Err(StoreError::Corrupt(format!(
                    "the entities keyspace has layout {:?}, which this tablegate does not know",
                    String::from_utf8_lossy(&layout)
                )));
            }
            None => self.migrate()?,
        }
        Ok(())
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
                // A large directory takes a while: say how far it got.
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
}
