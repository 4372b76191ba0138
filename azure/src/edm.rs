//! EDM values in the Table service's JSON payloads, both ways.
//!
//! Writing, every property whose type JSON cannot carry gets its
//! `name@odata.type` annotation: Int64 (as a string), DateTime, Guid,
//! Binary (base64), and Double always (so `2.0` is not read back as an
//! Int32, and NaN/±Infinity travel as the strings the service expects).
//! Reading, an annotation decides; without one a JSON string is a String, a
//! boolean a Boolean, a number with a fraction or exponent a Double and any
//! other number an Int32. `odata.*` members and the service's
//! `Timestamp` are metadata, not properties.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{Map, Value as Json};
use tablegate_store::{DateTime, ETag, Entity, EntityWrite, Value};

use crate::error::{AzureError, Result};

/// An EDM value as a JSON member pair: the value and its annotation.
pub fn to_json(v: &Value) -> (Json, Option<&'static str>) {
    match v {
        Value::String(s) => (Json::String(s.clone()), None),
        Value::Int32(i) => (Json::from(*i), None),
        Value::Int64(i) => (Json::String(i.to_string()), Some("Edm.Int64")),
        Value::Double(d) => {
            let j = if d.is_nan() {
                Json::String("NaN".into())
            } else if d.is_infinite() {
                Json::String(if *d > 0.0 { "Infinity" } else { "-Infinity" }.into())
            } else {
                serde_json::Number::from_f64(*d).map_or(Json::Null, Json::Number)
            };
            (j, Some("Edm.Double"))
        }
        Value::Boolean(b) => (Json::Bool(*b), None),
        Value::DateTime(t) => (Json::String(t.to_string()), Some("Edm.DateTime")),
        Value::Guid(g) => (
            Json::String(tablegate_store::entity::guid_text(g)),
            Some("Edm.Guid"),
        ),
        Value::Binary(b) => (
            Json::String(base64::engine::general_purpose::STANDARD.encode(b)),
            Some("Edm.Binary"),
        ),
    }
}

/// The JSON body of an entity write: keys and its non-NULL properties
/// (NULLs are absent: the Table service has no NULL).
pub fn write_body(w: &EntityWrite) -> Json {
    let mut m = Map::new();
    m.insert("PartitionKey".into(), Json::String(w.partition_key.clone()));
    m.insert("RowKey".into(), Json::String(w.row_key.clone()));
    for (k, v) in &w.properties {
        let Some(v) = v else { continue };
        let (j, ty) = to_json(v);
        m.insert(k.clone(), j);
        if let Some(ty) = ty {
            m.insert(format!("{k}@odata.type"), Json::String(ty.into()));
        }
    }
    Json::Object(m)
}

/// Parses the service's DateTime text (up to 7 fractional digits; the
/// store keeps microseconds).
pub fn parse_datetime(s: &str) -> Option<DateTime> {
    let t = chrono::DateTime::parse_from_rfc3339(s).ok()?;
    Some(DateTime(t.timestamp_micros()))
}

fn bad(what: String) -> AzureError {
    AzureError::BadResponse(what)
}

/// One property value, given its annotation (if any).
fn from_json(name: &str, j: &Json, ty: Option<&str>) -> Result<Option<Value>> {
    let wrong = || bad(format!("property {name:?}: {j} is not a valid {ty:?}"));
    Ok(Some(match (ty, j) {
        (_, Json::Null) => return Ok(None),
        (Some("Edm.String") | None, Json::String(s)) => Value::String(s.clone()),
        (Some("Edm.Int64"), Json::String(s)) => Value::Int64(s.parse().map_err(|_| wrong())?),
        (Some("Edm.Int64"), Json::Number(n)) => Value::Int64(n.as_i64().ok_or_else(wrong)?),
        (Some("Edm.Int32"), Json::Number(n)) => Value::Int32(
            n.as_i64()
                .and_then(|i| i32::try_from(i).ok())
                .ok_or_else(wrong)?,
        ),
        (Some("Edm.Double"), Json::String(s)) => Value::Double(match s.as_str() {
            "NaN" => f64::NAN,
            "Infinity" | "INF" => f64::INFINITY,
            "-Infinity" | "-INF" => f64::NEG_INFINITY,
            other => other.parse().map_err(|_| wrong())?,
        }),
        (Some("Edm.Double"), Json::Number(n)) => Value::Double(n.as_f64().ok_or_else(wrong)?),
        (None, Json::Number(n)) if n.is_f64() => Value::Double(n.as_f64().ok_or_else(wrong)?),
        (None, Json::Number(n)) => match n.as_i64().and_then(|i| i32::try_from(i).ok()) {
            Some(i) => Value::Int32(i),
            // Only an Int64 is this big, and it would have been annotated.
            None => Value::Int64(n.as_i64().ok_or_else(wrong)?),
        },
        (Some("Edm.Boolean") | None, Json::Bool(b)) => Value::Boolean(*b),
        (Some("Edm.DateTime"), Json::String(s)) => {
            Value::DateTime(parse_datetime(s).ok_or_else(wrong)?)
        }
        (Some("Edm.Guid"), Json::String(s)) => {
            Value::Guid(*uuid::Uuid::parse_str(s).map_err(|_| wrong())?.as_bytes())
        }
        (Some("Edm.Binary"), Json::String(s)) => Value::Binary(
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|_| wrong())?,
        ),
        _ => return Err(wrong()),
    }))
}

