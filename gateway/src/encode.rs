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
use pgwire::api::results::{DataRowEncoder, FieldFormat, FieldInfo};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::data::DataRow;
use tablegate_catalog::SqlType;
use tablegate_planner::RowStream;
use tablegate_planner::plan::OutputColumn;

use crate::sqlstate::PgError;

/// The PostgreSQL type of a column type.
pub fn pg_type(t: SqlType) -> Type {
    Type::from_oid(t.pg_oid()).unwrap_or(Type::TEXT)
}

/// RowDescription fields for result columns; `format` picks text or binary
/// per column as the client asked.
pub fn fields(columns: &[OutputColumn], format: Option<&Format>) -> Vec<FieldInfo> {
    columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let f = format.map_or(FieldFormat::Text, |f| f.format_for(i));
            FieldInfo::new(c.name.clone(), None, None, pg_type(c.column.ty), f)
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

/// Encodes every row of a batch.
pub(crate) fn encode_batch(
    batch: &RecordBatch,
    fields: &Arc<Vec<FieldInfo>>,
    out: &mut Vec<DataRow>,
) -> PgWireResult<()> {
    let mut enc = DataRowEncoder::new(fields.clone());
    for row in 0..batch.num_rows() {
        for (col, field) in batch.columns().iter().zip(fields.iter()) {
            let ty = field.datatype();
            let binary = field.format() == FieldFormat::Binary;
            if col.is_null(row) {
                enc.encode_field(&None::<i32>)?;
                continue;
            }
            match col.data_type() {
                DataType::Utf8 => enc.encode_field(&col.as_string::<i32>().value(row))?,
                DataType::Int32 => enc.encode_field(&col.as_primitive::<Int32Type>().value(row))?,
                DataType::Int64 => enc.encode_field(&col.as_primitive::<Int64Type>().value(row))?,
                DataType::Float64 => {
                    enc.encode_field(&col.as_primitive::<Float64Type>().value(row))?
                }
                DataType::Boolean => enc.encode_field(&col.as_boolean().value(row))?,
                DataType::Timestamp(_, tz) => {
                    let micros = col.as_primitive::<TimestampMicrosecondType>().value(row);
                    let t = chrono::DateTime::from_timestamp_micros(micros).unwrap_or_default();
                    if tz.is_some() {
                        enc.encode_field(&t)?;
                    } else {
                        enc.encode_field(&t.naive_utc())?;
                    }
                }
                DataType::FixedSizeBinary(16) => {
                    let b = col.as_fixed_size_binary().value(row);
                    if binary {
                        enc.encode_field_with_type_and_format(
                            &b,
                            ty,
                            FieldFormat::Binary,
                            field.format_options(),
                        )?;
                    } else {
                        let text =
                            tablegate_store::entity::guid_text(b.try_into().expect("16 bytes"));
                        enc.encode_field_with_type_and_format(
                            &text,
                            ty,
                            FieldFormat::Text,
                            field.format_options(),
                        )?;
                    }
                }
                DataType::Binary => enc.encode_field(&col.as_binary::<i32>().value(row))?,
                other => {
                    return Err(wire_error(PgError::new(
                        "0A000",
                        format!("cannot send values of Arrow type {other}"),
                    )));
                }
            }
        }
        out.push(enc.take_row());
    }
    Ok(())
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

/// DataRows of a running query, produced batch by batch as the client
/// reads them; ends with 57014 when `stop` fires.
pub fn row_stream(
    rows: RowStream,
    fields: Arc<Vec<FieldInfo>>,
    stop: Stop,
) -> impl Stream<Item = PgWireResult<DataRow>> + Send {
    futures::stream::unfold(
        (rows, std::collections::VecDeque::<DataRow>::new(), false),
        move |(mut rows, mut pending, done)| {
            let fields = fields.clone();
            let stop = stop.clone();
            async move {
                loop {
                    if let Some(r) = pending.pop_front() {
                        return Some((Ok(r), (rows, pending, done)));
                    }
                    if done {
                        return None;
                    }
                    let next = tokio::select! {
                        n = rows.next() => n,
                        e = stop.wait() => {
                            return Some((Err(wire_error(e)), (rows, pending, true)));
                        }
                    };
                    match next {
                        None => return None,
                        Some(Err(e)) => {
                            return Some((
                                Err(wire_error(PgError::from(&e))),
                                (rows, pending, true),
                            ));
                        }
                        Some(Ok(batch)) => {
                            let mut v = Vec::with_capacity(batch.num_rows());
                            if let Err(e) = encode_batch(&batch, &fields, &mut v) {
                                return Some((Err(e), (rows, pending, true)));
                            }
                            pending.extend(v);
                        }
                    }
                }
            }
        },
    )
    // Polled again after its end (a FETCH past the last row) it must say
    // None, not panic.
    .fuse()
}
