//! SQL column types and their EDM and Arrow counterparts, plus
//! text parsing of SQL literals into store values.

use arrow_schema::{DataType, TimeUnit};
use serde::{Deserialize, Serialize};
use tablegate_store::{DateTime, EdmType, Value};

use crate::error::CatalogError;

/// The SQL types a column can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SqlType {
    /// TEXT / VARCHAR → Edm.String.
    Text,
    /// SMALLINT → Edm.Int32, range-checked to 16 bits.
    Int2,
    /// INT / INTEGER → Edm.Int32.
    Int4,
    /// BIGINT → Edm.Int64.
    Int8,
    /// DOUBLE PRECISION / FLOAT8 / REAL → Edm.Double.
    Float8,
    /// BOOLEAN → Edm.Boolean.
    Bool,
    /// TIMESTAMPTZ → Edm.DateTime.
    Timestamptz,
    /// TIMESTAMP (without time zone; stored as UTC) → Edm.DateTime.
    Timestamp,
    /// DATE → Edm.DateTime at midnight UTC (the service has no date type).
    Date,
    /// UUID → Edm.Guid.
    Uuid,
    /// BYTEA → Edm.Binary.
    Bytea,
}

impl SqlType {
    /// Parses a type name as written in DDL (case-insensitive, with or
    /// without a length such as `varchar(20)`).
    pub fn parse(name: &str) -> Result<SqlType, CatalogError> {
        let lower = name.trim().to_ascii_lowercase();
        let base = lower.split('(').next().unwrap_or("").trim();
        Ok(match base {
            "text" | "varchar" | "character varying" | "string" => SqlType::Text,
            "smallint" | "int2" => SqlType::Int2,
            "int" | "integer" | "int4" => SqlType::Int4,
            "bigint" | "int8" => SqlType::Int8,
            "double precision" | "double" | "float8" | "float" | "real" | "float4" => {
                SqlType::Float8
            }
            "boolean" | "bool" => SqlType::Bool,
            "timestamptz" | "timestamp with time zone" => SqlType::Timestamptz,
            "timestamp" | "timestamp without time zone" => SqlType::Timestamp,
            "date" => SqlType::Date,
            "uuid" => SqlType::Uuid,
            "bytea" => SqlType::Bytea,
            _ => {
                let hint = match base {
                    "tinyint" => "use SMALLINT or INTEGER (Edm.Int32)",
                    "numeric" | "decimal" | "money" => {
                        "the store has no exact decimal: use BIGINT for scaled integers (cents) or DOUBLE PRECISION"
                    }
                    "time" | "timetz" | "interval" => "use TIMESTAMPTZ (Edm.DateTime)",
                    "char" | "character" | "bpchar" | "citext" | "name" => "use TEXT",
                    "json" | "jsonb" | "xml" => "store the document as TEXT",
                    "smallserial" => "use SERIAL (integer) or BIGSERIAL",
                    _ => {
                        "supported types: TEXT, VARCHAR, SMALLINT, INTEGER, BIGINT, DOUBLE PRECISION, REAL, BOOLEAN, TIMESTAMPTZ, TIMESTAMP, DATE, UUID, BYTEA"
                    }
                };
                return Err(CatalogError::UnsupportedType {
                    name: name.trim().to_owned(),
                    hint,
                });
            }
        })
    }

    /// The EDM type the store keeps.
    pub fn edm(self) -> EdmType {
        match self {
            SqlType::Text => EdmType::String,
            SqlType::Int2 | SqlType::Int4 => EdmType::Int32,
            SqlType::Int8 => EdmType::Int64,
            SqlType::Float8 => EdmType::Double,
            SqlType::Bool => EdmType::Boolean,
            SqlType::Timestamptz | SqlType::Timestamp | SqlType::Date => EdmType::DateTime,
            SqlType::Uuid => EdmType::Guid,
            SqlType::Bytea => EdmType::Binary,
        }
    }

    /// The SQL type a property of this EDM type reads as (DateTime as
    /// TIMESTAMPTZ: the service's times are UTC instants).
    pub fn from_edm(edm: EdmType) -> SqlType {
        match edm {
            EdmType::String => SqlType::Text,
            EdmType::Int32 => SqlType::Int4,
            EdmType::Int64 => SqlType::Int8,
            EdmType::Double => SqlType::Float8,
            EdmType::Boolean => SqlType::Bool,
            EdmType::DateTime => SqlType::Timestamptz,
            EdmType::Guid => SqlType::Uuid,
            EdmType::Binary => SqlType::Bytea,
        }
    }

