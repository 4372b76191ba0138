//! Byte encodings of keys and entities in the engine.
//!
//! **Keys.** An entity lives at `table_id (8 bytes, big-endian) ++ pk ++ 0x00
//! ++ rk`, with both keys in UTF-8. UTF-8 byte order is code-point order, and
//! U+0000 is a forbidden key character, so `0x00` never occurs inside a key:
//! byte order of encoded keys is exactly (table, PartitionKey, RowKey) ordinal
//! order with no escaping. A PartitionKey `p` owns the byte range
//! `[p ++ 0x00, p ++ 0x01)`.
//!
//! **Values.** `version (1) ++ timestamp (i64 BE) ++ count (u16) ++ count ×
//! (name_len u16 ++ name ++ tag u8 ++ payload)`. Decoding can skip properties
//! outside a projection without allocating them.

use std::collections::BTreeMap;

use byteview::ByteView;

use crate::entity::{DateTime, Entity, Value};
use crate::error::{Result, StoreError};

const VALUE_FORMAT_V1: u8 = 1;

/// Length of the table-id prefix of every entity key.
pub(crate) const TABLE_PREFIX_LEN: usize = 8;

/// The 8-byte prefix of every key of table `id`.
pub(crate) fn table_prefix(id: u64) -> [u8; TABLE_PREFIX_LEN] {
    id.to_be_bytes()
}

/// Engine key of entity (pk, rk) in table `id`.
pub(crate) fn entity_key(id: u64, pk: &str, rk: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(TABLE_PREFIX_LEN + pk.len() + 1 + rk.len());
    k.extend_from_slice(&table_prefix(id));
    k.extend_from_slice(pk.as_bytes());
    k.push(0);
    k.extend_from_slice(rk.as_bytes());
    k
}

/// First engine key of partition `pk` (inclusive).
pub(crate) fn partition_start(id: u64, pk: &str) -> Vec<u8> {
    entity_key(id, pk, "")
}

/// First engine key after every entity of partition `pk` (exclusive bound).
pub(crate) fn partition_end(id: u64, pk: &str) -> Vec<u8> {
    let mut k = partition_start(id, pk);
    *k.last_mut().expect("non-empty") = 1;
    k
}

/// Splits an engine key back into (pk, rk), after its table prefix.
pub(crate) fn split_entity_key(key: &[u8]) -> Result<(&str, &str)> {
    let (pk, rk) = split_entity_key_bytes(key)?;
    entity_key_strs(pk, rk)
}

/// The UTF-8 check of keys [`split_entity_key_bytes`] split.
pub(crate) fn entity_key_strs<'a>(pk: &'a [u8], rk: &'a [u8]) -> Result<(&'a str, &'a str)> {
    let pk = std::str::from_utf8(pk)
        .map_err(|_| StoreError::Corrupt("PartitionKey is not UTF-8".into()))?;
    let rk =
        std::str::from_utf8(rk).map_err(|_| StoreError::Corrupt("RowKey is not UTF-8".into()))?;
    Ok((pk, rk))
}

/// [`split_entity_key`] without the UTF-8 checks, for a scan that only
/// compares the keys: the store wrote them from strings, and
/// [`EncodedEntity`]'s accessors read a damaged key as empty.
pub(crate) fn split_entity_key_bytes(key: &[u8]) -> Result<(&[u8], &[u8])> {
    let rest = key
        .get(TABLE_PREFIX_LEN..)
        .ok_or_else(|| StoreError::Corrupt("entity key shorter than its table prefix".into()))?;
    let sep = rest
        .iter()
        .position(|b| *b == 0)
        .ok_or_else(|| StoreError::Corrupt("entity key without key separator".into()))?;
    Ok((&rest[..sep], &rest[sep + 1..]))
}

/// Statistics key of partition `pk` in table `id`.
pub(crate) fn stats_key(id: u64, pk: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(TABLE_PREFIX_LEN + pk.len());
    k.extend_from_slice(&table_prefix(id));
    k.extend_from_slice(pk.as_bytes());
    k
}

const TAG_STRING: u8 = 1;
const TAG_INT32: u8 = 2;
const TAG_INT64: u8 = 3;
const TAG_DOUBLE: u8 = 4;
const TAG_BOOLEAN: u8 = 5;
const TAG_DATETIME: u8 = 6;
const TAG_GUID: u8 = 7;
const TAG_BINARY: u8 = 8;

