//! An in-memory engine: one `BTreeMap` per [`Space`] behind a lock.
//!
//! Used by tests (fast, and a second implementation of the same trait that
//! the property tests compare against fjall) and by throwaway stores. Scans
//! copy a bounded chunk of pairs under the read lock and re-seek for the
//! next chunk, so a long scan never blocks writers for long.

use std::collections::BTreeMap;
use std::ops::Bound;

use parking_lot::RwLock;

use super::{Bytes, Engine, KvIter, Mutation, Space};
use crate::error::Result;

type Map = BTreeMap<Vec<u8>, Vec<u8>>;

/// A BTreeMap behind the [`Engine`] trait.
#[derive(Debug, Default)]
pub(crate) struct MemoryEngine {
    spaces: RwLock<[Map; 3]>,
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
        let mut next_start = start;
        let mut buffer = std::collections::VecDeque::new();
        let mut done = false;
        Box::new(std::iter::from_fn(move || {
            if buffer.is_empty() && !done {
                let spaces = self.spaces.read();
                let map = &spaces[index(space)];
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
            match m {
                Mutation::Put { space, key, value } => {
                    spaces[index(space)].insert(key, value);
                }
                Mutation::Delete { space, key } => {
                    spaces[index(space)].remove(&key);
                }
            }
        }
        Ok(())
    }

    fn disk_space(&self) -> u64 {
        0
    }
}
