//! The COPY protocol: COPY FROM STDIN (CopyData in, rows written as
//! entity-group transactions per PartitionKey) and COPY TO STDOUT, beside
//! the text and CSV formats' parser and encoder ([`format`]).

pub mod format;

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::ClientInfo;
use pgwire::api::results::{Response, Tag};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use tablegate_catalog::ColumnRef;
use tablegate_planner::{SelectPlan, WritePlan};

use super::{ConnHandler, Run, notice};
use crate::encode::{self, fields};
use crate::sqlstate::{PgError, wire_error};
use format::CopyFormat;

/// Identity ids a COPY reserves at once.
const COPY_IDS: usize = 1_000;

/// A `COPY ... FROM STDIN` in progress: parser state, rows not yet
/// written, and what was written so far.
pub(super) struct CopyIn {
    plan: Arc<WritePlan>,
    columns: Vec<ColumnRef>,
    parser: format::Parser,
    rows: Vec<tablegate_planner::value_expr::Row>,
    /// The first error; later data is swallowed and the error reported at
    /// CopyDone (pgwire would otherwise drop the connection's COPY state).
    error: Option<PgError>,
    rows_done: u64,
    groups_done: u64,
    /// The input line up to which rows are durable.
    synced_line: u64,
    opts: tablegate_planner::ExecOptions,
    /// The cancel generation when COPY started, and its statement_timeout
    /// deadline: checked with every CopyData and every 1,000 records.
    since: u64,
    deadline: Option<Instant>,
    /// The last flush, writing on another thread while the next rows are
    /// parsed (outside a transaction block).
    flushing: Option<Flushing>,
}

/// A COPY flush in flight: its rows end at input line `line`.
struct Flushing {
    line: u64,
    task: tokio::task::JoinHandle<FlushResult>,
}

/// A flush's write, and the fsync after it.
type FlushResult = (
    tablegate_planner::Result<tablegate_planner::WriteOutcome>,
    tablegate_store::Result<()>,
);

impl Debug for CopyIn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopyIn")
            .field("table", &self.plan.table.name)
            .field("line", &self.parser.line)
            .finish_non_exhaustive()
    }
}

/// Rows a COPY FROM buffers before writing them (as EGTs per PartitionKey).
const COPY_FLUSH_ROWS: usize = 10_000;

impl ConnHandler {
    /// COPY ... FROM STDIN: CopyInResponse; the data arrives as CopyData
    /// messages ([`pgwire::api::copy::CopyHandler`] below).
    pub(super) async fn copy_in(
        &self,
        plan: &Arc<WritePlan>,
        columns: &[ColumnRef],
        format: &CopyFormat,
        opts: tablegate_planner::ExecOptions,
        deadline: Option<Instant>,
    ) -> Response {
        let mut slot = self.session.copy_in.lock().await;
        // A COPY the client abandoned with a protocol error: its last
        // flush ends before this one's rows start.
        if let Some(old) = slot.as_mut() {
            self.copy_join(old).await;
        }
        *slot = Some(CopyIn {
            plan: plan.clone(),
            columns: columns.to_vec(),
            parser: format::Parser::new(format.clone()),
            rows: Vec::new(),
            error: None,
            rows_done: 0,
            groups_done: 0,
            synced_line: 0,
            opts,
            since: self.cancel.generation(),
            deadline,
            flushing: None,
        });
        Response::CopyIn(pgwire::api::results::CopyResponse::new(
            0,
            columns.len(),
            futures::stream::empty(),
        ))
    }

