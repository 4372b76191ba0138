//! tablegate's vendored patch: the two pieces of `arrow-pg` this crate used,
//! so that it no longer pulls `arrow-pg` and, through it, a second `pgwire`.
//! `into_pg_type` covers the Arrow types `pg_attribute` distinguishes; every
//! other type falls back to text there, as upstream's did.

use datafusion::arrow::datatypes::DataType;
use postgres_types::Type;

/// Field metadata key marking a pgvector `vector` column (as in arrow-pg).
#[cfg(feature = "pgvector")]
pub const PG_VECTOR_KEY: &str = "pg.vector";

/// The PostgreSQL type of an Arrow type, for the types `pg_attribute` lists.
pub fn into_pg_type(data_type: &DataType) -> Option<Type> {
    Some(match data_type {
        DataType::Null => Type::UNKNOWN,
        DataType::Boolean => Type::BOOL,
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => Type::INT2,
        DataType::Int32 | DataType::UInt16 => Type::INT4,
        DataType::Int64 | DataType::UInt32 => Type::INT8,
        DataType::UInt64 | DataType::Decimal128(_, _) => Type::NUMERIC,
        DataType::Timestamp(_, Some(_)) => Type::TIMESTAMPTZ,
        DataType::Timestamp(_, None) => Type::TIMESTAMP,
        DataType::Time32(_) | DataType::Time64(_) => Type::TIME,
        DataType::Date32 | DataType::Date64 => Type::DATE,
        DataType::Interval(_) | DataType::Duration(_) => Type::INTERVAL,
        DataType::Binary
        | DataType::FixedSizeBinary(_)
        | DataType::LargeBinary
        | DataType::BinaryView => Type::BYTEA,
        DataType::Float16 | DataType::Float32 => Type::FLOAT4,
        DataType::Float64 => Type::FLOAT8,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => Type::TEXT,
        DataType::List(field) | DataType::LargeList(field) => match field.data_type() {
            DataType::Int32 | DataType::UInt16 => Type::INT4_ARRAY,
            DataType::Null | DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
                Type::TEXT_ARRAY
            }
            _ => return None,
        },
        DataType::Dictionary(_, value) => return into_pg_type(value),
        _ => return None,
    })
}
