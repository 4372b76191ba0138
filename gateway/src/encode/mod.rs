//! Results on the wire: planner columns and Arrow schemas to
//! RowDescription fields ([`types`]), values to their text or binary form
//! ([`value`]), Arrow record batches to DataRows ([`row`]), streamed batch
//! by batch, never the whole result in memory ([`stream`]).

mod row;
mod stream;
mod types;
mod value;

pub(crate) use row::{encode_batch, text_values};
pub use stream::{batch_stream, counted, guarded, row_stream, until_stopped};
pub use types::{arrow_fields, fields, format_of, pg_type, pg_type_of, text_field};
pub use value::{pg_float_text, pg_float4_text};

#[cfg(test)]
mod tests;