    /// PostgreSQL's name for the type (as `format_type` shows it).
    pub fn pg_name(self) -> &'static str {
        match self {
            SqlType::Text => "text",
            SqlType::Int2 => "smallint",
            SqlType::Int4 => "integer",
            SqlType::Int8 => "bigint",
            SqlType::Float8 => "double precision",
            SqlType::Bool => "boolean",
            SqlType::Timestamptz => "timestamp with time zone",
            SqlType::Timestamp => "timestamp without time zone",
            SqlType::Date => "date",
            SqlType::Uuid => "uuid",
            SqlType::Bytea => "bytea",
        }
    }

    /// PostgreSQL's type OID.
    pub fn pg_oid(self) -> u32 {
        match self {
            SqlType::Text => 25,
            SqlType::Int2 => 21,
            SqlType::Int4 => 23,
            SqlType::Int8 => 20,
            SqlType::Float8 => 701,
            SqlType::Bool => 16,
            SqlType::Timestamptz => 1184,
            SqlType::Timestamp => 1114,
            SqlType::Date => 1082,
            SqlType::Uuid => 2950,
            SqlType::Bytea => 17,
        }
    }

    /// The Arrow type of the column in record batches.
    pub fn arrow(self) -> DataType {
        match self {
            SqlType::Text => DataType::Utf8,
            SqlType::Int2 => DataType::Int16,
            SqlType::Int4 => DataType::Int32,
            SqlType::Int8 => DataType::Int64,
            SqlType::Float8 => DataType::Float64,
            SqlType::Bool => DataType::Boolean,
            SqlType::Timestamptz => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            SqlType::Timestamp => DataType::Timestamp(TimeUnit::Microsecond, None),
            SqlType::Date => DataType::Date32,
            SqlType::Uuid => DataType::FixedSizeBinary(16),
            SqlType::Bytea => DataType::Binary,
        }
    }

    /// True when a stored value of this EDM type reads as this column type.
    /// A smallint is an Int32 within 16 bits.
    pub fn accepts(self, v: &Value) -> bool {
        match (self, v) {
            (SqlType::Int2, Value::Int32(i)) => i16::try_from(*i).is_ok(),
            _ => v.edm_type() == self.edm(),
        }
    }

    /// A value of this type as PostgreSQL's text output shows it (times in
    /// UTC), for messages such as a duplicate key's detail.
    pub fn pg_text(self, v: &Value) -> String {
        match v {
            Value::String(s) => s.clone(),
            Value::Int32(i) => i.to_string(),
            Value::Int64(i) => i.to_string(),
            Value::Double(d) => d.to_string(),
            Value::Boolean(b) => if *b { "t" } else { "f" }.to_owned(),
            Value::Guid(g) => uuid::Uuid::from_bytes(*g).hyphenated().to_string(),
            Value::Binary(b) => format!(
                "\\x{}",
                b.iter().map(|x| format!("{x:02x}")).collect::<String>()
            ),
            Value::DateTime(t) if self == SqlType::Date => {
                date_text(*t).unwrap_or_else(|| t.to_string())
            }
            Value::DateTime(t) => match chrono::DateTime::from_timestamp_micros(t.0) {
                Some(d) => {
                    let mut s = d.format("%Y-%m-%d %H:%M:%S%.6f").to_string();
                    let kept = s.trim_end_matches('0').trim_end_matches('.').len();
                    s.truncate(kept);
                    if self != SqlType::Timestamp {
                        s.push_str("+00");
                    }
                    s
                }
                None => t.to_string(),
            },
        }
    }

    /// The range of an integer type, `None` for the others.
    pub fn int_range(self) -> Option<(i64, i64)> {
        match self {
            SqlType::Int2 => Some((i16::MIN.into(), i16::MAX.into())),
            SqlType::Int4 => Some((i32::MIN.into(), i32::MAX.into())),
            SqlType::Int8 => Some((i64::MIN, i64::MAX)),
            _ => None,
        }
    }

    /// True for the integer and floating-point types.
    pub fn is_numeric(self) -> bool {
        matches!(
            self,
            SqlType::Int2 | SqlType::Int4 | SqlType::Int8 | SqlType::Float8
        )
    }

    /// Parses PostgreSQL text input for this type (what an untyped literal
    /// or a text-format parameter carries). Errors are `22P02`-style.
    pub fn parse_text(self, s: &str) -> Result<Value, CatalogError> {
        let bad = || CatalogError::InvalidText {
            ty: self.pg_name(),
            text: s.chars().take(64).collect(),
        };
        let t = s.trim();
        Ok(match self {
            SqlType::Text => Value::String(s.to_owned()),
            SqlType::Int2 => {
                let n: i16 = t.parse().map_err(|_| bad())?;
                Value::Int32(n.into())
            }
            SqlType::Int4 => Value::Int32(t.parse().map_err(|_| bad())?),
            SqlType::Int8 => Value::Int64(t.parse().map_err(|_| bad())?),
            SqlType::Float8 => Value::Double(parse_float(t).ok_or_else(bad)?),
            SqlType::Bool => Value::Boolean(parse_bool(t).ok_or_else(bad)?),
            SqlType::Timestamptz | SqlType::Timestamp => {
                Value::DateTime(parse_timestamp(t, self == SqlType::Timestamptz).ok_or_else(bad)?)
            }
            SqlType::Date => Value::DateTime(parse_date(t).ok_or_else(bad)?),
            SqlType::Uuid => Value::Guid(*uuid::Uuid::parse_str(t).map_err(|_| bad())?.as_bytes()),
            SqlType::Bytea => Value::Binary(parse_bytea(t).ok_or_else(bad)?),
        })
    }
}