    /// COPY ... TO STDOUT: CopyOutResponse, one CopyData per row, CopyDone;
    /// the caller sends `COPY n`. Values are the text a SELECT would send.
    pub(super) async fn copy_out<C>(
        &self,
        client: &mut C,
        select: &Arc<SelectPlan>,
        format: &CopyFormat,
        run: &Run<'_>,
    ) -> Result<Response, PgError>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        use pgwire::messages::copy::{CopyData, CopyDone, CopyOutResponse};
        let wire = |e: PgWireError| PgError::connection_lost(e.to_string());
        let mut rows = self
            .planner
            .execute(select, run.params, &run.opts)
            .map_err(|e| PgError::from(&e))?;
        let f = Arc::new(fields(&select.columns, None));
        let n = select.columns.len();
        client
            .send(PgWireBackendMessage::CopyOutResponse(CopyOutResponse::new(
                0,
                n as i16,
                vec![0; n],
            )))
            .await
            .map_err(|e| wire(e.into()))?;
        let mut count = 0usize;
        let mut line = String::new();
        if format.header {
            let names: Vec<Option<&str>> = select
                .columns
                .iter()
                .map(|c| Some(c.name.as_str()))
                .collect();
            format.encode_row(&names, &mut line);
            client
                .feed(PgWireBackendMessage::CopyData(CopyData::new(
                    std::mem::take(&mut line).into(),
                )))
                .await
                .map_err(|e| wire(e.into()))?;
        }
        loop {
            let next = tokio::select! {
                n = rows.next() => n,
                e = run.stop.wait() => return Err(e),
            };
            let Some(batch) = next else { break };
            let batch = batch.map_err(|e| PgError::from(&e))?;
            let mut encoded = Vec::new();
            encode::encode_batch(&batch, &f, &mut encoded).map_err(PgError::internal)?;
            for row in encoded {
                let values = encode::text_values(&row);
                let refs: Vec<Option<&str>> = values.iter().map(|v| v.as_deref()).collect();
                format.encode_row(&refs, &mut line);
                client
                    .feed(PgWireBackendMessage::CopyData(CopyData::new(
                        std::mem::take(&mut line).into(),
                    )))
                    .await
                    .map_err(|e| wire(e.into()))?;
                count += 1;
            }
        }
        client
            .send(PgWireBackendMessage::CopyDone(CopyDone::new()))
            .await
            .map_err(|e| wire(e.into()))?;
        Ok(Response::Execution(Tag::new("COPY").with_rows(count)))
    }

    /// Turns parsed COPY records into rows and writes them whenever enough
    /// are buffered (or at the end), however many records one CopyData
    /// holds. Errors are kept for CopyDone.
    async fn copy_progress(&self, st: &mut CopyIn, last: bool) {
        if st.error.is_some() {
            return;
        }
        let stopped = |st: &CopyIn| {
            if self.cancel.generation() != st.since {
                Some(PgError::cancelled(false))
            } else if st.deadline.is_some_and(|d| Instant::now() >= d) {
                Some(PgError::cancelled(true))
            } else {
                None
            }
        };
        // Inside BEGIN the rows are staged as they arrive (a transaction
        // holds at most 100), so the EGT's rules (one PartitionKey, 100
        // operations, 4 MiB) refuse a COPY that breaks them at once.
        let in_txn = self.session.in_transaction();
        let batch = if in_txn { 100 } else { COPY_FLUSH_ROWS };
        let mut parsed = 0usize;
        loop {
            parsed += 1;
            if parsed.is_multiple_of(1_000)
                && let Some(e) = stopped(st)
            {
                st.error = Some(e);
                return;
            }
            let rec = match st.parser.next_record(last) {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(e) => {
                    st.error = Some(e);
                    return;
                }
            };
            if let Err(e) = self.copy_identity_ids(st).await {
                st.error = Some(e);
                return;
            }
            match copy_row(&st.plan, &st.columns, rec) {
                Ok(row) => st.rows.push(row),
                Err(e) => {
                    st.error = Some(e);
                    return;
                }
            }
            if st.rows.len() >= batch {
                self.copy_flush(st).await;
                if st.error.is_some() {
                    return;
                }
            }
        }
        if let Some(e) = stopped(st) {
            st.error = Some(e);
            return;
        }
        if !st.rows.is_empty() && (last || in_txn) {
            self.copy_flush(st).await;
        }
    }

    /// Ids for the identity columns COPY leaves to their default, reserved
    /// a block at a time (`tablegate_planner::identity`).
    async fn copy_identity_ids(&self, st: &CopyIn) -> Result<(), PgError> {
        let table = &st.plan.table;
        for c in table.columns.iter().filter(|c| c.is_identity()) {
            if st.columns.iter().any(|x| x.name == c.name)
                || tablegate_planner::identity::remaining(&table.name, &c.name) > 0
            {
                continue;
            }
            self.planner
                .identities()
                .reserve(&table.name, &c.name, COPY_IDS)
                .await
                .map_err(|e| PgError::from(&e))?;
        }
        Ok(())
    }

    /// Writes (or, inside BEGIN, stages) the rows a COPY has buffered.
    ///
    /// Outside a transaction block and over the embedded store, the write
    /// runs on another thread while this one parses the next rows, so the
    /// two no longer take turns on one core. At most one flush is in
    /// flight; its outcome is taken ([`copy_join`](Self::copy_join)) before
    /// the next starts and before COPY answers, so the counts, the durable
    /// line and the first error are as if the flushes ran in turn.
    async fn copy_flush(&self, st: &mut CopyIn) {
        if self.session.in_transaction() {
            return self.copy_stage(st).await;
        }
        self.copy_join(st).await;
        if st.error.is_some() {
            return;
        }
        let rows = std::mem::take(&mut st.rows);
        let (planner, plan, opts) = (self.planner.clone(), st.plan.clone(), st.opts.clone());
        let write = async move {
            use tablegate_store::TableStore as _;
            // One fsync for the flush's entity-group transactions, not one
            // each; nothing is acknowledged or reported applied before it.
            let written = tablegate_store::deferring_sync(tablegate_planner::apply::insert_rows(
                planner.store(),
                planner.catalog(),
                &plan,
                rows,
                None,
                &opts,
            ))
            .await;
            (written, planner.store().sync().await)
        };
        let line = st.parser.line;
        if matches!(self.planner.store(), tablegate_store::Backend::Remote(_)) {
            // A remote service's requests need this connection's runtime
            // turning (its thread may be blocked reading the next CopyData):
            // they are made here, flush after flush.
            let r = write.await;
            return self.copy_record(st, r, line);
        }
        let tag = tablegate_store::api::statement_tag();
        // A thread of the blocking pool commits the flush's groups itself,
        // as the connection's thread would, under a runtime of its own: the
        // connection's does not turn while its thread is blocked reading
        // the next CopyData, and the flush's timers (a throttled group's
        // back-off) and scan tasks must.
        let task = tokio::task::spawn_blocking(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let runtime = match runtime {
                Ok(r) => r,
                Err(e) => {
                    let e = tablegate_store::StoreError::Engine(format!(
                        "no runtime for a COPY flush: {e}"
                    ));
                    return (Err(tablegate_planner::PlanError::Store(e)), Ok(()));
                }
            };
            tablegate_store::writing_on_this_thread(|| {
                tablegate_store::api::in_statement(tag, || runtime.block_on(write))
            })
        });
        st.flushing = Some(Flushing { line, task });
    }

    /// Waits for the flush in flight, if any, and records its outcome: the
    /// rows and groups applied, the line up to which rows are durable, or
    /// its error (which comes before any later one: its rows came first).
    async fn copy_join(&self, st: &mut CopyIn) {
        let Some(f) = st.flushing.take() else {
            return;
        };
        let r = match f.task.await {
            Ok(r) => r,
            Err(e) => {
                // Some of its groups may be applied: they are made durable
                // before anything is reported.
                use tablegate_store::TableStore as _;
                let e = tablegate_store::StoreError::Engine(format!("COPY write task failed: {e}"));
                (
                    Err(tablegate_planner::PlanError::Store(e)),
                    self.planner.store().sync().await,
                )
            }
        };
        self.copy_record(st, r, f.line);
    }

    /// Records a flush of the rows up to input line `line`: its fsync's
    /// failure, or else what [`copy_outcome`](Self::copy_outcome) counts.
    fn copy_record(&self, st: &mut CopyIn, (written, synced): FlushResult, line: u64) {
        if let Err(e) = synced {
            let mut pg = PgError::from(&tablegate_planner::PlanError::Store(e));
            pg.detail = Some(format!(
                "COPY {}: the rows written since line {} may not be on disk; the {} row(s) before them are.",
                st.plan.table.name, st.synced_line, st.rows_done
            ));
            st.error = Some(pg);
            return;
        }
        self.copy_outcome(st, written, line);
    }

    /// Stages the buffered rows in the open transaction block.
    async fn copy_stage(&self, st: &mut CopyIn) {
        let rows = std::mem::take(&mut st.rows);
        let mut txn = self.session.lock().txn.take();
        let written = tablegate_planner::apply::insert_rows(
            self.planner.store(),
            self.planner.catalog(),
            &st.plan,
            rows,
            txn.as_mut(),
            &st.opts,
        )
        .await;
        self.session.lock().txn = txn;
        let line = st.parser.line;
        self.copy_outcome(st, written, line);
    }

    /// Counts a flush's rows up to input line `line`, or keeps its error.
    fn copy_outcome(
        &self,
        st: &mut CopyIn,
        written: tablegate_planner::Result<tablegate_planner::WriteOutcome>,
        line: u64,
    ) {
        match written.map_err(|e| e.with_key_columns(&st.plan.table)) {
            Ok(out) => {
                st.rows_done += out.rows;
                st.groups_done += out.groups;
                st.synced_line = line;
            }
            Err(e) => {
                let e = match e {
                    tablegate_planner::PlanError::PartlyApplied {
                        rows,
                        groups,
                        source,
                    } => {
                        st.rows_done += rows;
                        st.groups_done += groups;
                        *source
                    }
                    other => other,
                };
                let mut pg = PgError::from(&e);
                let applied = format!(
                    "COPY {}, rows up to line {}: {} row(s) in {} earlier entity-group transaction(s) were applied and stay applied; the failing group and the rest were not.",
                    st.plan.table.name, line, st.rows_done, st.groups_done
                );
                pg.detail = Some(match pg.detail {
                    Some(d) => format!("{d} {applied}"),
                    None => applied,
                });
                st.error = Some(pg);
            }
        }
    }
}

