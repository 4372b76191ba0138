//! Typed key columns: the text each key type is stored as.
//!
//! The store's PartitionKey and RowKey are strings compared by their
//! bytes. A key column of another type is stored as a string whose byte
//! order is the type's SQL order, so a range on the typed column is a range
//! on the stored key (row-range and partition-range queries still apply),
//! and another reader of the table (Azure Storage Explorer, an SDK) sees
//! stable, readable keys:
//!
//! | type | stored key | example |
//! |------|------------|---------|
//! | `text` | the text itself | `nyc` |
//! | `smallint` | 5 digits, zero-padded; a negative is `-` then 99,999 − \|n\| | `00042`, `-99957` (−42) |
//! | `integer` | 10 digits, zero-padded; a negative is `-` then 9,999,999,999 − \|n\| | `0000000042`, `-9999999957` (−42) |
//! | `bigint` | 19 digits, zero-padded; a negative is `-` then 10¹⁹ − 1 − \|n\| | `0000000000000000042` |
//! | `timestamptz`, `timestamp` | UTC, RFC 3339 with 6 fraction digits | `2026-11-27T10:25:03.000000Z` |
//! | `date` | `YYYY-MM-DD` | `2026-11-28` |
//! | `uuid` | lower-case hyphenated | `6f1c…-…` |
//!
//! `-` sorts below every digit, and the complement makes a larger magnitude
//! sort first, so every negative sorts below zero in numeric order. The
//! encoding is one-to-one: a stored key that is not the canonical form of
//! a value (written by another client) decodes to nothing, and a scan that
//! meets one fails with an error naming it rather than invent a value (a
//! key range over such keys could not be answered right either).

use tablegate_store::{DateTime, Value};

use crate::types::{SqlType, date_of, date_text};

const INT2_DIGITS: usize = 5;
const INT4_DIGITS: usize = 10;
const INT8_DIGITS: usize = 19;

impl SqlType {
    /// Can a column of this type be the PartitionKey or the RowKey?
    pub fn key_capable(self) -> bool {
        matches!(
            self,
            SqlType::Text
                | SqlType::Int2
                | SqlType::Int4
                | SqlType::Int8
                | SqlType::Timestamptz
                | SqlType::Timestamp
                | SqlType::Date
                | SqlType::Uuid
        )
    }

    /// The stored key for a value of this type; `None` when the value is
    /// not one of the type (an integer out of range, a fraction, a time
    /// outside the EDM range, another type).
    pub fn encode_key(self, v: &Value) -> Option<String> {
        let int = |v: &Value| -> Option<i128> {
            match v {
                Value::Int32(i) => Some(i128::from(*i)),
                Value::Int64(i) => Some(i128::from(*i)),
                Value::Double(d) if d.fract() == 0.0 && d.is_finite() => Some(*d as i128),
                _ => None,
            }
        };
        match self {
            SqlType::Text => match v {
                Value::String(s) => Some(s.clone()),
                _ => None,
            },
            SqlType::Int2 | SqlType::Int4 | SqlType::Int8 => {
                let n = int(v)?;
                let (min, max) = self.int_range()?;
                let digits = match self {
                    SqlType::Int2 => INT2_DIGITS,
                    SqlType::Int4 => INT4_DIGITS,
                    _ => INT8_DIGITS,
                };
                (i128::from(min)..=i128::from(max))
                    .contains(&n)
                    .then(|| encode_int(n, digits))
            }
            SqlType::Timestamptz | SqlType::Timestamp => match v {
                Value::DateTime(t) if t.in_range() => Some(t.to_string()),
                _ => None,
            },
            // A date is midnight UTC; another time of day is not a date.
            SqlType::Date => match v {
                Value::DateTime(t) if t.in_range() && date_of(*t) == *t => date_text(*t),
                _ => None,
            },
            SqlType::Uuid => match v {
                Value::Guid(b) => Some(uuid::Uuid::from_bytes(*b).hyphenated().to_string()),
                _ => None,
            },
            _ => None,
        }
    }

