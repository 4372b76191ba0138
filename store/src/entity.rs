//! Entities, typed property values (the EDM types), Timestamps and ETags.
//!
//! An [`Entity`] is what the store returns: keys, the store-assigned
//! Timestamp, and only the non-NULL properties (a NULL property is not
//! stored). An [`EntityWrite`] is what callers send: keys and properties that
//! may be NULL, which for Merge means "remove this property" (a deliberate
//! extension over Azure Tables so that SQL `SET col = NULL` has a meaning).

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::fmt;

use crate::limits;

/// The Entity Data Model types a property can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EdmType {
    /// UTF-8 text, at most 64 KiB as UTF-16.
    String,
    /// 32-bit signed integer.
    Int32,
    /// 64-bit signed integer.
    Int64,
    /// IEEE 754 double, NaN and ±Infinity allowed.
    Double,
    /// true / false.
    Boolean,
    /// UTC instant, microsecond precision, 1601-01-01 to 9999-12-31.
    DateTime,
    /// 128-bit GUID.
    Guid,
    /// Bytes, at most 64 KiB.
    Binary,
}

impl EdmType {
    /// The `Edm.*` name used in Azure Tables documentation and wire formats.
    pub fn name(self) -> &'static str {
        match self {
            EdmType::String => "Edm.String",
            EdmType::Int32 => "Edm.Int32",
            EdmType::Int64 => "Edm.Int64",
            EdmType::Double => "Edm.Double",
            EdmType::Boolean => "Edm.Boolean",
            EdmType::DateTime => "Edm.DateTime",
            EdmType::Guid => "Edm.Guid",
            EdmType::Binary => "Edm.Binary",
        }
    }
}

/// A UTC instant in microseconds since 1970-01-01T00:00:00Z.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DateTime(pub i64);

impl DateTime {
    /// 1601-01-01T00:00:00Z, the earliest EDM DateTime.
    pub const MIN: DateTime = DateTime(-11_644_473_600_000_000);
    /// 9999-12-31T23:59:59.999999Z, the latest EDM DateTime.
    pub const MAX: DateTime = DateTime(253_402_300_799_999_999);

    /// Microseconds since the Unix epoch.
    pub fn micros(self) -> i64 {
        self.0
    }

    /// True when inside the EDM range.
    pub fn in_range(self) -> bool {
        (Self::MIN..=Self::MAX).contains(&self)
    }
}

impl fmt::Display for DateTime {
    /// RFC 3339 with microseconds, e.g. `2026-11-22T08:44:18.123456Z`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match chrono::DateTime::from_timestamp_micros(self.0) {
            Some(t) => write!(f, "{}", t.format("%Y-%m-%dT%H:%M:%S%.6fZ")),
            None => write!(f, "{}µs", self.0),
        }
    }
}

/// A typed, non-NULL property value.
#[derive(Debug, Clone)]
pub enum Value {
    /// Edm.String.
    String(String),
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
    /// Edm.Guid, as its 16 bytes in RFC 4122 order.
    Guid([u8; 16]),
    /// Edm.Binary.
    Binary(Vec<u8>),
}

impl Value {
    /// The value's EDM type.
    pub fn edm_type(&self) -> EdmType {
        match self {
            Value::String(_) => EdmType::String,
            Value::Int32(_) => EdmType::Int32,
            Value::Int64(_) => EdmType::Int64,
            Value::Double(_) => EdmType::Double,
            Value::Boolean(_) => EdmType::Boolean,
            Value::DateTime(_) => EdmType::DateTime,
            Value::Guid(_) => EdmType::Guid,
            Value::Binary(_) => EdmType::Binary,
        }
    }

    /// Bytes this value counts for in the entity size formula.
    pub fn size_in_formula(&self) -> usize {
        match self {
            Value::String(s) => 2 * utf16_len(s) + 4,
            Value::DateTime(_) => 8,
            Value::Guid(_) => 16,
            Value::Double(_) => 8,
            Value::Int32(_) => 4,
            Value::Int64(_) => 8,
            Value::Boolean(_) => 1,
            Value::Binary(b) => b.len() + 4,
        }
    }

    /// SQL-style comparison: numbers compare across Int32/Int64/Double,
    /// other types only with themselves; `None` when the types cannot be
    /// compared. Doubles follow PostgreSQL: NaN equals NaN and sorts above
    /// every other number.
    pub fn sql_cmp(&self, other: &Value) -> Option<Ordering> {
        use Value::*;
        match (self, other) {
            (String(a), String(b)) => Some(a.cmp(b)),
            (Boolean(a), Boolean(b)) => Some(a.cmp(b)),
            (DateTime(a), DateTime(b)) => Some(a.cmp(b)),
            (Guid(a), Guid(b)) => Some(a.cmp(b)),
            (Binary(a), Binary(b)) => Some(a.cmp(b)),
            (Int32(a), Int32(b)) => Some(a.cmp(b)),
            (Int64(a), Int64(b)) => Some(a.cmp(b)),
            (Int32(a), Int64(b)) => Some(i64::from(*a).cmp(b)),
            (Int64(a), Int32(b)) => Some(a.cmp(&i64::from(*b))),
            (Double(a), Double(b)) => Some(pg_float_cmp(*a, *b)),
            (Double(a), Int32(b)) => Some(pg_float_cmp(*a, f64::from(*b))),
            (Int32(a), Double(b)) => Some(pg_float_cmp(f64::from(*a), *b)),
            (Double(a), Int64(b)) => Some(cmp_f64_i64(*a, *b)),
            (Int64(a), Double(b)) => Some(cmp_f64_i64(*b, *a).reverse()),
            _ => None,
        }
    }
}