fn parse_float(t: &str) -> Option<f64> {
    match t.to_ascii_lowercase().as_str() {
        "nan" => Some(f64::NAN),
        "infinity" | "inf" | "+infinity" => Some(f64::INFINITY),
        "-infinity" | "-inf" => Some(f64::NEG_INFINITY),
        other => other.parse().ok(),
    }
}

fn parse_bool(t: &str) -> Option<bool> {
    match t.to_ascii_lowercase().as_str() {
        "t" | "true" | "yes" | "y" | "on" | "1" => Some(true),
        "f" | "false" | "no" | "n" | "off" | "0" => Some(false),
        _ => None,
    }
}

/// Accepts RFC 3339 and PostgreSQL's usual output (`2026-11-22 08:44:18+00`,
/// with or without fraction and zone; a missing zone means UTC).
pub fn parse_timestamp(t: &str, _with_zone: bool) -> Option<DateTime> {
    use chrono::{NaiveDate, NaiveDateTime};
    if let Ok(d) = chrono::DateTime::parse_from_rfc3339(t) {
        return Some(DateTime(d.timestamp_micros()));
    }
    for fmt in [
        "%Y-%m-%d %H:%M:%S%.f%#z",
        "%Y-%m-%dT%H:%M:%S%.f%#z",
        "%Y-%m-%d %H:%M:%S%#z",
        "%Y-%m-%d %H:%M%#z",
        "%Y-%m-%dT%H:%M%#z",
    ] {
        if let Ok(d) = chrono::DateTime::parse_from_str(t, fmt) {
            return Some(DateTime(d.timestamp_micros()));
        }
    }
    for fmt in [
        "%Y-%m-%d %H:%M:%S%.f",
        "%Y-%m-%dT%H:%M:%S%.f",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%dT%H:%M",
    ] {
        if let Ok(d) = NaiveDateTime::parse_from_str(t, fmt) {
            return Some(DateTime(d.and_utc().timestamp_micros()));
        }
    }
    NaiveDate::parse_from_str(t, "%Y-%m-%d").ok().map(|d| {
        DateTime(
            d.and_hms_opt(0, 0, 0)
                .expect("midnight")
                .and_utc()
                .timestamp_micros(),
        )
    })
}

/// A date as PostgreSQL reads one: `2026-11-28`, or a timestamp whose
/// time is dropped (`'2026-11-28 10:00'::date` is 2026-11-28). Midnight UTC.
pub fn parse_date(t: &str) -> Option<DateTime> {
    let day = match chrono::NaiveDate::parse_from_str(t, "%Y-%m-%d") {
        Ok(d) => d,
        Err(_) => {
            let ts = parse_timestamp(t, false)?;
            return Some(date_of(ts));
        }
    };
    Some(DateTime(
        day.and_hms_opt(0, 0, 0)?.and_utc().timestamp_micros(),
    ))
}

/// The day of `t` (UTC) as `YYYY-MM-DD`.
pub fn date_text(t: DateTime) -> Option<String> {
    chrono::DateTime::from_timestamp_micros(t.0).map(|d| d.format("%Y-%m-%d").to_string())
}

