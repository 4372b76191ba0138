//! Result streams: DataRows produced batch by batch as the client reads
//! them, ending with 57014 when the statement must stop.

use std::sync::Arc;

use arrow_array::RecordBatch;
use futures::{Stream, StreamExt};
use pgwire::api::results::FieldInfo;
use pgwire::error::PgWireResult;
use pgwire::messages::data::DataRow;
use tablegate_planner::RowStream;

use super::row::encode_batch;
use crate::sqlstate::PgError;
use crate::sqlstate::wire_error;
use crate::telemetry::{StatementClass, StatementGuard};

use crate::cancel::Stop;

/// DataRows of a running native query, produced batch by batch as the
/// client reads them; ends with 57014 when `stop` fires.
/// `guard`, when given, learns the bound access class and the store's
/// actuals, and records the statement when the stream ends or is dropped.
pub fn row_stream(
    rows: RowStream,
    fields: Arc<Vec<FieldInfo>>,
    stop: Stop,
    guard: Option<StatementGuard>,
) -> impl Stream<Item = PgWireResult<DataRow>> + Send {
    batch_stream(Box::pin(guarded(rows, guard)), fields, stop)
}

/// The record batches of a running native query; `guard`, when given,
/// learns the bound access class and the store's actuals, and records the
/// statement when the stream ends or is dropped.
pub fn guarded(
    rows: RowStream,
    mut guard: Option<StatementGuard>,
) -> impl Stream<Item = Result<RecordBatch, PgError>> + Send {
    if let Some(g) = guard.as_mut() {
        g.set_class(StatementClass::Access(rows.class()));
    }
    // Pages are read as the stream is polled, after the statement's own
    // run: they are tagged here.
    let tag = guard.as_ref().map_or(0, StatementGuard::tag);
    futures::stream::unfold((rows, guard), move |(mut rows, mut guard)| async move {
        let next = tablegate_store::api::statement_scope(tag, rows.next()).await;
        if let Some(g) = guard.as_mut() {
            g.set_actuals(&rows.actuals());
            if matches!(next, Some(Err(_))) {
                g.fail();
            }
        }
        Some((next?.map_err(|e| PgError::from(&e)), (rows, guard)))
    })
}

/// Record batches until `stop` fires (then one 57014 error) or the first
/// error; `stop` is looked at between batches.
pub fn until_stopped<S>(
    batches: S,
    stop: Stop,
) -> impl Stream<Item = Result<RecordBatch, PgError>> + Send
where
    S: Stream<Item = Result<RecordBatch, PgError>> + Send + Unpin + 'static,
{
    futures::stream::unfold((batches, false), move |(mut batches, done)| {
        let stop = stop.clone();
        async move {
            if done {
                return None;
            }
            let next = tokio::select! {
                n = batches.next() => n,
                e = stop.wait() => return Some((Err(e), (batches, true))),
            };
            match next? {
                Err(e) => Some((Err(e), (batches, true))),
                Ok(batch) => Some((Ok(batch), (batches, false))),
            }
        }
    })
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
    // by a plain iterator (a step per row moved the whole stream state in
    // and out of a new future for every row). A batch's rows all go out
    // before `stop` is looked at again.
    let per_batch = until_stopped(batches, stop)
        .map(move |batch| -> PgWireResult<Vec<DataRow>> {
            let batch = batch.map_err(wire_error)?;
            let mut rows = Vec::with_capacity(batch.num_rows());
            encode_batch(&batch, &fields, &mut rows)?;
            Ok(rows)
        })
        // Nothing after the first error (a batch that failed to encode).
        .scan(false, |failed, encoded| {
            let end = std::mem::replace(failed, encoded.is_err());
            std::future::ready((!end).then_some(encoded))
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
