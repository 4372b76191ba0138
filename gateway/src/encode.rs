//! Results on the wire: planner columns to RowDescription fields, and Arrow
//! record batches to DataRows in text or binary format, streamed batch by
//! batch (never the whole result in memory).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type, TimestampMicrosecondType};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use futures::{Stream, StreamExt};
use pgwire::api::Type;
use pgwire::api::portal::Format;
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use tablegate_catalog::SqlType;
use tablegate_planner::RowStream;
use tablegate_planner::plan::OutputColumn;

use crate::sqlstate::PgError;
use crate::telemetry::{StatementClass, StatementGuard};

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

/// Turns a PgError into pgwire's error.
pub fn wire_error(e: PgError) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(e)))
}

/// pgwire's ErrorInfo for a PgError.
pub fn error_info(e: PgError) -> ErrorInfo {
    let mut info = ErrorInfo::new("ERROR".to_owned(), e.code.to_owned(), e.message);
    info.detail = e.detail;
    info.hint = e.hint;
    info.position = e.position.map(|p| p.to_string());
    info
}

/// The text-format fields of an encoded DataRow (`None` is NULL): what
/// COPY writes is exactly what a SELECT sends.
pub(crate) fn text_values(row: &DataRow) -> Vec<Option<String>> {
    let mut out = Vec::with_capacity(row.field_count.max(0) as usize);
    let d = &row.data[..];
    let mut i = 0;
    while i + 4 <= d.len() {
        let len = i32::from_be_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
        i += 4;
        if len < 0 {
            out.push(None);
        } else {
            let end = (i + len as usize).min(d.len());
            out.push(Some(String::from_utf8_lossy(&d[i..end]).into_owned()));
            i = end;
        }
    }
    out
}