/// Bytes an entity takes in the store: its engine key plus its encoded
/// value, as [`entity_key`] and [`encode_properties`] lay them out (before
/// the engine's own compression). What the tables' byte statistics sum.
pub fn stored_len<'a>(
    partition_key: &str,
    row_key: &str,
    props: impl Iterator<Item = (&'a str, &'a Value)>,
) -> u64 {
    let key = TABLE_PREFIX_LEN + partition_key.len() + 1 + row_key.len();
    let value: usize = props
        .map(|(name, v)| {
            2 + name.len()
                + 1
                + match v {
                    Value::String(s) => 4 + s.len(),
                    Value::Binary(b) => 4 + b.len(),
                    Value::Int32(_) => 4,
                    Value::Int64(_) | Value::Double(_) | Value::DateTime(_) => 8,
                    Value::Boolean(_) => 1,
                    Value::Guid(_) => 16,
                }
        })
        .sum();
    (key + 1 + 8 + 2 + value) as u64
}

/// Encodes an entity's timestamp and properties (keys live in the key).
pub(crate) fn encode_value(timestamp: DateTime, props: &BTreeMap<String, Value>) -> Vec<u8> {
    encode_properties(timestamp, props.iter().map(|(k, v)| (k.as_str(), v)))
}

/// [`encode_value`] of properties given in name order by any iterator, so
/// a write's own properties are encoded where they are, without first
/// being copied into an entity. At most [`crate::limits::MAX_PROPERTIES`]
/// (checked before: the count is a u16).
pub(crate) fn encode_properties<'a>(
    timestamp: DateTime,
    props: impl Iterator<Item = (&'a str, &'a Value)>,
) -> Vec<u8> {
    let (lo, hi) = props.size_hint();
    let mut out = Vec::with_capacity(16 + hi.unwrap_or(lo) * 24);
    out.push(VALUE_FORMAT_V1);
    out.extend_from_slice(&timestamp.0.to_be_bytes());
    // The count, patched once the properties are written.
    let count_at = out.len();
    out.extend_from_slice(&0u16.to_be_bytes());
    let mut count: u16 = 0;
    for (name, v) in props {
        count += 1;
        out.extend_from_slice(&(name.len() as u16).to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        match v {
            Value::String(s) => {
                out.push(TAG_STRING);
                out.extend_from_slice(&(s.len() as u32).to_be_bytes());
                out.extend_from_slice(s.as_bytes());
            }
            Value::Int32(i) => {
                out.push(TAG_INT32);
                out.extend_from_slice(&i.to_be_bytes());
            }
            Value::Int64(i) => {
                out.push(TAG_INT64);
                out.extend_from_slice(&i.to_be_bytes());
            }
            Value::Double(d) => {
                out.push(TAG_DOUBLE);
                out.extend_from_slice(&d.to_bits().to_be_bytes());
            }
            Value::Boolean(b) => {
                out.push(TAG_BOOLEAN);
                out.push(u8::from(*b));
            }
            Value::DateTime(t) => {
                out.push(TAG_DATETIME);
                out.extend_from_slice(&t.0.to_be_bytes());
            }
            Value::Guid(g) => {
                out.push(TAG_GUID);
                out.extend_from_slice(g);
            }
            Value::Binary(b) => {
                out.push(TAG_BINARY);
                out.extend_from_slice(&(b.len() as u32).to_be_bytes());
                out.extend_from_slice(b);
            }
        }
    }
    out[count_at..count_at + 2].copy_from_slice(&count.to_be_bytes());
    out
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    #[inline]
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(StoreError::Corrupt("entity value truncated".into()));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    #[inline]
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("length checked"))
    }
    #[inline]
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    #[inline]
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    #[inline]
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    #[inline]
    fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array()?))
    }
}

/// A property value borrowed from an encoded entity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ValueRef<'a> {
    /// Edm.String.
    String(&'a str),
    /// Edm.Int32.
    Int32(i32),
    /// Edm.Int64.
    Int64(i64),
    /// Edm.Double.
    Double(f64),
    /// Edm.Boolean.
    Boolean(bool),
    /// Edm.DateTime.
    DateTime(DateTime),
    /// Edm.Guid.
    Guid([u8; 16]),
    /// Edm.Binary.
    Binary(&'a [u8]),
}

impl ValueRef<'_> {
    /// An owned copy.
    pub fn to_value(self) -> Value {
        match self {
            ValueRef::String(s) => Value::String(s.to_owned()),
            ValueRef::Int32(i) => Value::Int32(i),
            ValueRef::Int64(i) => Value::Int64(i),
            ValueRef::Double(d) => Value::Double(d),
            ValueRef::Boolean(b) => Value::Boolean(b),
            ValueRef::DateTime(t) => Value::DateTime(t),
            ValueRef::Guid(g) => Value::Guid(g),
            ValueRef::Binary(b) => Value::Binary(b.to_vec()),
        }
    }
}