impl ConnHandler {
    /// Bulk ingest (Flight SQL): record batches into `table` through
    /// COPY FROM's path (the same rows, identity ids, entity-group
    /// transactions per PartitionKey and errors). The columns are the
    /// first batch's, by name; values are read as their text, as COPY's
    /// are. Returns the rows written.
    pub(super) async fn ingest(
        &self,
        table: &str,
        mut batches: super::arrow::Batches,
    ) -> Result<u64, PgError> {
        use futures::StreamExt;
        let Some(first) = batches.next().await.transpose()? else {
            return Ok(0);
        };
        let schema = first.schema();
        let names: Vec<String> = schema.fields().iter().map(|f| quote(f.name())).collect();
        let sql = format!("COPY {} ({}) FROM STDIN", quote(table), names.join(", "));
        let stmts = tablegate_planner::Planner::parse(&sql).map_err(|e| PgError::from(&e))?;
        let prepared = super::prepare::prepare(&self.planner, &stmts[0], &sql, true)?;
        let super::Prepared::CopyIn {
            plan,
            columns,
            format,
        } = prepared
        else {
            return Err(PgError::internal(
                "bulk ingest was planned as another statement",
            ));
        };
        if self.session.lock().read_only_now() {
            return Err(PgError::read_only_sql_transaction(
                "cannot execute bulk ingest in a read-only transaction",
            ));
        }
        let run = self.start_run(
            &[],
            None,
            pgwire::messages::response::TransactionStatus::Idle,
        );
        let mut st = CopyIn {
            plan,
            columns,
            parser: format::Parser::new(format),
            rows: Vec::new(),
            error: None,
            rows_done: 0,
            groups_done: 0,
            synced_line: 0,
            opts: run.opts,
            since: run.stop.since,
            deadline: run.stop.deadline,
            flushing: None,
        };
        let per_flush = if self.session.in_transaction() {
            100
        } else {
            COPY_FLUSH_ROWS
        };
        let fed = async {
            let mut next = Some(first);
            while let Some(batch) = next {
                if batch.schema().fields() != schema.fields() {
                    return Err(PgError::bad_copy_file_format(
                        "every record batch of one ingest must have the first one's columns",
                    ));
                }
                let mut texts = batch_text(&batch)?;
                for r in 0..batch.num_rows() {
                    st.parser.line += 1;
                    self.copy_identity_ids(&st).await?;
                    let fields: Vec<format::Field> =
                        texts.iter_mut().map(|c| c[r].take()).collect();
                    let row = copy_row(&st.plan, &st.columns, (st.parser.line, fields))?;
                    st.rows.push(row);
                    if st.rows.len() >= per_flush {
                        self.copy_flush(&mut st).await;
                        if st.error.is_some() {
                            return Ok(());
                        }
                    }
                }
                if self.cancel.generation() != st.since {
                    return Err(PgError::cancelled(false));
                }
                if st.deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(PgError::cancelled(true));
                }
                next = batches.next().await.transpose()?;
            }
            if !st.rows.is_empty() {
                self.copy_flush(&mut st).await;
            }
            Ok(())
        }
        .await;
        // A flush in flight ends before the answer; its error comes first,
        // its rows having come before.
        self.copy_join(&mut st).await;
        if let Some(e) = st.error.take() {
            return Err(e);
        }
        fed?;
        Ok(st.rows_done)
    }
}