/// An entity from the service's JSON object.
pub fn entity(j: &Json) -> Result<Entity> {
    let Json::Object(m) = j else {
        return Err(bad(format!("an entity is a JSON object, not {j}")));
    };
    let key = |k: &str| match m.get(k) {
        Some(Json::String(s)) => Ok(s.clone()),
        _ => Err(bad(format!("entity without {k}"))),
    };
    let etag = match m.get("odata.etag") {
        Some(Json::String(s)) => Some(ETag(s.clone())),
        _ => None,
    };
    let timestamp = match m.get("Timestamp") {
        Some(Json::String(s)) => parse_datetime(s),
        _ => None,
    }
    .or_else(|| etag.as_ref().and_then(|e| etag_time(e.as_str())))
    .unwrap_or(DateTime(0));
    let mut properties = BTreeMap::new();
    for (k, v) in m {
        if k.contains('@')
            || k.starts_with("odata.")
            || matches!(k.as_str(), "PartitionKey" | "RowKey" | "Timestamp")
        {
            continue;
        }
        let ty = match m.get(&format!("{k}@odata.type")) {
            Some(Json::String(t)) => Some(t.as_str()),
            _ => None,
        };
        if let Some(v) = from_json(k, v, ty)? {
            properties.insert(k.clone(), v);
        }
    }
    Ok(Entity {
        partition_key: key("PartitionKey")?,
        row_key: key("RowKey")?,
        timestamp,
        etag,
        properties,
    })
}

/// The time inside an ETag such as `W/"datetime'2026-11-24T20%3A00%3A00.1234567Z'"`.
pub fn etag_time(etag: &str) -> Option<DateTime> {
    let start = etag.find("datetime'")? + "datetime'".len();
    let rest = &etag[start..];
    let text = &rest[..rest.find('\'')?];
    let decoded = percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .ok()?;
    parse_datetime(&decoded)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn round_trip(v: &Value) -> Value {
        let w = EntityWrite::new("p", "r").with("x", v.clone());
        let body = write_body(&w);
        // What the service would echo back: the same members.
        let e = entity(&body).unwrap();
        e.properties["x"].clone()
    }

    #[test]
    fn every_edm_type_round_trips_with_its_annotation() {
        let values = [
            Value::String("it's ünïcode".into()),
            Value::Int32(-7),
            Value::Int64(i64::MAX),
            Value::Double(2.0),
            Value::Double(-0.5),
            Value::Double(f64::INFINITY),
            Value::Double(f64::NEG_INFINITY),
            Value::Boolean(true),
            Value::DateTime(DateTime(1_795_550_400_123_456)),
            Value::Guid(
                *uuid::Uuid::from_u128(0x0123_4567_89ab_cdef_0123_4567_89ab_cdef).as_bytes(),
            ),
            Value::Binary(vec![0, 1, 254, 255]),
        ];
        for v in values {
            let back = round_trip(&v);
            assert_eq!(back.edm_type(), v.edm_type(), "{v:?}");
            assert_eq!(back.sql_cmp(&v), Some(std::cmp::Ordering::Equal), "{v:?}");
        }
        assert!(matches!(round_trip(&Value::Double(f64::NAN)), Value::Double(d) if d.is_nan()));
        let body = write_body(&EntityWrite::new("p", "r").with("n", Value::Int64(5)));
        assert_eq!(body["n"], Json::String("5".into()));
        assert_eq!(body["n@odata.type"], Json::String("Edm.Int64".into()));
    }

    #[test]
    fn service_payloads_parse() {
        let j: Json = serde_json::from_str(
            r#"{"odata.etag":"W/\"datetime'2026-11-24T20%3A00%3A00.1234567Z'\"",
                "PartitionKey":"p","RowKey":"r",
                "Timestamp":"2026-11-24T20:00:00.1234567Z",
                "Timestamp@odata.type":"Edm.DateTime",
                "age":31,"score":2.5,"big@odata.type":"Edm.Int64","big":"9007199254740993",
                "gone":null,"ok":true}"#,
        )
        .unwrap();
        let e = entity(&j).unwrap();
        assert_eq!(e.timestamp, DateTime(1_795_550_400_123_456));
        assert_eq!(
            e.etag().as_str(),
            "W/\"datetime'2026-11-24T20%3A00%3A00.1234567Z'\""
        );
        assert_eq!(e.properties["age"], Value::Int32(31));
        assert_eq!(e.properties["big"], Value::Int64(9_007_199_254_740_993));
        assert!(matches!(e.properties["score"], Value::Double(d) if d == 2.5));
        assert!(!e.properties.contains_key("gone"));
        assert!(!e.properties.contains_key("Timestamp"));
        assert_eq!(etag_time(e.etag().as_str()), Some(e.timestamp));
        let wrong: Json = serde_json::from_str(
            r#"{"PartitionKey":"p","RowKey":"r","g@odata.type":"Edm.Guid","g":"zz"}"#,
        )
        .unwrap();
        assert!(entity(&wrong).unwrap_err().to_string().contains("\"g\""));
    }

    proptest! {
        #[test]
        fn doubles_and_int64s_survive(d in any::<f64>(), i in any::<i64>(), n in any::<i32>()) {
            for v in [Value::Double(d), Value::Int64(i), Value::Int32(n)] {
                let back = round_trip(&v);
                prop_assert_eq!(back.edm_type(), v.edm_type());
                match (&back, &v) {
                    (Value::Double(a), Value::Double(b)) => prop_assert!(a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()) || (*a == 0.0 && *b == 0.0)),
                    _ => prop_assert_eq!(back.sql_cmp(&v), Some(std::cmp::Ordering::Equal)),
                }
            }
        }
    }
}