    /// The value a stored key holds; `None` when it is not the canonical
    /// encoding of a value of this type.
    pub fn decode_key(self, key: &str) -> Option<Value> {
        // An integer's form is canonical by construction (exactly `digits`
        // digits, no minus zero): no re-encoding, which a scan of an
        // integer key column would pay on every row.
        let v = match self {
            SqlType::Text => return Some(Value::String(key.to_owned())),
            SqlType::Int2 => {
                return Some(Value::Int32(
                    i16::try_from(decode_int(key, INT2_DIGITS)?).ok()?.into(),
                ));
            }
            SqlType::Int4 => {
                return Some(Value::Int32(
                    i32::try_from(decode_int(key, INT4_DIGITS)?).ok()?,
                ));
            }
            SqlType::Int8 => {
                return Some(Value::Int64(
                    i64::try_from(decode_int(key, INT8_DIGITS)?).ok()?,
                ));
            }
            SqlType::Timestamptz | SqlType::Timestamp => {
                return decode_timestamp(key).map(Value::DateTime);
            }
            SqlType::Date => Value::DateTime(crate::types::parse_date(key)?),
            SqlType::Uuid => Value::Guid(*uuid::Uuid::parse_str(key).ok()?.as_bytes()),
            _ => return None,
        };
        // Only the canonical spelling: one value, one key.
        (self.encode_key(&v).as_deref() == Some(key)).then_some(v)
    }
}