/// Equality is type-exact (an Int32 1 is not an Int64 1) and total on
/// doubles (NaN equals NaN), so stored entities compare reliably in tests.
impl PartialEq for Value {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Value::Double(a), Value::Double(b)) => a.to_bits() == b.to_bits() || a == b,
            (a, b) => a.edm_type() == b.edm_type() && a.sql_cmp(b) == Some(Ordering::Equal),
        }
    }
}

fn pg_float_cmp(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Compares a double with an i64 exactly (i64 does not fit in f64).
fn cmp_f64_i64(a: f64, b: i64) -> Ordering {
    if a.is_nan() {
        return Ordering::Greater;
    }
    // 2^63 as f64 is exact; every i64 is strictly below it.
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if a >= TWO_63 {
        return Ordering::Greater;
    }
    if a < -TWO_63 {
        return Ordering::Less;
    }
    let t = a.trunc();
    let ti = t as i64; // exact: |t| < 2^63
    match ti.cmp(&b) {
        Ordering::Equal => pg_float_cmp(a - t, 0.0),
        o => o,
    }
}

/// A GUID in its canonical text form (`8-4-4-4-12` lower-case hex).
pub fn guid_text(g: &[u8; 16]) -> String {
    uuid::Uuid::from_bytes(*g).hyphenated().to_string()
}

/// Length of `s` in UTF-16 code units, the unit Azure limits are stated in.
///
/// Counted from the UTF-8 bytes: one unit per character (every byte that
/// is not a continuation byte) and a second one per character outside the
/// BMP (4-byte sequences, lead byte `0xF0..`). Decoding character by
/// character showed in a COPY's profile (the size formula runs several
/// times per row); this loop vectorizes. ASCII text, the common case, is
/// one unit per byte, and `is_ascii` checks it a word at a time, faster
/// than the loop, which widens every byte to a `usize` to sum it.
pub fn utf16_len(s: &str) -> usize {
    if s.is_ascii() {
        return s.len();
    }
    s.bytes()
        .map(|b| usize::from(b & 0xC0 != 0x80) + usize::from(b >= 0xF0))
        .sum()
}

/// The store-assigned last-modified time of an entity.
pub type Timestamp = DateTime;

/// An entity version tag, derived from the Timestamp. Opaque to callers; `*`
/// in an [`IfMatch`] matches any existing entity.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ETag(pub String);

impl ETag {
    /// The ETag of an entity written at `ts`.
    pub fn from_timestamp(ts: Timestamp) -> ETag {
        ETag(format!("W/\"datetime'{ts}'\""))
    }

    /// The tag as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ETag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A precondition on the current version of an entity.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IfMatch {
    /// `*`: the entity must exist, any version.
    Any,
    /// The entity must exist with exactly this ETag.
    ETag(ETag),
}

/// A stored entity as the store returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct Entity {
    /// PartitionKey.
    pub partition_key: String,
    /// RowKey.
    pub row_key: String,
    /// Set by the store on every write; strictly increasing per entity.
    pub timestamp: Timestamp,
    /// The version tag as a remote service issued it (Azure's ETags carry
    /// 100 ns ticks, finer than [`Timestamp`]); `None` where the ETag is
    /// derived from the Timestamp (the embedded engine).
    pub etag: Option<ETag>,
    /// Non-NULL properties by name.
    pub properties: BTreeMap<String, Value>,
}

impl Entity {
    /// The entity's ETag.
    pub fn etag(&self) -> ETag {
        match &self.etag {
            Some(t) => t.clone(),
            None => ETag::from_timestamp(self.timestamp),
        }
    }

    /// Size by the documented formula:
    /// `4 + 2·len(PK+RK) + Σ(8 + 2·len(name) + value)`.
    pub fn size_in_formula(&self) -> usize {
        entity_size(
            &self.partition_key,
            &self.row_key,
            self.properties.iter().map(|(k, v)| (k.as_str(), v)),
        )
    }
}

/// An entity as a caller writes it. Properties may be `None` (SQL NULL):
/// not stored by Insert/Replace, removed by Merge.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EntityWrite {
    /// PartitionKey.
    pub partition_key: String,
    /// RowKey.
    pub row_key: String,
    /// Properties by name; `None` is NULL.
    pub properties: BTreeMap<String, Option<Value>>,
}

impl EntityWrite {
    /// A write with the given keys and no properties.
    pub fn new(partition_key: impl Into<String>, row_key: impl Into<String>) -> Self {
        EntityWrite {
            partition_key: partition_key.into(),
            row_key: row_key.into(),
            properties: BTreeMap::new(),
        }
    }

