//! Which PostgreSQL type and format each result column is sent as: the
//! planner's column types and every Arrow type DataFusion produces, each
//! mapped to one wire type.

use std::sync::Arc;

use arrow_schema::DataType;
use pgwire::api::Type;
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo};
use tablegate_catalog::SqlType;
use tablegate_planner::plan::OutputColumn;

/// The PostgreSQL type of a column type.
pub fn pg_type(t: SqlType) -> Type {
    Type::from_oid(t.pg_oid()).unwrap_or(Type::TEXT)
}

/// Column `i`'s format as the client asked. A Bind with fewer format codes
/// than columns is a protocol error the client gets (08P01 at Execute);
/// here it must not index out of bounds (pgwire's `format_for` would).
pub fn format_of(format: Option<&Format>, i: usize) -> FieldFormat {
    match format {
        Some(Format::Individual(codes)) => codes
            .get(i)
            .map_or(FieldFormat::Text, |c| FieldFormat::from(*c)),
        Some(f) => f.format_for(i),
        None => FieldFormat::Text,
    }
}

/// RowDescription fields for result columns; `format` picks text or binary
/// per column as the client asked.
pub fn fields(columns: &[OutputColumn], format: Option<&Format>) -> Vec<FieldInfo> {
    columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            FieldInfo::new(
                c.name.clone(),
                None,
                None,
                pg_type(c.column.ty),
                format_of(format, i),
            )
        })
        .collect()
}

/// One text column (EXPLAIN's "QUERY PLAN", SHOW's value).
pub fn text_field(name: &str) -> Vec<FieldInfo> {
    vec![FieldInfo::new(
        name.to_owned(),
        None,
        None,
        Type::TEXT,
        FieldFormat::Text,
    )]
}

/// The type a column is sent as: every Arrow type DataFusion can produce
/// is first cast to one of a few canonical types that map one to one to
/// PostgreSQL types.
///
/// DataFusion's UInt64 results are the window functions PostgreSQL types
/// bigint (`row_number`, `rank`, `dense_rank`): they are sent as int8 (a
/// value past i64::MAX is an error, 22003), not as numeric. A Duration is
/// a difference of timestamps, which PostgreSQL types interval.
pub(super) fn canonical(dt: &DataType) -> DataType {
    use arrow_schema::{IntervalUnit, TimeUnit};
    match dt {
        DataType::Int8 | DataType::UInt8 | DataType::Int16 => DataType::Int16,
        DataType::UInt16 | DataType::Int32 => DataType::Int32,
        DataType::UInt32 | DataType::Int64 | DataType::UInt64 => DataType::Int64,
        DataType::Float16 | DataType::Float32 => DataType::Float32,
        DataType::Float64 => DataType::Float64,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => DataType::Utf8,
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => DataType::Binary,
        DataType::FixedSizeBinary(16) => DataType::FixedSizeBinary(16),
        DataType::FixedSizeBinary(_) => DataType::Binary,
        DataType::Boolean => DataType::Boolean,
        DataType::Null => DataType::Null,
        DataType::Timestamp(_, tz) => DataType::Timestamp(TimeUnit::Microsecond, tz.clone()),
        DataType::Date32 | DataType::Date64 => DataType::Date32,
        DataType::Time32(_) | DataType::Time64(_) => DataType::Time64(TimeUnit::Microsecond),
        DataType::Decimal32(p, s) | DataType::Decimal64(p, s) | DataType::Decimal128(p, s) => {
            DataType::Decimal128(*p, *s)
        }
        DataType::Decimal256(_, s) => DataType::Decimal128(38, *s),
        DataType::Interval(_) | DataType::Duration(_) => {
            DataType::Interval(IntervalUnit::MonthDayNano)
        }
        DataType::Dictionary(_, v) => canonical(v),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::FixedSizeList(f, _)
        | DataType::ListView(f)
        | DataType::LargeListView(f) => {
            let inner = match canonical(f.data_type()) {
                t @ (DataType::Int16
                | DataType::Int32
                | DataType::Int64
                | DataType::Float32
                | DataType::Float64
                | DataType::Boolean
                | DataType::Utf8) => t,
                _ => DataType::Utf8,
            };
            DataType::List(Arc::new(arrow_schema::Field::new("item", inner, true)))
        }
        // Structs, maps, durations, unions: their text.
        _ => DataType::Utf8,
    }
}

/// The PostgreSQL type a column of this Arrow type is sent as.
pub fn pg_type_of(dt: &DataType) -> Type {
    match canonical(dt) {
        DataType::Int16 => Type::INT2,
        DataType::Int32 => Type::INT4,
        DataType::Int64 => Type::INT8,
        DataType::Float32 => Type::FLOAT4,
        DataType::Float64 => Type::FLOAT8,
        DataType::Boolean => Type::BOOL,
        DataType::Binary => Type::BYTEA,
        DataType::FixedSizeBinary(_) => Type::UUID,
        DataType::Timestamp(_, Some(_)) => Type::TIMESTAMPTZ,
        DataType::Timestamp(_, None) => Type::TIMESTAMP,
        DataType::Date32 => Type::DATE,
        DataType::Time64(_) => Type::TIME,
        DataType::Decimal128(..) => Type::NUMERIC,
        DataType::Interval(_) => Type::INTERVAL,
        DataType::List(f) => match f.data_type() {
            DataType::Int16 => Type::INT2_ARRAY,
            DataType::Int32 => Type::INT4_ARRAY,
            DataType::Int64 => Type::INT8_ARRAY,
            DataType::Float32 => Type::FLOAT4_ARRAY,
            DataType::Float64 => Type::FLOAT8_ARRAY,
            DataType::Boolean => Type::BOOL_ARRAY,
            _ => Type::TEXT_ARRAY,
        },
        _ => Type::TEXT,
    }
}

/// RowDescription fields for an Arrow schema (analytics results).
pub fn arrow_fields(schema: &arrow_schema::Schema, format: Option<&Format>) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            FieldInfo::new(
                f.name().clone(),
                None,
                None,
                pg_type_of(f.data_type()),
                format_of(format, i),
            )
        })
        .collect()
}
