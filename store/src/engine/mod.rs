//! The narrow key/value interface the entity store is written against, and
//! its two implementations: [`fjall`](fjall_engine) (durable, the default)
//! and [`memory`] (a BTreeMap, for tests and throwaway stores), and
//! [`packed`], the layer over either that keeps the entities keyspace as
//! chunks of several entities per engine pair. [`journal_fill`] keeps the
//! durable engine's journal zero-filled ahead of its writer. Between
//! `packed` and the engine: [`health`], which stops writes once the engine
//! failed one, and (in tests) [`faults`], which injects such failures.
//!
//! The engines know bytes, three keyspaces and atomic batches; nothing about
//! entities. Only [`packed`] knows the shape of an entity key (a partition
//! prefix, then a RowKey), because a chunk never spans two partitions.
//! Everything above this module is engine-agnostic, and nothing outside the
//! store crate sees this trait or fjall.

pub(crate) mod faults;
pub(crate) mod fjall_engine;
pub(crate) mod health;
mod journal_fill;
pub(crate) mod memory;
pub(crate) mod packed;

use std::ops::{Bound, Range};

use byteview::ByteView;

use crate::error::Result;

/// The engine's separate ordered keyspaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Space {
    /// Entities by `codec::entity_key`.
    Entities,
    /// Table registry and store metadata.
    Meta,
    /// Per-partition entity counts by `codec::stats_key`.
    Stats,
}

/// One change in an atomic batch.
#[derive(Debug, Clone)]
pub(crate) enum Mutation {
    Put {
        space: Space,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        space: Space,
        key: Vec<u8>,
    },
}

/// Bytes the engine hands out: reference-counted (or inline when short),
/// so a scan yields its pairs without copying them.
pub(crate) type Bytes = fjall::Slice;

/// Key/value pairs in ascending key order.
pub(crate) type KvIter<'a> = Box<dyn Iterator<Item = Result<(Bytes, Bytes)>> + Send + 'a>;

/// What [`Engine::visit`] calls per pair: `(key, buffer, value's range in
/// the buffer)`; it returns whether the visit goes on.
pub(crate) type Visitor<'a> = dyn FnMut(&[u8], &ByteView, Range<usize>) -> Result<bool> + 'a;

/// When a write is acknowledged relative to the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// fsync (fdatasync) the journal before acknowledging; concurrent writers
    /// share one fsync (group commit). Survives power loss.
    #[default]
    Sync,
    /// Hand the journal to the OS before acknowledging. Survives a crash or
    /// `kill -9` of the process, not a power loss or kernel crash.
    Buffered,
}

/// An ordered, multi-keyspace key/value engine with atomic batches.
pub(crate) trait Engine: Send + Sync + std::fmt::Debug + 'static {
    /// Reads one key, as of one state of the engine: a batch being applied
    /// is seen wholly or not at all.
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Bytes>>;

    /// Iterates `[start, end)`-style bounded ranges in ascending key order,
    /// over one state of the engine (a snapshot taken when the scan
    /// starts): a batch applied meanwhile is not seen at all. The packed
    /// layer relies on it: a write that re-keys a chunk puts the new key
    /// and deletes the old one in one batch, and a scan that saw the
    /// delete but not the put would lose the chunk's entities.
    fn scan(&self, space: Space, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> KvIter<'_>;

    /// The pairs of [`Engine::scan`], handed to `f` as views instead of
    /// owned pairs: the key, and the value as a range of a buffer the
    /// engine shares (a chunk of many values, or the value alone). `f`
    /// returns whether to go on. A reference-counted slice per key and
    /// value cost a full scan more than decoding the columns it reads (see
    /// `codec::EncodedEntities`). The default walks [`Engine::scan`].
    fn visit(
        &self,
        space: Space,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
        f: &mut Visitor<'_>,
    ) -> Result<()> {
        for kv in self.scan(space, start, end) {
            let (k, v) = kv?;
            let v = ByteView::from(v);
            if !f(&k, &v, 0..v.len())? {
                break;
            }
        }
        Ok(())
    }

    /// The last pair of a range. The default walks the whole range forward;
    /// the engines override it with a reverse seek.
    fn last_in(
        &self,
        space: Space,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    ) -> Result<Option<(Bytes, Bytes)>> {
        let mut last = None;
        for kv in self.scan(space, start, end) {
            last = Some(kv?);
        }
        Ok(last)
    }

    /// Applies every mutation atomically, durably as configured, then returns
    /// (inside [`crate::deferring_sync`], before the fsync).
    fn apply(&self, batch: Vec<Mutation>) -> Result<()>;

    /// Makes every batch applied so far durable (the end of a
    /// [`crate::deferring_sync`] scope).
    fn sync(&self) -> Result<()> {
        Ok(())
    }

    /// Bytes on disk (0 for memory).
    fn disk_space(&self) -> u64;
}