impl Value {
    /// A borrowed view.
    pub fn as_value_ref(&self) -> ValueRef<'_> {
        match self {
            Value::String(s) => ValueRef::String(s),
            Value::Int32(i) => ValueRef::Int32(*i),
            Value::Int64(i) => ValueRef::Int64(*i),
            Value::Double(d) => ValueRef::Double(*d),
            Value::Boolean(b) => ValueRef::Boolean(*b),
            Value::DateTime(t) => ValueRef::DateTime(*t),
            Value::Guid(g) => ValueRef::Guid(*g),
            Value::Binary(b) => ValueRef::Binary(b),
        }
    }
}

/// The properties of an encoded value, in stored (name) order, borrowed.
pub(crate) struct Properties<'a> {
    r: Reader<'a>,
    left: u16,
}

/// Reads an encoded value's header: its timestamp and its properties.
#[inline]
pub(crate) fn open_value(value: &[u8]) -> Result<(DateTime, Properties<'_>)> {
    let mut r = Reader { buf: value };
    if r.u8()? != VALUE_FORMAT_V1 {
        return Err(StoreError::Corrupt("unknown entity value format".into()));
    }
    let timestamp = DateTime(r.i64()?);
    let left = r.u16()?;
    Ok((timestamp, Properties { r, left }))
}

impl<'a> Iterator for Properties<'a> {
    type Item = Result<RawProperty<'a>>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let item = self.read();
        if item.is_err() {
            self.left = 0;
        }
        Some(item)
    }
}

impl<'a> Properties<'a> {
    /// Frames one property: its name, tag and payload bytes. Nothing is
    /// checked beyond the framing, so skipping a property costs no more
    /// than reading its lengths.
    #[inline]
    fn read(&mut self) -> Result<RawProperty<'a>> {
        let r = &mut self.r;
        let name_len = usize::from(r.u16()?);
        let name = r.take(name_len)?;
        let tag = r.u8()?;
        let len = match tag {
            TAG_STRING | TAG_BINARY => r.u32()? as usize,
            TAG_INT32 => 4,
            TAG_INT64 | TAG_DOUBLE | TAG_DATETIME => 8,
            TAG_BOOLEAN => 1,
            TAG_GUID => 16,
            other => return Err(StoreError::Corrupt(format!("unknown value tag {other}"))),
        };
        let payload = r.take(len)?;
        Ok(RawProperty { name, tag, payload })
    }
}

/// One property of an encoded entity, framed but not decoded: a reader
/// that wants a few columns compares names as bytes and decodes (and
/// UTF-8-checks) only the values it keeps. A full scan that does not select
/// a table's 100-character text column skips that check for every row.
#[derive(Debug, Clone, Copy)]
pub struct RawProperty<'a> {
    name: &'a [u8],
    tag: u8,
    /// The payload's bytes, of the length its tag (or its own length
    /// prefix) says: checked when it was framed.
    payload: &'a [u8],
}

impl<'a> RawProperty<'a> {
    /// Whether the property is called `name`.
    #[inline]
    pub fn is_named(&self, name: &str) -> bool {
        self.name == name.as_bytes()
    }

    /// How the property's name orders against `name` (byte order, the order
    /// properties are stored in).
    #[inline]
    pub fn name_cmp(&self, name: &str) -> std::cmp::Ordering {
        let (a, b) = (self.name, name.as_bytes());
        // Column names are short, and a slice comparison calls memcmp,
        // which showed in a full scan's profile.
        if a.len() <= 16 && b.len() <= 16 {
            for (x, y) in a.iter().zip(b) {
                if x != y {
                    return x.cmp(y);
                }
            }
            return a.len().cmp(&b.len());
        }
        a.cmp(b)
    }