/// `name` as a quoted SQL identifier (exactly as given).
pub fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A record batch's values as COPY text, column by column (`None`: NULL):
/// bytea as `\\x` hex, a 16-byte value as a uuid, everything else as Arrow
/// displays it (ISO times, shortest round-trip floats).
pub(super) fn batch_text(
    batch: &arrow_array::RecordBatch,
) -> Result<Vec<Vec<format::Field>>, PgError> {
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_schema::DataType;
    let hex = |b: &[u8]| {
        let mut s = String::with_capacity(2 + 2 * b.len());
        s.push_str("\\x");
        for byte in b {
            s.push_str(&format!("{byte:02x}"));
        }
        s
    };
    let mut out = Vec::with_capacity(batch.num_columns());
    for col in batch.columns() {
        let n = col.len();
        let mut values = Vec::with_capacity(n);
        match col.data_type() {
            DataType::Binary => {
                let a = col.as_binary::<i32>();
                values.extend((0..n).map(|i| a.is_valid(i).then(|| hex(a.value(i)))));
            }
            DataType::LargeBinary => {
                let a = col.as_binary::<i64>();
                values.extend((0..n).map(|i| a.is_valid(i).then(|| hex(a.value(i)))));
            }
            DataType::BinaryView => {
                let a = col.as_binary_view();
                values.extend((0..n).map(|i| a.is_valid(i).then(|| hex(a.value(i)))));
            }
            DataType::FixedSizeBinary(16) => {
                let a = col.as_fixed_size_binary();
                values.extend((0..n).map(|i| {
                    a.is_valid(i).then(|| {
                        let bytes: [u8; 16] = a.value(i).try_into().expect("16 bytes");
                        uuid::Uuid::from_bytes(bytes).to_string()
                    })
                }));
            }
            _ => {
                let options = arrow_cast::display::FormatOptions::default();
                let f =
                    arrow_cast::display::ArrayFormatter::try_new(col, &options).map_err(|e| {
                        PgError::feature_not_supported(format!(
                            "bulk ingest of {} values: {e}",
                            col.data_type()
                        ))
                    })?;
                values.extend((0..n).map(|i| col.is_valid(i).then(|| f.value(i).to_string())));
            }
        }
        out.push(values);
    }
    Ok(out)
}

