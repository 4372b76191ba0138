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
    let rest = key
        .get(TABLE_PREFIX_LEN..)
        .ok_or_else(|| StoreError::Corrupt("entity key shorter than its table prefix".into()))?;
    let sep = rest
        .iter()
        .position(|b| *b == 0)
        .ok_or_else(|| StoreError::Corrupt("entity key without key separator".into()))?;
    let pk = std::str::from_utf8(&rest[..sep])
        .map_err(|_| StoreError::Corrupt("PartitionKey is not UTF-8".into()))?;
    let rk = std::str::from_utf8(&rest[sep + 1..])
        .map_err(|_| StoreError::Corrupt("RowKey is not UTF-8".into()))?;
    Ok((pk, rk))
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

/// Encodes an entity's timestamp and properties (keys live in the key).
pub(crate) fn encode_value(timestamp: DateTime, props: &BTreeMap<String, Value>) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + props.len() * 24);
    out.push(VALUE_FORMAT_V1);
    out.extend_from_slice(&timestamp.0.to_be_bytes());
    out.extend_from_slice(&(props.len() as u16).to_be_bytes());
    for (name, v) in props {
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
    out
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.buf.len() < n {
            return Err(StoreError::Corrupt("entity value truncated".into()));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        Ok(self.take(N)?.try_into().expect("length checked"))
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16> {
        Ok(u16::from_be_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_be_bytes(self.array()?))
    }
    fn i64(&mut self) -> Result<i64> {
        Ok(i64::from_be_bytes(self.array()?))
    }
    fn str(&mut self, n: usize) -> Result<&'a str> {
        std::str::from_utf8(self.take(n)?)
            .map_err(|_| StoreError::Corrupt("stored string is not UTF-8".into()))
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
    let mut r = Reader { buf: value };
    if r.u8()? != VALUE_FORMAT_V1 {
        return Err(StoreError::Corrupt("unknown entity value format".into()));
    }
    let timestamp = DateTime(r.i64()?);
    let count = r.u16()?;
    let mut properties = BTreeMap::new();
    for _ in 0..count {
        let name_len = usize::from(r.u16()?);
        let name = r.str(name_len)?;
        let wanted = projection.is_none_or(|p| p.iter().any(|n| n == name));
        let tag = r.u8()?;
        let v = match tag {
            TAG_STRING => {
                let n = r.u32()? as usize;
                if !wanted {
                    r.take(n)?;
                    continue;
                }
                Value::String(r.str(n)?.to_owned())
            }
            TAG_INT32 => Value::Int32(i32::from_be_bytes(r.array()?)),
            TAG_INT64 => Value::Int64(r.i64()?),
            TAG_DOUBLE => Value::Double(f64::from_bits(u64::from_be_bytes(r.array()?))),
            TAG_BOOLEAN => Value::Boolean(r.u8()? != 0),
            TAG_DATETIME => Value::DateTime(DateTime(r.i64()?)),
            TAG_GUID => Value::Guid(r.array()?),
            TAG_BINARY => {
                let n = r.u32()? as usize;
                let b = r.take(n)?;
                if !wanted {
                    continue;
                }
                Value::Binary(b.to_vec())
            }
            other => return Err(StoreError::Corrupt(format!("unknown value tag {other}"))),
        };
        if wanted {
            properties.insert(name.to_owned(), v);
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

#[cfg(test)]
mod tests {
    use super::*;

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