    /// The property's name.
    pub fn name(&self) -> Result<&'a str> {
        std::str::from_utf8(self.name)
            .map_err(|_| StoreError::Corrupt("stored property name is not UTF-8".into()))
    }

    /// The value, if the property is an Int32. A reader filling a column of
    /// one type asks for that type alone: the answer comes back in a
    /// register, where a [`ValueRef`] went through memory (and a full scan
    /// stalled reading it back).
    #[inline]
    pub fn int32(&self) -> Option<i32> {
        (self.tag == TAG_INT32).then(|| i32::from_be_bytes(self.fixed()))
    }

    /// The value, if the property is an Int64 (see [`RawProperty::int32`]).
    #[inline]
    pub fn int64(&self) -> Option<i64> {
        (self.tag == TAG_INT64).then(|| i64::from_be_bytes(self.fixed()))
    }

    /// The value, if the property is a Double (see [`RawProperty::int32`]).
    #[inline]
    pub fn double(&self) -> Option<f64> {
        (self.tag == TAG_DOUBLE).then(|| f64::from_bits(u64::from_be_bytes(self.fixed())))
    }

    /// The payload of a fixed-width value, whose length its tag fixed when
    /// it was framed.
    #[inline]
    fn fixed<const N: usize>(&self) -> [u8; N] {
        self.payload.try_into().expect("framed to its tag's width")
    }

    /// The property's value.
    #[inline]
    pub fn value(&self) -> Result<ValueRef<'a>> {
        let p = self.payload;
        Ok(match self.tag {
            TAG_STRING => ValueRef::String(
                std::str::from_utf8(p)
                    .map_err(|_| StoreError::Corrupt("stored string is not UTF-8".into()))?,
            ),
            TAG_INT32 => ValueRef::Int32(i32::from_be_bytes(self.fixed())),
            TAG_INT64 => ValueRef::Int64(i64::from_be_bytes(self.fixed())),
            TAG_DOUBLE => ValueRef::Double(f64::from_bits(u64::from_be_bytes(self.fixed()))),
            TAG_BOOLEAN => ValueRef::Boolean(p[0] != 0),
            TAG_DATETIME => ValueRef::DateTime(DateTime(i64::from_be_bytes(self.fixed()))),
            TAG_GUID => ValueRef::Guid(self.fixed()),
            TAG_BINARY => ValueRef::Binary(p),
            other => return Err(StoreError::Corrupt(format!("unknown value tag {other}"))),
        })
    }
}

/// Decodes a stored entity. With a projection, only the named properties are
/// materialised; the others are skipped without allocating.
pub(crate) fn decode_entity(
    pk: &str,
    rk: &str,
    value: &[u8],
    projection: Option<&[String]>,
) -> Result<Entity> {
    let (timestamp, props) = open_value(value)?;
    let mut properties = BTreeMap::new();
    for p in props {
        let p = p?;
        if projection.is_none_or(|names| names.iter().any(|n| p.is_named(n))) {
            properties.insert(p.name()?.to_owned(), p.value()?.to_value());
        }
    }
    Ok(Entity {
        partition_key: pk.to_owned(),
        row_key: rk.to_owned(),
        timestamp,
        etag: None,
        properties,
    })
}

/// A page's entities as the engine stores them, handed out without
/// decoding: a reader that builds columns (the native path's record
/// batches) takes the keys and the properties it needs as borrowed values,
/// and skips the owned [`Entity`] (two key strings, a map, a string per
/// property).
///
/// **Why an arena.** Keys and values stay where the engine keeps them (a
/// chunk holds ~50 entities, each key right before its value): the page
/// holds each buffer once, and per entity only where its key and value
/// lie. Holding each entity's key and value as reference-counted slices
/// cost two slices, a drop each and the stalls of moving them around: a
/// full scan spent more on that than on decoding the two columns it read.
/// A key that lies outside its value's buffer (a delta's) is copied.
#[derive(Debug, Clone, Default)]
pub struct EncodedEntities {
    /// The buffers keys and values are views into, each held once.
    buffers: Vec<ByteView>,
    /// Keys that do not lie in their value's buffer, back to back.
    copied_keys: Vec<u8>,
    entries: Vec<EncodedAt>,
}