/// One COPY record as a row of every user column (DEFAULTs for the ones
/// not named).
fn copy_row(
    plan: &WritePlan,
    columns: &[ColumnRef],
    (line, fields): (u64, Vec<format::Field>),
) -> Result<tablegate_planner::value_expr::Row, PgError> {
    let table = &plan.table;
    // Every user column, resolved when COPY was planned, with the index of
    // the input field that fills it (`None`: its DEFAULT).
    let Some(targets) = plan.insert_targets() else {
        return Err(PgError::internal("COPY FROM was planned as another write"));
    };
    if fields.len() < columns.len() {
        return Err(PgError::bad_copy_file_format(format!(
            "missing data for column \"{}\" on line {line}",
            columns[fields.len()].name
        )));
    }
    if fields.len() > columns.len() {
        return Err(PgError::bad_copy_file_format(format!(
            "extra data after last expected column on line {line}"
        )));
    }
    text_row(table, targets, &fields, &format!("line {line}, "))
}

/// A row of every user column from text values (`None`: NULL), each
/// parsed into its column's type; a column `targets` gives no field (or a
/// field past `fields`) takes its DEFAULT. `at` prefixes the column in a
/// parse error (`line 3, `).
pub(super) fn text_row(
    table: &tablegate_catalog::TableDef,
    targets: &[(Arc<ColumnRef>, Option<usize>)],
    fields: &[format::Field],
    at: &str,
) -> Result<tablegate_planner::value_expr::Row, PgError> {
    let mut row = Vec::with_capacity(targets.len());
    for (col, field) in targets {
        let v = match field.and_then(|i| fields.get(i)) {
            Some(None) => None,
            Some(Some(text)) => Some(col.ty.parse_text(text).map_err(|e| {
                let mut pg = PgError::from(&e);
                pg.message = format!("{} ({at}column {})", pg.message, col.name);
                pg
            })?),
            None => tablegate_planner::value_expr::default_value(col, table)
                .map_err(|e| PgError::from(&e))?,
        };
        row.push((Arc::clone(col), v));
    }
    Ok(row)
}

