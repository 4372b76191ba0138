//! The bytes of the packed layout: chunk values, deltas, and the shape of
//! an entity key this layer relies on.
//!
//! A chunk holds consecutive entities of one partition (never two) and is
//! stored under the engine key of its *last* entity. So the chunk that
//! holds key `k`, if any does, is the first chunk at or after `k`, and a
//! scan walks chunks in key order. A chunk's value is `0xC1 ++ n × (key_len
//! u16 LE ++ value_len u32 LE ++ key ++ value) ++ n × offset u32 LE ++ n
//! u32 LE`: the offsets let a point read binary-search the chunk. Entities
//! keep their whole engine key in the chunk although the partition prefix
//! repeats (lz4 compresses it away on disk), so a scan hands out keys and
//! values alike as views into the chunk: no allocation or copy per entity.
//!
//! A delta is one entity's value outside its chunk, in a pair of its own:
//! under the entity's key and a 0x00 ([`delta_key`]), valued `0xD0 ++
//! value`.

use std::ops::Range;

use byteview::ByteView;

use crate::codec::TABLE_PREFIX_LEN;
use crate::engine::Bytes;
use crate::error::{Result, StoreError};

/// First byte of every chunk value.
pub(super) const MAGIC: u8 = 0xC1;
/// Bytes before each entry's key: its u16 key length and u32 value length.
const ENTRY_HEADER: usize = 6;
/// What an entry costs a chunk besides its key and value: the header and
/// its offset in the trailer.
pub(super) const ENTRY_OVERHEAD: usize = ENTRY_HEADER + 4;
/// First byte of a delta's value: the entity's value follows.
pub(super) const DELTA_PUT: u8 = 0xD0;

fn corrupt(what: &str) -> StoreError {
    StoreError::Corrupt(format!("entity chunk: {what}"))
}

/// Length of an entity key's partition prefix: table id, PartitionKey and
/// the 0x00 separator.
pub(super) fn prefix_len(key: &[u8]) -> Result<usize> {
    key.get(TABLE_PREFIX_LEN..)
        .and_then(|rest| rest.iter().position(|b| *b == 0))
        .map(|sep| TABLE_PREFIX_LEN + sep + 1)
        .ok_or_else(|| corrupt("an entity key without a partition prefix"))
}

/// The first key after partition `prefix` (which ends with the 0x00
/// separator): the prefix with 0x01 for its last byte.
pub(super) fn partition_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    *end.last_mut().expect("a prefix ends with its separator") = 1;
    end
}

/// The engine key of `key`'s delta: the key and a 0x00. Keys never hold
/// 0x00 after their separator (it is a forbidden key character), so no
/// entity key lies between an entity's key and its delta's: the delta
/// sorts right after its entity, before every later entity, and so before
/// the chunk that spans its entity, unless that chunk ends with it (which
/// the writes never allow: see `Packed::delta_route`).
pub(super) fn delta_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.extend_from_slice(key);
    k.push(0);
    k
}

/// Whether an engine value is a delta (else it is a chunk).
pub(super) fn is_delta(value: &[u8]) -> bool {
    value.first() == Some(&DELTA_PUT)
}

/// The entity key a delta's engine key is for.
pub(super) fn delta_entity(engine_key: &[u8]) -> Result<&[u8]> {
    match engine_key.split_last() {
        Some((0, key)) => Ok(key),
        _ => Err(corrupt("a delta whose key does not end with 0x00")),
    }
}

/// Where a delta's entity value lies in the delta's engine value.
pub(super) fn delta_value_at(value: &[u8]) -> Result<Range<usize>> {
    match value.first() {
        Some(&DELTA_PUT) => Ok(1..value.len()),
        _ => Err(corrupt("a damaged delta")),
    }
}

/// A delta's entity value.
pub(super) fn delta_value(value: &Bytes) -> Result<Bytes> {
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
pub(super) struct Entries<'a> {
    chunk: &'a [u8],
    pos: usize,
    /// Where the entries end and the offset trailer begins.
    end: usize,
}

impl<'a> Entries<'a> {
    pub(super) fn new(chunk: &'a [u8]) -> Result<Self> {
        let (end, _) = trailer(chunk)?;
        Ok(Entries { chunk, pos: 1, end })
    }
}

/// Where a chunk's entries end, and how many there are.
pub(super) fn trailer(chunk: &[u8]) -> Result<(usize, usize)> {
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

pub(super) type EntryAt = (Range<usize>, Range<usize>);

/// The entry starting at `pos`, which must end by `end`.
pub(super) fn entry_at(chunk: &[u8], pos: usize, end: usize) -> Result<EntryAt> {
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
pub(super) fn find(chunk: &[u8], key: &[u8]) -> Result<Option<Range<usize>>> {
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
pub(super) struct ChunkBuilder {
    bytes: Vec<u8>,
    offsets: Vec<u32>,
}

impl ChunkBuilder {
    pub(super) fn new() -> Self {
        ChunkBuilder {
            bytes: vec![MAGIC],
            offsets: Vec::new(),
        }
    }

    pub(super) fn push(&mut self, key: &[u8], value: &[u8]) -> Result<()> {
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

    pub(super) fn finish(mut self) -> Vec<u8> {
        for offset in &self.offsets {
            self.bytes.extend_from_slice(&offset.to_le_bytes());
        }
        let count = self.offsets.len() as u32;
        self.bytes.extend_from_slice(&count.to_le_bytes());
        self.bytes
    }
}

/// A view of part of a chunk (no copy).
pub(super) fn view(chunk: &Bytes, at: Range<usize>) -> Bytes {
    Bytes::from(ByteView::from(chunk.clone()).slice(at))
}

/// What a chunk says about `key`: `None` if it does not span it (its first
/// entity is after the key), else the key's value or its absence.
pub(super) fn spanning(chunk: &Bytes, key: &[u8]) -> Result<Option<Option<Bytes>>> {
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