/// Where one entity of an [`EncodedEntities`] lies. An engine key is at
/// most ~3 KiB (two keys of 512 UTF-16 units) and a value 1 MiB
/// (`limits.rs`), and a page holds at most 1,000 entities: the offsets fit.
#[derive(Debug, Clone, Copy)]
struct EncodedAt {
    buffer: u32,
    value_at: u32,
    value_len: u32,
    /// Where the key starts: in the buffer, or in `copied_keys`.
    key_at: u32,
    key_len: u16,
    /// Length of the PartitionKey (it starts after the table prefix).
    pk_len: u16,
    key_copied: bool,
}

impl EncodedEntities {
    /// Appends an entity: its engine key, whose PartitionKey is `pk_len`
    /// bytes long ([`split_entity_key_bytes`]), and its value, at `value` in
    /// `buffer`. A buffer that is the last one appended (the same chunk) is
    /// not held again.
    pub(crate) fn push(
        &mut self,
        key: &[u8],
        pk_len: usize,
        buffer: &ByteView,
        value: std::ops::Range<usize>,
    ) {
        let same = self
            .buffers
            .last()
            .is_some_and(|b| b.as_ptr() == buffer.as_ptr() && b.len() == buffer.len());
        if !same {
            self.buffers.push(buffer.clone());
        }
        // Whether the key is a view into the same buffer, by address.
        let base = buffer.as_ptr() as usize;
        let at = key.as_ptr() as usize;
        let (key_at, key_copied) = if at >= base && at + key.len() <= base + buffer.len() {
            (at - base, false)
        } else {
            let copied_at = self.copied_keys.len();
            self.copied_keys.extend_from_slice(key);
            (copied_at, true)
        };
        self.entries.push(EncodedAt {
            buffer: (self.buffers.len() - 1) as u32,
            value_at: value.start as u32,
            value_len: value.len() as u32,
            key_at: key_at as u32,
            key_len: key.len() as u16,
            pk_len: pk_len as u16,
            key_copied,
        });
    }

    /// Entities held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entity is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `i`th entity (panics past the end, like a slice).
    #[inline]
    pub fn get(&self, i: usize) -> EncodedEntity<'_> {
        let at = self.entries[i];
        let buffer = &self.buffers[at.buffer as usize][..];
        let key = at.key_at as usize..at.key_at as usize + at.key_len as usize;
        let value_at = at.value_at as usize;
        EncodedEntity {
            key: if at.key_copied {
                &self.copied_keys[key]
            } else {
                &buffer[key]
            },
            value: &buffer[value_at..value_at + at.value_len as usize],
            pk_len: at.pk_len as usize,
        }
    }

    /// The entities of `range`, in order.
    pub fn slice(
        &self,
        range: std::ops::Range<usize>,
    ) -> impl ExactSizeIterator<Item = EncodedEntity<'_>> {
        range.map(|i| self.get(i))
    }

    /// Keeps the first `n` entities.
    pub fn truncate(&mut self, n: usize) {
        self.entries.truncate(n);
    }

    /// Every entity, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = EncodedEntity<'_>> {
        self.slice(0..self.len())
    }
}

/// Pages are equal when they hold the same entities, wherever the bytes lie.
impl PartialEq for EncodedEntities {
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.iter().eq(other.iter())
    }
}

/// One entity of [`EncodedEntities`], borrowed from its page.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EncodedEntity<'a> {
    key: &'a [u8],
    value: &'a [u8],
    /// Length of the PartitionKey (it starts after the table prefix).
    pk_len: usize,
}