#[async_trait]
impl pgwire::api::copy::CopyHandler for ConnHandler {
    async fn on_copy_data<C>(
        &self,
        _client: &mut C,
        data: pgwire::messages::copy::CopyData,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut guard = self.session.copy_in.lock().await;
        if let Some(st) = guard.as_mut() {
            if st.error.is_none() {
                st.parser.feed(&data.data);
            }
            self.copy_progress(st, false).await;
        }
        Ok(())
    }

    async fn on_copy_done<C>(
        &self,
        client: &mut C,
        _done: pgwire::messages::copy::CopyDone,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let Some(mut st) = self.session.copy_in.lock().await.take() else {
            return Err(wire_error(PgError::protocol_violation(
                "CopyDone without COPY in progress",
            )));
        };
        self.copy_progress(&mut st, true).await;
        // Whichever way the data ended, the flush in flight ends before the
        // answer, and its error comes before a later one.
        self.copy_join(&mut st).await;
        if let Some(e) = st.error {
            return Err(wire_error(e));
        }
        if st.groups_done > 1 {
            notice(
                client,
                PgError::notice(format!(
                    "COPY was applied as {} entity-group transactions (one per PartitionKey, at most 100 operations each); they are not atomic together",
                    st.groups_done
                )),
            )
            .await?;
        }
        client
            .send(PgWireBackendMessage::CommandComplete(
                Tag::new("COPY").with_rows(st.rows_done as usize).into(),
            ))
            .await?;
        Ok(())
    }

    async fn on_copy_fail<C>(
        &self,
        _client: &mut C,
        fail: pgwire::messages::copy::CopyFail,
    ) -> PgWireError
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let st = self.session.copy_in.lock().await.take();
        let applied = match st {
            Some(mut st) => {
                // The rows already handed to a flush are written (or not)
                // before the count is given.
                self.copy_join(&mut st).await;
                st.rows_done
            }
            None => 0,
        };
        wire_error(
            PgError::query_canceled(format!("COPY from stdin failed: {}", fail.message)).detail(
                format!("{applied} row(s) were applied before the client stopped the COPY."),
            ),
        )
    }
}
