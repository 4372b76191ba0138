//! An in-memory engine: one `BTreeMap` per [`Space`] behind a lock.
//!
//! Used by tests (fast, and a second implementation of the same trait that
//! the property tests compare against fjall) and by throwaway stores. A
//! scan holds a snapshot of its keyspace (an `Arc` of the map, which a
//! write then copies before changing), so a long scan never blocks
//! writers and never sees a batch applied after it started.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use parking_lot::RwLock;

use super::{Bytes, Engine, KvIter, Mutation, Space};
use crate::error::Result;

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// A BTreeMap behind the [`Engine`] trait.
#[derive(Debug, Default)]
pub(crate) struct MemoryEngine {
    spaces: RwLock<[Arc<Map>; 3]>,
}

fn index(space: Space) -> usize {
    match space {
        Space::Entities => 0,
        Space::Meta => 1,
        Space::Stats => 2,
    }
}

const SCAN_CHUNK: usize = 256;

/// Whether a range is empty by its bounds. BTreeMap::range panics on an
/// inverted or empty-excluded range, where fjall yields nothing; the
/// engines must agree.
pub(crate) fn empty_range(start: &Bound<Vec<u8>>, end: &Bound<Vec<u8>>) -> bool {
    match (start, end) {
        (Bound::Included(s), Bound::Included(e)) => s > e,
        (Bound::Included(s) | Bound::Excluded(s), Bound::Excluded(e))
        | (Bound::Excluded(s), Bound::Included(e)) => s >= e,
        _ => false,
    }
}

impl Engine for MemoryEngine {
    fn get(&self, space: Space, key: &[u8]) -> Result<Option<Bytes>> {
        Ok(self.spaces.read()[index(space)]
            .get(key)
            .map(|v| Bytes::from(v.as_slice())))
    }

    fn scan(&self, space: Space, start: Bound<Vec<u8>>, end: Bound<Vec<u8>>) -> KvIter<'_> {
        if empty_range(&start, &end) {
            return Box::new(std::iter::empty());
        }
        let map = Arc::clone(&self.spaces.read()[index(space)]);
        let mut next_start = start;
        let mut buffer = std::collections::VecDeque::new();
        let mut done = false;
        // Copied a bounded chunk at a time, as the caller reads on.
        Box::new(std::iter::from_fn(move || {
            if buffer.is_empty() && !done {
                buffer.extend(
                    map.range((next_start.clone(), end.clone()))
                        .take(SCAN_CHUNK)
                        .map(|(k, v)| (k.clone(), v.clone())),
                );
                done = buffer.len() < SCAN_CHUNK;
                if let Some((k, _)) = buffer.back() {
                    next_start = Bound::Excluded(k.clone());
                }
            }
            buffer
                .pop_front()
                .map(|(k, v)| Ok((Bytes::from(k), Bytes::from(v))))
        }))
    }

    fn last_in(
        &self,
        space: Space,
        start: Bound<Vec<u8>>,
        end: Bound<Vec<u8>>,
    ) -> Result<Option<(Bytes, Bytes)>> {
        if empty_range(&start, &end) {
            return Ok(None);
        }
        let spaces = self.spaces.read();
        Ok(spaces[index(space)]
            .range((start, end))
            .next_back()
            .map(|(k, v)| (Bytes::from(k.as_slice()), Bytes::from(v.as_slice()))))
    }

    fn apply(&self, batch: Vec<Mutation>) -> Result<()> {
        let mut spaces = self.spaces.write();
        for m in batch {
            // Copies the map only while a scan holds it.
            match m {
                Mutation::Put { space, key, value } => {
                    Arc::make_mut(&mut spaces[index(space)]).insert(key, value);
                }
                Mutation::Delete { space, key } => {
                    Arc::make_mut(&mut spaces[index(space)]).remove(&key);
                }
            }
        }
        Ok(())
    }

    fn disk_space(&self) -> u64 {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A batch applied while a scan is under way is not seen by it, not
    /// even by the part of it that the scan copies after the batch.
    #[test]
    fn a_scan_never_sees_a_batch_applied_after_it_started() {
        let engine = MemoryEngine::default();
        let key = |i: usize| format!("k{i:04}").into_bytes();
        let put = |i: usize, v: &[u8]| Mutation::Put {
            space: Space::Entities,
            key: key(i),
            value: v.to_vec(),
        };
        let n = 3 * SCAN_CHUNK;
        engine
            .apply((0..n).map(|i| put(i, b"old")).collect())
            .unwrap();
        let mut scan = engine.scan(Space::Entities, Bound::Unbounded, Bound::Unbounded);
        let first = scan.next().unwrap().unwrap();
        engine
            .apply(vec![put(0, b"new"), put(n - 1, b"new")])
            .unwrap();
        let rest: Vec<_> = scan.map(Result::unwrap).collect();
        assert_eq!(&first.1[..], b"old");
        assert_eq!(rest.len(), n - 1);
        assert!(
            rest.iter().all(|(_, v)| &v[..] == b"old"),
            "half a batch seen"
        );
        // The batch is there for the next scan.
        let again: Vec<_> = engine
            .scan(Space::Entities, Bound::Unbounded, Bound::Unbounded)
            .map(Result::unwrap)
            .collect();
        assert_eq!(&again[0].1[..], b"new");
        assert_eq!(&again[n - 1].1[..], b"new");
    }
}