impl<'a> EncodedEntity<'a> {
    /// PartitionKey.
    #[inline]
    pub fn partition_key(&self) -> &'a str {
        let k = &self.key[TABLE_PREFIX_LEN..TABLE_PREFIX_LEN + self.pk_len];
        // The store writes keys from strings; a page of undecoded entities
        // does not check each one (a cost a full scan that reads no key
        // would pay per entity), so a damaged key reads as empty here.
        std::str::from_utf8(k).unwrap_or_default()
    }

    /// RowKey.
    #[inline]
    pub fn row_key(&self) -> &'a str {
        let k = &self.key[TABLE_PREFIX_LEN + self.pk_len + 1..];
        std::str::from_utf8(k).unwrap_or_default()
    }

    /// The Timestamp and the properties in name order, borrowed and not yet
    /// decoded.
    #[inline]
    pub fn open(
        &self,
    ) -> Result<(
        DateTime,
        impl Iterator<Item = Result<RawProperty<'a>>> + use<'a>,
    )> {
        open_value(self.value)
    }

    /// The owned entity.
    pub fn decode(&self) -> Result<Entity> {
        decode_entity(self.partition_key(), self.row_key(), self.value, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_len_is_the_encoded_key_and_value() {
        let props: BTreeMap<String, Value> = [
            ("s".to_owned(), Value::String("héllo".into())),
            ("i".to_owned(), Value::Int32(-7)),
            ("l".to_owned(), Value::Int64(1 << 40)),
            ("d".to_owned(), Value::Double(0.5)),
            ("b".to_owned(), Value::Boolean(true)),
            ("t".to_owned(), Value::DateTime(DateTime(12))),
            ("g".to_owned(), Value::Guid([7; 16])),
            ("bin".to_owned(), Value::Binary(vec![1, 2, 3])),
        ]
        .into_iter()
        .collect();
        let (pk, rk) = ("pärt", "row");
        let encoded = entity_key(3, pk, rk).len() + encode_value(DateTime(1), &props).len();
        let props = props.iter().map(|(k, v)| (k.as_str(), v));
        assert_eq!(stored_len(pk, rk, props), encoded as u64);
        assert_eq!(
            stored_len("", "", std::iter::empty()),
            (entity_key(1, "", "").len() + encode_value(DateTime(1), &BTreeMap::new()).len())
                as u64
        );
    }

    #[test]
    fn key_byte_order_is_ordinal_key_order() {
        // "111" < "2" ordinally; a PartitionKey that is a prefix of another
        // sorts before it whatever the RowKeys are.
        let keys = [
            entity_key(1, "", ""),
            entity_key(1, "", "z"),
            entity_key(1, "111", "zzz"),
            entity_key(1, "2", ""),
            entity_key(1, "a", "\u{10FFFF}"),
            entity_key(1, "a\u{1}", ""),
            entity_key(1, "ab", ""),
            entity_key(1, "é", ""),
            entity_key(2, "", ""),
        ];
        for w in keys.windows(2) {
            assert!(w[0] < w[1], "{:?} !< {:?}", w[0], w[1]);
        }
        assert!(partition_end(1, "a") <= entity_key(1, "a\u{1}", ""));
        assert!(partition_end(1, "a") > entity_key(1, "a", "\u{10FFFF}"));
    }

    /// The short-name comparison orders as the bytes do.
    #[test]
    fn name_cmp_is_byte_order() {
        let names = [
            "",
            "a",
            "ab",
            "b",
            "aa",
            "é",
            "z",
            "abcdefghijklmnop",
            "abcdefghijklmnopq",
            "abcdefghijklmnoq",
            "abcdefghijklmnopqr",
        ];
        for stored in names {
            let props = BTreeMap::from([(stored.to_owned(), Value::Int32(1))]);
            let bytes = encode_value(DateTime(0), &props);
            let (_, mut it) = open_value(&bytes).unwrap();
            let p = it.next().unwrap().unwrap();
            for other in names {
                assert_eq!(
                    p.name_cmp(other),
                    stored.as_bytes().cmp(other.as_bytes()),
                    "{stored:?} vs {other:?}"
                );
            }
        }
    }

    #[test]
    fn value_round_trip_and_projection() {
        let mut props = BTreeMap::new();
        props.insert("s".to_owned(), Value::String("héllo".into()));
        props.insert("i".to_owned(), Value::Int32(-7));
        props.insert("l".to_owned(), Value::Int64(i64::MIN));
        props.insert("d".to_owned(), Value::Double(f64::NEG_INFINITY));
        props.insert("b".to_owned(), Value::Boolean(true));
        props.insert("t".to_owned(), Value::DateTime(DateTime::MIN));
        props.insert("g".to_owned(), Value::Guid([7; 16]));
        props.insert("x".to_owned(), Value::Binary(vec![0, 1, 2]));
        let bytes = encode_value(DateTime(42), &props);
        let e = decode_entity("p", "r", &bytes, None).unwrap();
        assert_eq!(e.properties, props);
        assert_eq!(e.timestamp, DateTime(42));
        let proj = ["x".to_owned(), "i".to_owned()];
        let e = decode_entity("p", "r", &bytes, Some(&proj)).unwrap();
        assert_eq!(e.properties.len(), 2);
        assert_eq!(e.properties["x"], Value::Binary(vec![0, 1, 2]));
        assert!(decode_entity("p", "r", &bytes[..bytes.len() - 1], None).is_err());
    }
}