/// The midnight (UTC) that starts the day of `t`.
pub fn date_of(t: DateTime) -> DateTime {
    DateTime(t.0.div_euclid(MICROS_PER_DAY) * MICROS_PER_DAY)
}

/// Microseconds in a day: a DATE's Arrow value is `micros / MICROS_PER_DAY`.
pub const MICROS_PER_DAY: i64 = 86_400_000_000;

/// `\x0123abcd` hex form (PostgreSQL's default bytea output).
fn parse_bytea(t: &str) -> Option<Vec<u8>> {
    let hex = t.strip_prefix("\\x").or_else(|| t.strip_prefix("\\X"))?;
    if hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_names_map_as_the_spec_says() {
        for (n, t) in [
            ("TEXT", SqlType::Text),
            ("varchar(20)", SqlType::Text),
            ("INTEGER", SqlType::Int4),
            ("int", SqlType::Int4),
            ("BIGINT", SqlType::Int8),
            ("double precision", SqlType::Float8),
            ("FLOAT8", SqlType::Float8),
            ("real", SqlType::Float8),
            ("boolean", SqlType::Bool),
            ("timestamptz", SqlType::Timestamptz),
            ("TIMESTAMP", SqlType::Timestamp),
            ("uuid", SqlType::Uuid),
            ("bytea", SqlType::Bytea),
        ] {
            assert_eq!(SqlType::parse(n).unwrap(), t, "{n}");
        }
        match SqlType::parse("numeric(10,2)") {
            Err(CatalogError::UnsupportedType { name, hint }) => {
                assert_eq!(name, "numeric(10,2)");
                assert!(hint.contains("BIGINT"));
            }
            other => panic!("{other:?}"),
        }
        assert!(SqlType::parse("serial").is_err());
    }

    #[test]
    fn text_input_parses_like_postgres() {
        assert_eq!(SqlType::Int4.parse_text(" 42 ").unwrap(), Value::Int32(42));
        assert!(SqlType::Int4.parse_text("4.2").is_err());
        assert!(SqlType::Int4.parse_text("3000000000").is_err());
        assert_eq!(SqlType::Bool.parse_text("t").unwrap(), Value::Boolean(true));
        assert!(
            matches!(SqlType::Float8.parse_text("NaN").unwrap(), Value::Double(d) if d.is_nan())
        );
        assert_eq!(
            SqlType::Timestamptz
                .parse_text("2026-11-22 08:44:18.5+01")
                .unwrap(),
            Value::DateTime(DateTime(1_795_333_458_500_000))
        );
        assert_eq!(
            SqlType::Timestamptz
                .parse_text("2026-11-22 08:44+01")
                .unwrap(),
            Value::DateTime(DateTime(1_795_333_440_000_000))
        );
        assert_eq!(
            SqlType::Timestamptz.parse_text("2026-11-22").unwrap(),
            Value::DateTime(DateTime(1_795_305_600_000_000))
        );
        assert_eq!(
            SqlType::Bytea.parse_text("\\x00ff").unwrap(),
            Value::Binary(vec![0, 255])
        );
        assert!(SqlType::Uuid.parse_text("nope").is_err());
        assert_eq!(
            SqlType::Int2.parse_text("-32768").unwrap(),
            Value::Int32(-32768)
        );
        assert!(SqlType::Int2.parse_text("32768").is_err());
        assert_eq!(
            SqlType::Date.parse_text("2026-11-22 08:44").unwrap(),
            SqlType::Date.parse_text("2026-11-22").unwrap()
        );
    }

    #[test]
    fn values_print_as_postgres_prints_them() {
        let t = SqlType::Timestamptz
            .parse_text("2026-11-22 08:44:18.5+01")
            .unwrap();
        assert_eq!(SqlType::Timestamptz.pg_text(&t), "2026-11-22 07:44:18.5+00");
        assert_eq!(SqlType::Timestamp.pg_text(&t), "2026-11-22 07:44:18.5");
        let d = SqlType::Date.parse_text("2026-11-22").unwrap();
        assert_eq!(SqlType::Date.pg_text(&d), "2026-11-22");
        assert_eq!(SqlType::Timestamptz.pg_text(&d), "2026-11-22 00:00:00+00");
        assert_eq!(
            SqlType::Bytea.pg_text(&Value::Binary(vec![0, 255])),
            "\\x00ff"
        );
    }
}
