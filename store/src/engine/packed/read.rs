//! Reads of the entities keyspace: point reads through the
//! [`index`](super::index), and scans that merge the chunks' entries with
//! the deltas.
//!
//! A delta's key sorts right after its entity's, so before the chunk that
//! spans the entity, and a scan merges the two in one pass of the engine
//! (one snapshot); a delta replaces its entity's entry. A point read asks
//! the index whether a delta exists and then fetches it (one engine get
//! more), else fetches the chunk the index names; when the engine
//! disagrees with the index (a write behind or ahead), a seek answers.

use std::collections::VecDeque;
use std::ops::Bound;

use byteview::ByteView;

use super::Packed;
use super::layout::{
    EntryAt, delta_entity, delta_key, delta_value, delta_value_at, entry_at, find, is_delta,
    prefix_len, spanning, trailer, view,
};
use crate::engine::{Bytes, KvIter, Space, Visitor};
use crate::error::Result;

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

impl Packed {
    /// [`Engine::get`](crate::engine::Engine::get) of an entity.
    pub(super) fn get_entity(&self, key: &[u8]) -> Result<Option<Bytes>> {
        let space = Space::Entities;
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

    /// The entities of `[start, end)`: the chunks' entries merged with the
    /// deltas.
    pub(super) fn unpack(&self, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> Unpack<'_> {
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
}

/// A scan of the entities keyspace, entity by entity: the chunks' entries
/// merged with the deltas. The engine yields each delta before the chunk
/// that spans its entity, so deltas wait in order until that chunk comes,
/// or until the engine has moved past their partition (a chunk never
/// spans two), and a delta replaces its entity's entry.
pub(super) struct Unpack<'a> {
    chunks: KvIter<'a>,
    /// Entities at the start of a chunk up to here were yielded already or
    /// lie before the scan's start: the start, then the previous chunk's
    /// key.
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

    /// [`Engine::visit`](crate::engine::Engine::visit) over this merge:
    /// each entity as a view into its chunk (or its delta), with no slice
    /// taken.
    pub(super) fn visit(&mut self, f: &mut Visitor<'_>) -> Result<()> {
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
