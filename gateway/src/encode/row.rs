//! Arrow record batches to DataRows: one buffer per batch, each column's
//! type resolved once, not per cell.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{Float64Type, Int32Type, Int64Type};
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use pgwire::api::Type;
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::error::PgWireResult;
use pgwire::messages::data::DataRow;

use super::types::canonical;
use super::value::{
    PgFloat, can_cast_text, duration_as_interval, encode_value, format_as_text, put,
};
use crate::sqlstate::PgError;
use crate::sqlstate::wire_error;

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
                    let message = format!("cannot send {} as {want}: {e}", col.data_type());
                    wire_error(if *col.data_type() == DataType::UInt64 {
                        PgError::numeric_value_out_of_range(message)
                    } else {
                        PgError::data_exception(message)
                    })
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
/// everything else through [`encode_value`]: the type match and downcast
/// per cell, and `Display` for numbers, were a visible share of a range
/// query's CPU.
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