/// The type a column is sent as: every Arrow type DataFusion can produce
/// is first cast to one of a few canonical types that map one to one to
/// PostgreSQL types.
///
/// DataFusion's UInt64 results are the window functions PostgreSQL types
/// bigint (`row_number`, `rank`, `dense_rank`): they are sent as int8 (a
/// value past i64::MAX is an error, 22003), not as numeric. A Duration is
/// a difference of timestamps, which PostgreSQL types interval.
fn canonical(dt: &DataType) -> DataType {
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

/// NUMERIC from its decimal text, in PostgreSQL's binary layout (base
/// 10,000 digits) or as text.
#[derive(Debug)]
struct Numeric(String);

impl postgres_types::ToSql for Numeric {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use bytes::BufMut;
        let s = self.0.as_str();
        let (neg, s) = match s.strip_prefix('-') {
            Some(r) => (true, r),
            None => (false, s),
        };
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        let int = int.trim_start_matches('0');
        let dscale = frac.len();
        // Pad the integer part on the left and the fraction on the right
        // to whole base-10,000 digits.
        let lead = (4 - int.len() % 4) % 4;
        let int_p = format!("{}{int}", "0".repeat(lead));
        let trail = (4 - frac.len() % 4) % 4;
        let frac_p = format!("{frac}{}", "0".repeat(trail));
        let mut digits: Vec<i16> = Vec::new();
        for c in int_p
            .as_bytes()
            .chunks(4)
            .chain(frac_p.as_bytes().chunks(4))
        {
            digits.push(std::str::from_utf8(c)?.parse()?);
        }
        let mut weight = (int_p.len() / 4) as i16 - 1;
        while digits.first() == Some(&0) {
            digits.remove(0);
            weight -= 1;
        }
        while digits.last() == Some(&0) {
            digits.pop();
        }
        if digits.is_empty() {
            weight = 0;
        }
        out.put_i16(digits.len() as i16);
        out.put_i16(weight);
        out.put_u16(if neg && !digits.is_empty() { 0x4000 } else { 0 });
        out.put_u16(dscale as u16);
        for d in digits {
            out.put_i16(d);
        }
        Ok(postgres_types::IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::NUMERIC
    }

    postgres_types::to_sql_checked!();
}

impl pgwire::types::ToSqlText for Numeric {
    fn to_sql_text(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
        _o: &pgwire::types::format::FormatOptions,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(self.0.as_bytes());
        Ok(postgres_types::IsNull::No)
    }
}

/// INTERVAL as months, days and microseconds.
#[derive(Debug)]
struct Interval {
    months: i32,
    days: i32,
    micros: i64,
}

impl postgres_types::ToSql for Interval {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use bytes::BufMut;
        out.put_i64(self.micros);
        out.put_i32(self.days);
        out.put_i32(self.months);
        Ok(postgres_types::IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::INTERVAL
    }

    postgres_types::to_sql_checked!();
}

impl pgwire::types::ToSqlText for Interval {
    fn to_sql_text(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
        _o: &pgwire::types::format::FormatOptions,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        // PostgreSQL's default (postgres) style: 1 year 2 mons 3 days
        // 04:05:06. A unit is plural unless its value is exactly 1 (so
        // `-1 days`); a positive part after a negative one gets a `+`.
        let mut parts = Vec::new();
        let mut before_negative = false;
        for (v, unit) in [
            (self.months / 12, "year"),
            (self.months % 12, "mon"),
            (self.days, "day"),
        ] {
            if v != 0 {
                let plus = if before_negative && v > 0 { "+" } else { "" };
                let s = if v == 1 { "" } else { "s" };
                parts.push(format!("{plus}{v} {unit}{s}"));
                before_negative = v < 0;
            }
        }
        if self.micros != 0 || parts.is_empty() {
            let sign = if self.micros < 0 {
                "-"
            } else if before_negative {
                "+"
            } else {
                ""
            };
            let t = self.micros.unsigned_abs();
            let (h, rest) = (t / 3_600_000_000, t % 3_600_000_000);
            let (mi, rest) = (rest / 60_000_000, rest % 60_000_000);
            let (sec, us) = (rest / 1_000_000, rest % 1_000_000);
            let mut time = format!("{sign}{h:02}:{mi:02}:{sec:02}");
            push_fraction(&mut time, us);
            parts.push(time);
        }
        out.extend_from_slice(parts.join(" ").as_bytes());
        Ok(postgres_types::IsNull::No)
    }
}

/// Encodes every row of a batch, whatever Arrow types it holds.
pub(crate) fn encode_batch(
    batch: &RecordBatch,
    fields: &Arc<Vec<FieldInfo>>,
    out: &mut Vec<DataRow>,
) -> PgWireResult<()> {
    let mut columns = Vec::with_capacity(batch.num_columns());
    for col in batch.columns() {
        let want = canonical(col.data_type());
        if *col.data_type() == want {
            columns.push(col.clone());
        } else if want == DataType::Utf8 && !can_cast_text(col.data_type()) {
            columns.push(format_as_text(col)?);
        } else if let DataType::Duration(unit) = col.data_type() {
            columns.push(duration_as_interval(col, *unit)?);
        } else {
            // Not `safe`: a value the PostgreSQL type cannot hold (a UInt64
            // past i64::MAX) is an error, never a NULL.
            let options = arrow_cast::CastOptions {
                safe: false,
                ..Default::default()
            };
            columns.push(
                arrow_cast::cast_with_options(col, &want, &options).map_err(|e| {
                    let code = if *col.data_type() == DataType::UInt64 {
                        "22003"
                    } else {
                        "22000"
                    };
                    wire_error(PgError::new(
                        code,
                        format!("cannot send {} as {want}: {e}", col.data_type()),
                    ))
                })?,
            );
        }
    }
    let cells: Vec<Cells<'_>> = columns.iter().map(Cells::of).collect();
    // Room for a first row of short values: an empty buffer would grow
    // 8, 16, 32... bytes, copying each time (a point lookup's one row).
    let mut enc = RowEncoder::with_capacity(64 * fields.len().max(1));
    let rows = batch.num_rows();
    for row in 0..rows {
        for (col, field) in cells.iter().zip(fields.iter()) {
            col.encode(&mut enc, row, field)?;
        }
        out.push(enc.take_row());
        if row == 0 {
            // The rest of the batch, sized by its first row: one buffer
            // for all of them (rows of a key-value table are alike).
            enc.reserve((out[0].data.len() + 8) * (rows - 1));
        }
    }
    Ok(())
}

/// DataRows of one batch written into one buffer, each row split off it.
/// pgwire's `DataRowEncoder` starts with 128 bytes and grows by copying;
/// a 150-byte row then cost a reallocation, a copy and a new buffer every
/// row. The fields are encoded exactly as that encoder does (same length
/// prefixes, same `ToSql`/`ToSqlText`), which a test checks.
#[derive(Debug, Default)]
pub(crate) struct RowEncoder {
    buf: bytes::BytesMut,
    fields: i16,
}

impl RowEncoder {
    /// An encoder whose first `bytes` need no growing.
    pub(crate) fn with_capacity(bytes: usize) -> Self {
        RowEncoder {
            buf: bytes::BytesMut::with_capacity(bytes),
            fields: 0,
        }
    }

    /// Room for `bytes` more without growing.
    fn reserve(&mut self, bytes: usize) {
        self.buf.reserve(bytes);
    }

    /// Appends one field: its length (-1 for NULL), then its bytes.
    pub(crate) fn encode_field_with_type_and_format<T>(
        &mut self,
        value: &T,
        ty: &Type,
        format: FieldFormat,
        options: &pgwire::types::format::FormatOptions,
    ) -> PgWireResult<()>
    where
        T: postgres_types::ToSql + pgwire::types::ToSqlText + Sized,
    {
        use bytes::BufMut;
        let at = self.buf.len();
        self.buf.put_i32(-1);
        let null = if format == FieldFormat::Text {
            value.to_sql_text(ty, &mut self.buf, options)?
        } else {
            value.to_sql(ty, &mut self.buf)?
        };
        if let postgres_types::IsNull::No = null {
            let len = (self.buf.len() - at - 4) as i32;
            self.buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
        }
        self.fields += 1;
        Ok(())
    }

    /// The row written since the last one.
    pub(crate) fn take_row(&mut self) -> DataRow {
        let row = DataRow::new(self.buf.split(), self.fields);
        self.fields = 0;
        row
    }
}

/// One column of a batch with its Arrow type resolved once, not once per
/// cell: the common types of key-value answers go straight to their text,
/// everything else through [`encode_value`]. With ryu for floats this took
/// a tenth off a 100-row range query's server CPU (the type match and
/// downcast per cell, and `Display` for numbers, were that much).
enum Cells<'a> {
    Text(&'a arrow_array::StringArray),
    Int32(&'a arrow_array::Int32Array),
    Int64(&'a arrow_array::Int64Array),
    Float64(&'a arrow_array::Float64Array),
    Other(&'a arrow_array::ArrayRef),
}

impl<'a> Cells<'a> {
    fn of(col: &'a arrow_array::ArrayRef) -> Self {
        match col.data_type() {
            DataType::Utf8 => Cells::Text(col.as_string::<i32>()),
            DataType::Int32 => Cells::Int32(col.as_primitive::<Int32Type>()),
            DataType::Int64 => Cells::Int64(col.as_primitive::<Int64Type>()),
            DataType::Float64 => Cells::Float64(col.as_primitive::<Float64Type>()),
            _ => Cells::Other(col),
        }
    }

    fn encode(&self, enc: &mut RowEncoder, row: usize, field: &FieldInfo) -> PgWireResult<()> {
        let text = field.format() == FieldFormat::Text;
        match self {
            Cells::Other(col) => encode_value(enc, col, row, field),
            Cells::Text(a) if a.is_null(row) => put(enc, field, &None::<i32>),
            Cells::Int32(a) if a.is_null(row) => put(enc, field, &None::<i32>),
            Cells::Int64(a) if a.is_null(row) => put(enc, field, &None::<i32>),
            Cells::Float64(a) if a.is_null(row) => put(enc, field, &None::<i32>),
            Cells::Text(a) => put(enc, field, &a.value(row)),
            // Text: the digits as a string (pgwire writes integers with
            // `write!`); binary: pgwire's big-endian bytes.
            Cells::Int32(a) if text => put(enc, field, &itoa::Buffer::new().format(a.value(row))),
            Cells::Int64(a) if text => put(enc, field, &itoa::Buffer::new().format(a.value(row))),
            Cells::Int32(a) => put(enc, field, &a.value(row)),
            Cells::Int64(a) => put(enc, field, &a.value(row)),
            Cells::Float64(a) => put(enc, field, &PgFloat::F8(a.value(row))),
        }
    }
}

/// A double as PostgreSQL prints it (shortest round-trip digits): `41`,
/// `2.5`, `1e+20`, `1.5e-05`, `NaN`, `Infinity`.
pub fn pg_float_text(d: f64) -> String {
    let mut s = String::new();
    let _ = PgFloat::F8(d).write(&mut s);
    s
}

/// A real (float4) as PostgreSQL prints it: the shortest digits that
/// round-trip as a float4 (`0.1`, not the double's `0.10000000149011612`),
/// in exponent form from 1e+06 on.
pub fn pg_float4_text(d: f32) -> String {
    let mut s = String::new();
    let _ = PgFloat::F4(d).write(&mut s);
    s
}

/// A float in a DataRow: its text written straight into the row's buffer
/// (a `String` per value was a tenth of a 100-row range query's CPU).
#[derive(Debug, Clone, Copy)]
enum PgFloat {
    F4(f32),
    F8(f64),
}

impl PgFloat {
    fn write(self, out: &mut impl std::fmt::Write) -> std::fmt::Result {
        match self {
            PgFloat::F8(d) => {
                let a = d.abs();
                let fixed = a == 0.0 || (1e-4..1e15).contains(&a);
                write_float(out, d, d.is_nan(), d.is_infinite(), d > 0.0, fixed)
            }
            PgFloat::F4(d) => {
                let a = d.abs();
                let fixed = a == 0.0 || (1e-4..1e6).contains(&a);
                write_float(out, d, d.is_nan(), d.is_infinite(), d > 0.0, fixed)
            }
        }
    }
}

impl postgres_types::ToSql for PgFloat {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match *self {
            PgFloat::F4(d) => d.to_sql(ty, out),
            PgFloat::F8(d) => d.to_sql(ty, out),
        }
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::FLOAT4 || *ty == Type::FLOAT8
    }

    postgres_types::to_sql_checked!();
}

impl pgwire::types::ToSqlText for PgFloat {
    fn to_sql_text(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
        _o: &pgwire::types::format::FormatOptions,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        self.write(out)?;
        Ok(postgres_types::IsNull::No)
    }
}

fn write_float<F: ryu::Float + std::fmt::LowerExp>(
    out: &mut impl std::fmt::Write,
    d: F,
    nan: bool,
    infinite: bool,
    positive: bool,
    fixed: bool,
) -> std::fmt::Result {
    use std::fmt::Write as _;
    if nan {
        return out.write_str("NaN");
    }
    if infinite {
        return out.write_str(if positive { "Infinity" } else { "-Infinity" });
    }
    if fixed {
        // ryu's shortest round-trip digits: about twice as fast as
        // `Display`, and like PostgreSQL (whose float output is ryu) in an
        // exact tie, where `Display` rounds up. In this range ryu never
        // uses an exponent, and marks whole numbers with a `.0` that
        // PostgreSQL does not print (`41`, `-0`).
        let mut b = ryu::Buffer::new();
        let s = b.format_finite(d);
        return out.write_str(s.strip_suffix(".0").unwrap_or(s));
    }
    // Exponent form, PostgreSQL style: mantissa, 'e', sign, two+ digits.
    // Rust's `{:e}` of a double is at most 24 bytes (`-2.2250738585072014e-308`).
    let mut e = StackText::<32>::default();
    write!(e, "{d:e}")?;
    let e = e.as_str();
    let (m, x) = e.split_once('e').unwrap_or((e, "0"));
    let x: i32 = x.parse().unwrap_or(0);
    write!(out, "{m}e{}{:02}", if x < 0 { '-' } else { '+' }, x.abs())
}

/// A few bytes of text on the stack.
struct StackText<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> Default for StackText<N> {
    fn default() -> Self {
        StackText {
            buf: [0; N],
            len: 0,
        }
    }
}

impl<const N: usize> StackText<N> {
    fn as_str(&self) -> &str {
        // Only whole `str`s are ever written.
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl<const N: usize> std::fmt::Write for StackText<N> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Appends `.ffffff` without trailing zeros (nothing for zero), as
/// PostgreSQL prints fractional seconds.
fn push_fraction(out: &mut String, us: u64) {
    if us != 0 {
        out.push_str(format!(".{us:06}").trim_end_matches('0'));
    }
}

/// An array's text from its elements' texts (`None`: NULL), for elements
/// that never need quotes (numbers).
fn array_text(elems: impl Iterator<Item = Option<String>>) -> String {
    let elems: Vec<String> = elems
        .map(|e| e.unwrap_or_else(|| "NULL".to_owned()))
        .collect();
    format!("{{{}}}", elems.join(","))
}

/// An empty array in PostgreSQL's binary layout: no dimensions (ndim 0),
/// no NULLs, the element type, nothing else. (postgres-types would send a
/// one-dimensional array of length 0, which PostgreSQL never does.)
#[derive(Debug)]
struct EmptyArray;

impl postgres_types::ToSql for EmptyArray {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        use bytes::BufMut;
        let postgres_types::Kind::Array(elem) = ty.kind() else {
            return Err(format!("{ty} is not an array type").into());
        };
        out.put_i32(0);
        out.put_i32(0);
        out.put_u32(elem.oid());
        Ok(postgres_types::IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        matches!(ty.kind(), postgres_types::Kind::Array(_))
    }

    postgres_types::to_sql_checked!();
}

impl pgwire::types::ToSqlText for EmptyArray {
    fn to_sql_text(
        &self,
        _ty: &Type,
        out: &mut bytes::BytesMut,
        _o: &pgwire::types::format::FormatOptions,
    ) -> Result<postgres_types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        out.extend_from_slice(b"{}");
        Ok(postgres_types::IsNull::No)
    }
}

/// A Duration column (a difference of timestamps) as PostgreSQL's
/// `timestamp - timestamp` gives it: an interval of days and time, whole
/// days moved out of the time (`justify_hours`: both parts carry the sign
/// of the difference), no months.
fn duration_as_interval(
    col: &arrow_array::ArrayRef,
    unit: arrow_schema::TimeUnit,
) -> PgWireResult<arrow_array::ArrayRef> {
    use arrow_array::types::{
        DurationMicrosecondType, DurationMillisecondType, DurationNanosecondType,
        DurationSecondType, IntervalMonthDayNano,
    };
    use arrow_schema::TimeUnit;
    const DAY_NS: i64 = 86_400_000_000_000;
    let (values, ns): (arrow_array::Int64Array, i64) = match unit {
        TimeUnit::Second => (
            col.as_primitive::<DurationSecondType>().reinterpret_cast(),
            1_000_000_000,
        ),
        TimeUnit::Millisecond => (
            col.as_primitive::<DurationMillisecondType>()
                .reinterpret_cast(),
            1_000_000,
        ),
        TimeUnit::Microsecond => (
            col.as_primitive::<DurationMicrosecondType>()
                .reinterpret_cast(),
            1_000,
        ),
        TimeUnit::Nanosecond => (
            col.as_primitive::<DurationNanosecondType>()
                .reinterpret_cast(),
            1,
        ),
    };
    let out: arrow_array::IntervalMonthDayNanoArray = values
        .iter()
        .map(|v| {
            let Some(v) = v else { return Ok(None) };
            // Whole days first, so that second durations past i64
            // nanoseconds (292 years) still fit.
            let per_day = DAY_NS / ns;
            let days = i32::try_from(v / per_day)
                .map_err(|_| wire_error(PgError::new("22008", "interval out of range")))?;
            Ok(Some(IntervalMonthDayNano::new(0, days, (v % per_day) * ns)))
        })
        .collect::<PgWireResult<_>>()?;
    Ok(Arc::new(out))
}

fn can_cast_text(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Dictionary(..)
    )
}

/// Any column as its display text (structs, maps, durations).
fn format_as_text(col: &arrow_array::ArrayRef) -> PgWireResult<arrow_array::ArrayRef> {
    let fmt = arrow_cast::display::ArrayFormatter::try_new(col.as_ref(), &Default::default())
        .map_err(|e| wire_error(PgError::new("22000", e.to_string())))?;
    let values: Vec<Option<String>> = (0..col.len())
        .map(|i| (!col.is_null(i)).then(|| fmt.value(i).to_string()))
        .collect();
    Ok(Arc::new(arrow_array::StringArray::from(values)))
}

/// One value in the column's type and format. pgwire's `encode_field`
/// clones the field's type and format options for every value; this
/// borrows them.
fn put<T>(enc: &mut RowEncoder, field: &FieldInfo, v: &T) -> PgWireResult<()>
where
    T: postgres_types::ToSql + pgwire::types::ToSqlText + Sized,
{
    enc.encode_field_with_type_and_format(
        v,
        field.datatype(),
        field.format(),
        field.format_options(),
    )
}

fn encode_value(
    enc: &mut RowEncoder,
    col: &arrow_array::ArrayRef,
    row: usize,
    field: &FieldInfo,
) -> PgWireResult<()> {
    use arrow_array::types::{
        Date32Type, Float32Type, Int16Type, IntervalMonthDayNanoType, Time64MicrosecondType,
    };
    let ty = field.datatype();
    let binary = field.format() == FieldFormat::Binary;
    if col.is_null(row) {
        return put(enc, field, &None::<i32>);
    }
    match col.data_type() {
        DataType::Null => put(enc, field, &None::<i32>),
        DataType::Utf8 => put(enc, field, &col.as_string::<i32>().value(row)),
        DataType::Int16 => put(enc, field, &col.as_primitive::<Int16Type>().value(row)),
        DataType::Int32 => put(enc, field, &col.as_primitive::<Int32Type>().value(row)),
        DataType::Int64 => put(enc, field, &col.as_primitive::<Int64Type>().value(row)),
        DataType::Float32 => enc.encode_field_with_type_and_format(
            &PgFloat::F4(col.as_primitive::<Float32Type>().value(row)),
            ty,
            field.format(),
            field.format_options(),
        ),
        DataType::Float64 => enc.encode_field_with_type_and_format(
            &PgFloat::F8(col.as_primitive::<Float64Type>().value(row)),
            ty,
            field.format(),
            field.format_options(),
        ),
        DataType::Boolean => put(enc, field, &col.as_boolean().value(row)),
        DataType::Timestamp(_, tz) => {
            let micros = col.as_primitive::<TimestampMicrosecondType>().value(row);
            let t = chrono::DateTime::from_timestamp_micros(micros).unwrap_or_default();
            if !binary {
                // PostgreSQL's text: fractional seconds without trailing
                // zeros, and the zone as +00 (sessions are UTC).
                let mut text = t.format("%Y-%m-%d %H:%M:%S").to_string();
                push_fraction(&mut text, micros.rem_euclid(1_000_000).unsigned_abs());
                if tz.is_some() {
                    text.push_str("+00");
                }
                return enc.encode_field_with_type_and_format(
                    &text,
                    ty,
                    FieldFormat::Text,
                    field.format_options(),
                );
            }
            if tz.is_some() {
                put(enc, field, &t)
            } else {
                put(enc, field, &t.naive_utc())
            }
        }
        DataType::Date32 => {
            let days = col.as_primitive::<Date32Type>().value(row);
            let d = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)
                .unwrap_or_default()
                .checked_add_signed(chrono::TimeDelta::days(days.into()))
                .unwrap_or_default();
            put(enc, field, &d)
        }
        DataType::Time64(_) if !binary => {
            // PostgreSQL's text: fractional seconds without trailing zeros.
            let us = col
                .as_primitive::<Time64MicrosecondType>()
                .value(row)
                .unsigned_abs();
            let s = us / 1_000_000;
            let mut text = format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
            push_fraction(&mut text, us % 1_000_000);
            enc.encode_field_with_type_and_format(
                &text,
                ty,
                FieldFormat::Text,
                field.format_options(),
            )
        }
        DataType::Time64(_) => {
            let us = col.as_primitive::<Time64MicrosecondType>().value(row);
            let t = chrono::NaiveTime::from_num_seconds_from_midnight_opt(
                (us / 1_000_000) as u32,
                ((us % 1_000_000) * 1000) as u32,
            )
            .unwrap_or_default();
            put(enc, field, &t)
        }
        DataType::Decimal128(_, _) => {
            let text =
                arrow_cast::display::ArrayFormatter::try_new(col.as_ref(), &Default::default())
                    .map_err(|e| wire_error(PgError::new("22000", e.to_string())))?
                    .value(row)
                    .to_string();
            put(enc, field, &Numeric(text))
        }
        DataType::Interval(_) => {
            let v = col.as_primitive::<IntervalMonthDayNanoType>().value(row);
            put(
                enc,
                field,
                &Interval {
                    months: v.months,
                    days: v.days,
                    micros: v.nanoseconds / 1000,
                },
            )
        }
        DataType::FixedSizeBinary(16) => {
            let b = col.as_fixed_size_binary().value(row);
            if binary {
                enc.encode_field_with_type_and_format(
                    &b,
                    ty,
                    FieldFormat::Binary,
                    field.format_options(),
                )
            } else {
                let text = tablegate_store::entity::guid_text(b.try_into().expect("16 bytes"));
                enc.encode_field_with_type_and_format(
                    &text,
                    ty,
                    FieldFormat::Text,
                    field.format_options(),
                )
            }
        }
        DataType::Binary => put(enc, field, &col.as_binary::<i32>().value(row)),
        DataType::List(_) => {
            let list = col.as_list::<i32>().value(row);
            if list.is_empty() {
                return put(enc, field, &EmptyArray);
            }
            // Float elements in text as PostgreSQL prints them (NaN,
            // Infinity, exponents), like the scalars.
            let float_text = match list.data_type() {
                DataType::Float32 if !binary => Some(array_text(
                    list.as_primitive::<Float32Type>()
                        .iter()
                        .map(|v| v.map(pg_float4_text)),
                )),
                DataType::Float64 if !binary => Some(array_text(
                    list.as_primitive::<Float64Type>()
                        .iter()
                        .map(|v| v.map(pg_float_text)),
                )),
                _ => None,
            };
            if let Some(text) = float_text {
                return enc.encode_field_with_type_and_format(
                    &text,
                    &Type::TEXT,
                    FieldFormat::Text,
                    field.format_options(),
                );
            }
            match list.data_type() {
                DataType::Int16 => put(
                    enc,
                    field,
                    &list.as_primitive::<Int16Type>().iter().collect::<Vec<_>>(),
                ),
                DataType::Int32 => put(
                    enc,
                    field,
                    &list.as_primitive::<Int32Type>().iter().collect::<Vec<_>>(),
                ),
                DataType::Int64 => put(
                    enc,
                    field,
                    &list.as_primitive::<Int64Type>().iter().collect::<Vec<_>>(),
                ),
                DataType::Float32 => put(
                    enc,
                    field,
                    &list
                        .as_primitive::<Float32Type>()
                        .iter()
                        .collect::<Vec<_>>(),
                ),
                DataType::Float64 => put(
                    enc,
                    field,
                    &list
                        .as_primitive::<Float64Type>()
                        .iter()
                        .collect::<Vec<_>>(),
                ),
                DataType::Boolean => put(enc, field, &list.as_boolean().iter().collect::<Vec<_>>()),
                DataType::Utf8 => put(
                    enc,
                    field,
                    &list
                        .as_string::<i32>()
                        .iter()
                        .map(|v| v.map(str::to_owned))
                        .collect::<Vec<_>>(),
                ),
                other => Err(wire_error(PgError::new(
                    "0A000",
                    format!("cannot send arrays of Arrow type {other}"),
                ))),
            }
        }
        other => Err(wire_error(PgError::new(
            "0A000",
            format!("cannot send values of Arrow type {other}"),
        ))),
    }
}

/// When a running statement must stop: statement_timeout, or a cancel
/// request arriving after the statement started.
#[derive(Debug, Clone)]
pub struct Stop {
    /// statement_timeout's deadline.
    pub deadline: Option<std::time::Instant>,
    /// The session's cancel signal.
    pub cancel: std::sync::Arc<crate::cancel::CancelSignal>,
    /// Its generation when the statement started.
    pub since: u64,
}

impl Stop {
    /// Completes with the 57014 error when the statement must stop.
    pub async fn wait(&self) -> PgError {
        let timeout = async {
            match self.deadline {
                Some(d) => tokio::time::sleep_until(d.into()).await,
                None => futures::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = timeout => PgError::cancelled(true),
            _ = self.cancel.cancelled(self.since) => PgError::cancelled(false),
        }
    }
}

/// DataRows of a running native query, produced batch by batch as the
/// client reads them; ends with 57014 when `stop` fires.
/// `guard`, when given, learns the bound access class and the store's
/// actuals, and records the statement when the stream ends or is dropped.
pub fn row_stream(
    rows: RowStream,
    fields: Arc<Vec<FieldInfo>>,
    stop: Stop,
    mut guard: Option<StatementGuard>,
) -> impl Stream<Item = PgWireResult<DataRow>> + Send {
    if let Some(g) = guard.as_mut() {
        g.set_class(StatementClass::Access(rows.class()));
    }
    let batches = futures::stream::unfold((rows, guard), |(mut rows, mut guard)| async move {
        let next = rows.next().await;
        if let Some(g) = guard.as_mut() {
            g.set_actuals(&rows.actuals());
            if matches!(next, Some(Err(_))) {
                g.fail();
            }
        }
        Some((next?.map_err(|e| PgError::from(&e)), (rows, guard)))
    });
    batch_stream(Box::pin(batches), fields, stop)
}

/// Counts the rows of an analytics result into `guard`, which records the
/// statement when the stream ends or is dropped.
pub fn counted<S>(
    batches: S,
    mut guard: StatementGuard,
) -> impl Stream<Item = Result<RecordBatch, PgError>> + Send + Unpin
where
    S: Stream<Item = Result<RecordBatch, PgError>> + Send + Unpin,
{
    let mut rows = 0u64;
    batches.map(move |b| {
        match &b {
            Ok(batch) => {
                rows += batch.num_rows() as u64;
                guard.set_rows(rows);
            }
            Err(_) => guard.fail(),
        }
        b
    })
}

/// DataRows of any stream of record batches (the native path's, or the
/// analytics engine's); ends with 57014 when `stop` fires.
pub fn batch_stream<S>(
    batches: S,
    fields: Arc<Vec<FieldInfo>>,
    stop: Stop,
) -> impl Stream<Item = PgWireResult<DataRow>> + Send
where
    S: Stream<Item = Result<RecordBatch, PgError>> + Send + Unpin + 'static,
{
    // One step per batch: its rows are encoded together, then handed out
    // by a plain iterator. (A step per row moved the whole stream state in
    // and out of a new future for every row, ~4% of a 100-row range
    // query.) A batch's rows all go out before `stop` is looked at again.
    let per_batch = futures::stream::unfold((batches, false), move |(mut batches, done)| {
        let fields = fields.clone();
        let stop = stop.clone();
        async move {
            if done {
                return None;
            }
            let next = tokio::select! {
                n = batches.next() => n,
                e = stop.wait() => return Some((Err(wire_error(e)), (batches, true))),
            };
            match next? {
                Err(e) => Some((Err(wire_error(e)), (batches, true))),
                Ok(batch) => {
                    let mut rows = Vec::with_capacity(batch.num_rows());
                    match encode_batch(&batch, &fields, &mut rows) {
                        Ok(()) => Some((Ok(rows), (batches, false))),
                        Err(e) => Some((Err(e), (batches, true))),
                    }
                }
            }
        }
    });
    per_batch
        .flat_map(|encoded| {
            let (rows, error) = match encoded {
                Ok(rows) => (rows, None),
                Err(e) => (Vec::new(), Some(Err(e))),
            };
            futures::stream::iter(rows.into_iter().map(Ok).chain(error))
        })
        // Polled again after its end (a FETCH past the last row) it must
        // say None, not panic.
        .fuse()
}

#[cfg(test)]
mod tests {
    use super::{PgFloat, pg_float_text, pg_float4_text};
    use proptest::prelude::*;

    /// A double of any digits between 1e-4 and 1e15 (the fixed-point
    /// range), either sign.
    fn fixed_range_double() -> impl Strategy<Value = f64> {
        (-4.0f64..15.0, any::<u32>(), any::<bool>()).prop_map(|(e, bits, neg)| {
            let d = f64::from_bits(10f64.powf(e).to_bits() ^ u64::from(bits & 0xF_FFFF));
            let d = d.clamp(1e-4, 9.999_999_999_999_99e14);
            if neg { -d } else { d }
        })
    }

    proptest! {
        /// In the fixed-point range the text has no exponent and no `.0`,
        /// reads back as the same value, and has as few digits as
        /// `Display`'s (both are shortest; they differ only in exact ties).
        #[test]
        fn fixed_point_floats_are_shortest_round_trips(
            d in fixed_range_double(),
            whole in any::<i32>(),
            r in -1e6f32..1e6,
        ) {
            let w = f64::from(whole);
            for (v, text, display) in [
                (d, pg_float_text(d), format!("{d}")),
                (w, pg_float_text(w), format!("{w}")),
            ] {
                prop_assert!(!text.contains('e') && !text.ends_with(".0"), "{}", text);
                prop_assert_eq!(text.parse::<f64>().unwrap(), v);
                prop_assert_eq!(text.len(), display.len(), "{} vs {}", text, display);
            }
            if r.abs() >= 1e-4 {
                let text = pg_float4_text(r);
                prop_assert_eq!(text.parse::<f32>().unwrap(), r);
                prop_assert_eq!(text.len(), format!("{r}").len());
            }
        }
    }

    /// An exact tie between two shortest candidates takes the even digit,
    /// as PostgreSQL 15 prints it (`SELECT 448951.625::float4`); Rust's
    /// `Display` rounds it up to 448951.63.
    #[test]
    fn float_ties_round_like_postgres() {
        // Exactly a float4: 448951 and 20/32.
        let tie = 448_951.0 + 20.0 / 32.0;
        assert_eq!(pg_float4_text(tie), "448951.62");
    }

    /// The per-column fast path writes the same DataRows as the generic
    /// per-cell one, NULLs included, in text and binary.
    #[test]
    fn column_fast_path_equals_generic_encoding() {
        use std::sync::Arc;

        use arrow_array::cast::AsArray;
        use arrow_array::{
            Array, ArrayRef, Float64Array, Int32Array, Int64Array, RecordBatch, StringArray,
        };
        use pgwire::api::Type;
        use pgwire::api::results::{DataRowEncoder, FieldFormat, FieldInfo};

        let columns: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec![Some("a"), None, Some("ünï")])),
            Arc::new(Int32Array::from(vec![Some(i32::MIN), Some(0), None])),
            Arc::new(Int64Array::from(vec![None, Some(i64::MAX), Some(-7)])),
            Arc::new(Float64Array::from(vec![Some(0.5), None, Some(-1e300)])),
        ];
        let batch = RecordBatch::try_from_iter(
            ["s", "i", "l", "d"]
                .into_iter()
                .zip(columns.iter().cloned()),
        )
        .unwrap();
        for format in [FieldFormat::Text, FieldFormat::Binary] {
            let fields = Arc::new(
                [
                    ("s", Type::TEXT),
                    ("i", Type::INT4),
                    ("l", Type::INT8),
                    ("d", Type::FLOAT8),
                ]
                .into_iter()
                .map(|(n, t)| FieldInfo::new(n.into(), None, None, t, format))
                .collect::<Vec<_>>(),
            );
            let mut fast = Vec::new();
            super::encode_batch(&batch, &fields, &mut fast).unwrap();
            let mut generic = super::RowEncoder::default();
            // The reference: pgwire's own encoder, value by value.
            let mut pg = DataRowEncoder::new(fields.clone());
            let (s, i, l, d) = (
                columns[0].as_string::<i32>(),
                columns[1].as_primitive::<arrow_array::types::Int32Type>(),
                columns[2].as_primitive::<arrow_array::types::Int64Type>(),
                columns[3].as_primitive::<arrow_array::types::Float64Type>(),
            );
            for (row, got) in fast.iter().enumerate() {
                for (col, field) in columns.iter().zip(fields.iter()) {
                    super::encode_value(&mut generic, col, row, field).unwrap();
                }
                assert_eq!(got.data, generic.take_row().data, "{format:?} row {row}");
                pg.encode_field(&s.is_valid(row).then(|| s.value(row)))
                    .unwrap();
                pg.encode_field(&i.is_valid(row).then(|| i.value(row)))
                    .unwrap();
                pg.encode_field(&l.is_valid(row).then(|| l.value(row)))
                    .unwrap();
                pg.encode_field(&d.is_valid(row).then(|| PgFloat::F8(d.value(row))))
                    .unwrap();
                let want = pg.take_row();
                assert_eq!(got.data, want.data, "{format:?} row {row} (pgwire)");
                assert_eq!(got.field_count, want.field_count);
            }
            assert_eq!(fast.len(), 3);
        }
        let mut rows = Vec::new();
        let fields = Arc::new(vec![FieldInfo::new(
            "i".into(),
            None,
            None,
            Type::INT4,
            FieldFormat::Text,
        )]);
        let one = RecordBatch::try_from_iter([("i", columns[1].clone())]).unwrap();
        super::encode_batch(&one, &fields, &mut rows).unwrap();
        let texts: Vec<_> = rows
            .iter()
            .map(|r| super::text_values(r)[0].clone())
            .collect();
        assert_eq!(
            texts,
            [Some("-2147483648".to_owned()), Some("0".to_owned()), None]
        );
    }

    #[test]
    fn floats_print_like_postgres() {
        for (v, want) in [
            (41.0, "41"),
            (2.5, "2.5"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1e20, "1e+20"),
            (1.5e-5, "1.5e-05"),
            (-0.0001, "-0.0001"),
            (123456789012345.0, "123456789012345"),
            (1e15, "1e+15"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ] {
            assert_eq!(pg_float_text(v), want, "{v}");
        }
    }

    /// Floats go into DataRows without a `String`: the text written into
    /// the row's buffer is PostgreSQL's, for doubles and reals, including
    /// the exponent forms, and binary stays IEEE bytes.
    #[test]
    fn floats_in_data_rows() {
        use pgwire::api::Type;
        use pgwire::api::results::{FieldFormat, FieldInfo};
        let fields = std::sync::Arc::new(vec![
            FieldInfo::new("d".into(), None, None, Type::FLOAT8, FieldFormat::Text),
            FieldInfo::new("r".into(), None, None, Type::FLOAT4, FieldFormat::Text),
            FieldInfo::new("b".into(), None, None, Type::FLOAT8, FieldFormat::Binary),
        ]);
        let mut enc = super::RowEncoder::default();
        for (d, r, want_d, want_r) in [
            (1e20, 1e6_f32, "1e+20", "1e+06"),
            (
                -2.2250738585072014e-308,
                0.1_f32,
                "-2.2250738585072014e-308",
                "0.1",
            ),
            (2.5, f32::INFINITY, "2.5", "Infinity"),
        ] {
            for (i, v) in [PgFloat::F8(d), PgFloat::F4(r), PgFloat::F8(d)]
                .iter()
                .enumerate()
            {
                super::put(&mut enc, &fields[i], v).unwrap();
            }
            let row = enc.take_row();
            let texts = super::text_values(&row);
            assert_eq!(texts[0].as_deref(), Some(want_d));
            assert_eq!(texts[1].as_deref(), Some(want_r));
            // The binary field: 8 bytes, the double's bits.
            let data = &row.data[..];
            assert_eq!(&data[data.len() - 12..data.len() - 8], &8i32.to_be_bytes());
            assert_eq!(&data[data.len() - 8..], &d.to_be_bytes());
        }
    }
}