    /// Adds a non-NULL property.
    #[must_use]
    pub fn with(mut self, name: impl Into<String>, value: Value) -> Self {
        self.properties.insert(name.into(), Some(value));
        self
    }

    /// Adds a NULL property.
    #[must_use]
    pub fn with_null(mut self, name: impl Into<String>) -> Self {
        self.properties.insert(name.into(), None);
        self
    }

    /// Checks keys, property names and value limits (not the entity total,
    /// which depends on what Merge keeps; see [`limits::check_entity`]).
    pub fn validate(&self) -> crate::Result<()> {
        limits::check_key(crate::KeyKind::PartitionKey, &self.partition_key)?;
        limits::check_key(crate::KeyKind::RowKey, &self.row_key)?;
        for (name, value) in &self.properties {
            limits::check_property_name(name)?;
            if let Some(v) = value {
                limits::check_value(name, v)?;
            }
        }
        Ok(())
    }

    /// Size by the formula, counting only non-NULL properties.
    pub fn size_in_formula(&self) -> usize {
        write_size(&self.partition_key, &self.row_key, &self.properties)
    }

    /// The non-NULL properties, by reference, in name order: what an
    /// Insert or Replace stores.
    pub fn non_null(&self) -> impl Iterator<Item = (&str, &Value)> + Clone {
        non_null(&self.properties)
    }
}

/// The non-NULL ones of a write's properties, by reference.
fn non_null(
    properties: &BTreeMap<String, Option<Value>>,
) -> impl Iterator<Item = (&str, &Value)> + Clone {
    properties
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| (k.as_str(), v)))
}

/// The size by the formula of a write with these keys and properties
/// (non-NULL ones count), without building an [`EntityWrite`].
pub fn write_size(pk: &str, rk: &str, properties: &BTreeMap<String, Option<Value>>) -> usize {
    entity_size(pk, rk, non_null(properties))
}

/// The documented entity size formula over any set of properties.
pub(crate) fn entity_size<'a>(
    pk: &str,
    rk: &str,
    props: impl Iterator<Item = (&'a str, &'a Value)>,
) -> usize {
    4 + 2 * (utf16_len(pk) + utf16_len(rk))
        + props
            .map(|(name, v)| 8 + 2 * utf16_len(name) + v.size_in_formula())
            .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf16_length_counts_code_units() {
        for s in [
            "",
            "abc",
            "é",
            "日本",
            "a😀b",
            "😀😀",
            "\u{7f}\u{80}\u{7ff}\u{800}\u{ffff}\u{10000}",
            // Long enough for word-at-a-time checks, non-ASCII at the end.
            "abcdefghijklmnopqrstuvwxyz0123456789é",
            "abcdefghijklmnopqrstuvwxyz0123456789",
        ] {
            assert_eq!(utf16_len(s), s.encode_utf16().count(), "{s:?}");
        }
    }

    #[test]
    fn numeric_comparison_crosses_types_exactly() {
        assert_eq!(
            Value::Int32(3).sql_cmp(&Value::Int64(3)),
            Some(Ordering::Equal)
        );
        assert_eq!(
            Value::Double(2.5).sql_cmp(&Value::Int64(2)),
            Some(Ordering::Greater)
        );
        // i64::MAX is not representable as f64; the comparison stays exact.
        assert_eq!(
            Value::Int64(i64::MAX).sql_cmp(&Value::Double(9.223_372_036_854_776e18)),
            Some(Ordering::Less)
        );
        assert_eq!(
            Value::Double(f64::NAN).sql_cmp(&Value::Double(f64::INFINITY)),
            Some(Ordering::Greater)
        );
        assert_eq!(Value::String("1".into()).sql_cmp(&Value::Int32(1)), None);
    }

    #[test]
    fn equality_is_type_exact_and_total_on_nan() {
        assert_ne!(Value::Int32(1), Value::Int64(1));
        assert_eq!(Value::Double(f64::NAN), Value::Double(f64::NAN));
        assert_eq!(Value::Double(0.0), Value::Double(-0.0));
    }

    #[test]
    fn size_formula_matches_spec_example() {
        // 4 + 2*(1+1) + (8 + 2*1 + (2*2+4)) = 4 + 4 + 18 = 26
        let e = EntityWrite::new("p", "r").with("a", Value::String("xy".into()));
        assert_eq!(e.size_in_formula(), 26);
        // Surrogate pairs count twice: U+1F600 is two UTF-16 units.
        assert_eq!(utf16_len("\u{1F600}"), 2);
    }

    #[test]
    fn datetime_display_and_range() {
        assert_eq!(DateTime(0).to_string(), "1970-01-01T00:00:00.000000Z");
        assert_eq!(DateTime::MIN.to_string(), "1601-01-01T00:00:00.000000Z");
        assert_eq!(DateTime::MAX.to_string(), "9999-12-31T23:59:59.999999Z");
        assert!(!DateTime(DateTime::MAX.0 + 1).in_range());
        assert!(!DateTime(DateTime::MIN.0 - 1).in_range());
    }
}