fn encode_int(n: i128, digits: usize) -> String {
    if n >= 0 {
        format!("{n:0digits$}")
    } else {
        let max = 10i128.pow(digits as u32) - 1;
        format!("-{:0digits$}", max + n)
    }
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ`, every field fixed-width and checked
/// against its range: only the canonical form of an in-range instant
/// parses, so, as for integers, nothing is re-encoded to compare.
fn decode_timestamp(key: &str) -> Option<DateTime> {
    let b = key.as_bytes();
    if b.len() != 27 {
        return None;
    }
    for (i, &c) in b.iter().enumerate() {
        let want = match i {
            4 | 7 => b'-',
            10 => b'T',
            13 | 16 => b':',
            19 => b'.',
            26 => b'Z',
            _ if c.is_ascii_digit() => continue,
            _ => return None,
        };
        if c != want {
            return None;
        }
    }
    let num = |from: usize, to: usize| {
        b[from..to]
            .iter()
            .fold(0u32, |n, &d| n * 10 + u32::from(d - b'0'))
    };
    let date = chrono::NaiveDate::from_ymd_opt(num(0, 4) as i32, num(5, 7), num(8, 10))?;
    let time =
        chrono::NaiveTime::from_hms_micro_opt(num(11, 13), num(14, 16), num(17, 19), num(20, 26))?;
    let t = DateTime(date.and_time(time).and_utc().timestamp_micros());
    t.in_range().then_some(t)
}

fn decode_int(key: &str, digits: usize) -> Option<i128> {
    let (neg, body) = match key.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, key),
    };
    if body.len() != digits {
        return None;
    }
    // At most 19 digits: below 10¹⁹, which fits a u64.
    let mut m: u64 = 0;
    for b in body.bytes() {
        if !b.is_ascii_digit() {
            return None;
        }
        m = m * 10 + u64::from(b - b'0');
    }
    let m = i128::from(m);
    if neg {
        let n = m - (10i128.pow(digits as u32) - 1);
        // `-` followed by all nines would be minus zero.
        (n < 0).then_some(n)
    } else {
        Some(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_keys_sort_in_numeric_order_and_round_trip() {
        for (ty, values) in [
            (
                SqlType::Int2,
                vec![i64::from(i16::MIN), -42, -1, 0, 1, 42, i64::from(i16::MAX)],
            ),
            (
                SqlType::Int4,
                vec![
                    i64::from(i32::MIN),
                    -1_000_000,
                    -42,
                    -10,
                    -9,
                    -1,
                    0,
                    1,
                    9,
                    10,
                    42,
                    i64::from(i32::MAX),
                ],
            ),
            (
                SqlType::Int8,
                vec![
                    i64::MIN,
                    i64::MIN + 1,
                    -1,
                    0,
                    1,
                    99,
                    100,
                    i64::MAX - 1,
                    i64::MAX,
                ],
            ),
        ] {
            let keys: Vec<String> = values
                .iter()
                .map(|&n| ty.encode_key(&Value::Int64(n)).unwrap())
                .collect();
            let mut sorted = keys.clone();
            sorted.sort();
            assert_eq!(keys, sorted, "{ty:?}");
            for (k, &n) in keys.iter().zip(&values) {
                let back = match ty.decode_key(k).unwrap() {
                    Value::Int32(i) => i64::from(i),
                    Value::Int64(i) => i,
                    other => panic!("{other:?}"),
                };
                assert_eq!(back, n, "{k}");
            }
        }
        assert_eq!(
            SqlType::Int4.encode_key(&Value::Int32(42)).unwrap(),
            "0000000042"
        );
        assert_eq!(
            SqlType::Int4.encode_key(&Value::Int32(-42)).unwrap(),
            "-9999999957"
        );
        assert_eq!(SqlType::Int4.encode_key(&Value::Int64(1 << 40)), None);
        assert_eq!(
            SqlType::Int2.encode_key(&Value::Int32(-42)).unwrap(),
            "-99957"
        );
        assert_eq!(SqlType::Int2.encode_key(&Value::Int32(40_000)), None);
        assert_eq!(SqlType::Int4.encode_key(&Value::Double(2.5)), None);
        assert_eq!(
            SqlType::Int8.encode_key(&Value::Double(3.0)).unwrap(),
            "0000000000000000003"
        );
    }

    /// A fixed-seed xorshift generator: the same cases on every run.
    fn xorshift(mut seed: u64) -> impl FnMut() -> u64 {
        move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        }
    }

    /// Every string of the integer alphabet near the encoded width decodes
    /// exactly when it is the encoding of the value it decodes to.
    #[test]
    fn integer_keys_decode_only_their_canonical_form() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1du64);
        for (ty, digits) in [
            (SqlType::Int2, INT2_DIGITS),
            (SqlType::Int4, INT4_DIGITS),
            (SqlType::Int8, INT8_DIGITS),
        ] {
            for _ in 0..20_000 {
                let len = digits - 1 + (next() % 3) as usize;
                let mut key: String = (0..len)
                    .map(|_| match next() % 13 {
                        10 => '-',
                        11 => '9',
                        12 => '0',
                        d => char::from(b'0' + d as u8),
                    })
                    .collect();
                if next().is_multiple_of(2) {
                    key.insert(0, '-');
                }
                match ty.decode_key(&key) {
                    Some(v) => assert_eq!(ty.encode_key(&v).as_deref(), Some(key.as_str())),
                    None => {
                        let parsed: Option<i64> = key.parse().ok();
                        if let Some(n) = parsed {
                            assert_ne!(
                                ty.encode_key(&Value::Int64(n)).as_deref(),
                                Some(key.as_str())
                            );
                        }
                    }
                }
            }
            let max = match ty {
                SqlType::Int2 => i64::from(i16::MAX),
                SqlType::Int4 => i64::from(i32::MAX),
                _ => i64::MAX,
            };
            for n in [-max - 1, -max, -1, 0, 1, max] {
                let k = ty.encode_key(&Value::Int64(n)).unwrap();
                let back = match ty.decode_key(&k) {
                    Some(Value::Int32(i)) => i64::from(i),
                    Some(Value::Int64(i)) => i,
                    other => panic!("{ty:?} {k}: {other:?}"),
                };
                assert_eq!(back, n);
            }
            assert_eq!(ty.decode_key(&format!("-{}", "9".repeat(digits))), None);
        }
    }

    /// Timestamp keys: every in-range instant round-trips, and a key with
    /// one character changed decodes exactly when it is the canonical form
    /// of what it decodes to (RFC 3339 parsing is the oracle).
    #[test]
    fn timestamp_keys_decode_only_their_canonical_form() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15u64);
        let span = (DateTime::MAX.0 - DateTime::MIN.0) as u64;
        let alphabet = b"0123456789-:.TZ+ 9";
        for round in 0..20_000 {
            let t = match round {
                0 => DateTime::MIN,
                1 => DateTime::MAX,
                _ => DateTime(DateTime::MIN.0 + (next() % span) as i64),
            };
            let key = SqlType::Timestamptz
                .encode_key(&Value::DateTime(t))
                .unwrap();
            assert_eq!(decode_timestamp(&key), Some(t), "{key}");
            let mut bent = key.clone().into_bytes();
            let at = (next() % 27) as usize;
            bent[at] = alphabet[(next() % alphabet.len() as u64) as usize];
            let bent = String::from_utf8(bent).unwrap();
            let oracle = chrono::DateTime::parse_from_rfc3339(&bent)
                .ok()
                .map(|p| DateTime(p.timestamp_micros()))
                .filter(|d| d.in_range() && d.to_string() == bent);
            assert_eq!(decode_timestamp(&bent), oracle, "{bent}");
        }
        for key in [
            "9999-12-31T23:59:60.000000Z",
            "1600-12-31T23:59:59.999999Z",
            "2026-02-29T00:00:00.000000Z",
            "2026-11-27T24:00:00.000000Z",
        ] {
            assert_eq!(decode_timestamp(key), None, "{key}");
        }
    }

    #[test]
    fn only_canonical_keys_decode() {
        for (ty, key) in [
            (SqlType::Int4, "42"),
            (SqlType::Int4, "-9999999999"),
            (SqlType::Int4, "+000000042"),
            (SqlType::Int4, "9999999999"),
            (SqlType::Int8, "0000000042"),
            (SqlType::Uuid, "6F9619FF-8B86-D011-B42D-00CF4FC964FF"),
            (SqlType::Timestamptz, "2026-11-27T10:25:03Z"),
            (SqlType::Timestamptz, "2026-11-27T11:25:03.000000+01:00"),
            (SqlType::Bool, "true"),
            (SqlType::Int2, "0042"),
            (SqlType::Date, "2026-1-02"),
            (SqlType::Date, "2026-01-02 00:00"),
        ] {
            assert_eq!(ty.decode_key(key), None, "{ty:?} {key}");
        }
        let u = SqlType::Uuid
            .parse_text("6F9619FF-8B86-D011-B42D-00CF4FC964FF")
            .unwrap();
        let k = SqlType::Uuid.encode_key(&u).unwrap();
        assert_eq!(k, "6f9619ff-8b86-d011-b42d-00cf4fc964ff");
        assert_eq!(SqlType::Uuid.decode_key(&k), Some(u));
    }

    #[test]
    fn timestamp_keys_sort_in_time_order() {
        let times = [
            DateTime::MIN,
            DateTime(-1),
            DateTime(0),
            DateTime(1),
            DateTime(1_795_333_458_500_000),
            DateTime::MAX,
        ];
        let keys: Vec<String> = times
            .iter()
            .map(|t| {
                SqlType::Timestamptz
                    .encode_key(&Value::DateTime(*t))
                    .unwrap()
            })
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        assert_eq!(keys[2], "1970-01-01T00:00:00.000000Z");
        for (k, t) in keys.iter().zip(times) {
            assert_eq!(SqlType::Timestamp.decode_key(k), Some(Value::DateTime(t)));
        }
        let outside = Value::DateTime(DateTime(DateTime::MAX.0 + 1));
        assert_eq!(SqlType::Timestamptz.encode_key(&outside), None);
    }

    #[test]
    fn date_keys_are_days_in_order() {
        let days = [
            "1601-01-01",
            "1969-12-31",
            "1970-01-01",
            "2026-11-28",
            "9999-12-31",
        ];
        let values: Vec<Value> = days
            .iter()
            .map(|d| SqlType::Date.parse_text(d).unwrap())
            .collect();
        for (d, v) in days.iter().zip(&values) {
            assert_eq!(SqlType::Date.encode_key(v).as_deref(), Some(*d));
            assert_eq!(SqlType::Date.decode_key(d).as_ref(), Some(v));
        }
        // A time of day is not a date: it has no date key.
        let noon = Value::DateTime(DateTime(12 * 3_600_000_000));
        assert_eq!(SqlType::Date.encode_key(&noon), None);
    }
}
