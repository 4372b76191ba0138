//! One value in its wire form: PostgreSQL's text or binary encoding of
//! numerics, intervals, floats (shortest round-trip digits, as PostgreSQL
//! prints them), arrays and timestamps, from any Arrow column.

use std::sync::Arc;

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type, TimestampMicrosecondType};
use arrow_schema::DataType;
use pgwire::api::Type;
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::error::PgWireResult;

use super::row::RowEncoder;
use crate::sqlstate::PgError;
use crate::sqlstate::wire_error;

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

/// A float in a DataRow: its text written straight into the row's buffer,
/// with no `String` per value.
#[derive(Debug, Clone, Copy)]
pub(super) enum PgFloat {
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
pub(super) fn duration_as_interval(
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
            let days = i32::try_from(v / per_day).map_err(|_| {
                wire_error(PgError::datetime_field_overflow("interval out of range"))
            })?;
            Ok(Some(IntervalMonthDayNano::new(0, days, (v % per_day) * ns)))
        })
        .collect::<PgWireResult<_>>()?;
    Ok(Arc::new(out))
}

pub(super) fn can_cast_text(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Dictionary(..)
    )
}

/// Any column as its display text (structs, maps, durations).
pub(super) fn format_as_text(col: &arrow_array::ArrayRef) -> PgWireResult<arrow_array::ArrayRef> {
    let fmt = arrow_cast::display::ArrayFormatter::try_new(col.as_ref(), &Default::default())
        .map_err(|e| wire_error(PgError::data_exception(e.to_string())))?;
    let values: Vec<Option<String>> = (0..col.len())
        .map(|i| (!col.is_null(i)).then(|| fmt.value(i).to_string()))
        .collect();
    Ok(Arc::new(arrow_array::StringArray::from(values)))
}

/// One value in the column's type and format. pgwire's `encode_field`
/// clones the field's type and format options for every value; this
/// borrows them.
pub(super) fn put<T>(enc: &mut RowEncoder, field: &FieldInfo, v: &T) -> PgWireResult<()>
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

pub(super) fn encode_value(
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
                    .map_err(|e| wire_error(PgError::data_exception(e.to_string())))?
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
                other => Err(wire_error(PgError::feature_not_supported(format!(
                    "cannot send arrays of Arrow type {other}"
                )))),
            }
        }
        other => Err(wire_error(PgError::feature_not_supported(format!(
            "cannot send values of Arrow type {other}"
        )))),
    }
}
