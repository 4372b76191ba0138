//! The Flight SQL commands, each answered by a session's statements.
//!
//! A query's GetFlightInfo prepares it (errors surface there) and hands
//! out a ticket holding its text; DoGet runs it and streams the scan's or
//! DataFusion's batches as they are made (the stream is dropped, and the
//! scan with it, when the client goes away). A statement whose columns
//! are not known before it runs (SHOW, EXPLAIN, FETCH) or that returns no
//! rows runs at GetFlightInfo; its result waits for its ticket. Prepared
//! statements bind parameter rows with DoPut; bulk ingest is COPY FROM's
//! write path.

use std::pin::Pin;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionBeginTransactionRequest, ActionBeginTransactionResult,
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionCreatePreparedStatementResult, ActionEndTransactionRequest, Any, CommandGetCatalogs,
    CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetSqlInfo, CommandGetTableTypes,
    CommandGetTables, CommandGetXdbcTypeInfo, CommandPreparedStatementQuery,
    CommandPreparedStatementUpdate, CommandStatementIngest, CommandStatementQuery,
    CommandStatementUpdate, DoPutPreparedStatementResult, EndTransaction, ProstMessageExt, SqlInfo,
    TableExistsOption, TableNotExistOption, TicketStatementQuery,
};
use arrow_flight::{
    Action, FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse,
    IpcMessage, SchemaAsIpc, Ticket,
};
use arrow_schema::{DataType, Schema, SchemaRef};
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use tablegate_store::Value;
use tonic::{Request, Response, Status, Streaming};

use super::metadata;
use super::sessions::{Sessions, Statement};
use super::{FlightConfig, status};
use crate::handler::copy::quote;
use crate::handler::{ArrowSession, Batches, Outcome, Prepared};
use crate::sqlstate::PgError;

type DoGetStream = <FlightSql as FlightService>::DoGetStream;

/// The Flight SQL service over one planner.
pub struct FlightSql {
    sessions: Arc<Sessions>,
}

impl FlightSql {
    pub fn new(planner: tablegate_planner::Planner, config: FlightConfig) -> Self {
        FlightSql {
            sessions: Arc::new(Sessions::new(planner, config)),
        }
    }
}

/// What a statement ticket holds: a query's text to run (and the Flight
/// transaction it was planned in, so that it reads that transaction's
/// writes), or the key of a result already computed.
enum TicketKind {
    Query { txn: Vec<u8>, sql: String },
    Result(Vec<u8>),
}

impl TicketKind {
    fn encode(&self) -> Ticket {
        let mut bytes = Vec::new();
        match self {
            TicketKind::Query { txn, sql } => {
                bytes.push(b'q');
                bytes.push(u8::try_from(txn.len()).unwrap_or(0));
                bytes.extend_from_slice(if txn.len() <= 255 { txn } else { &[] });
                bytes.extend_from_slice(sql.as_bytes());
            }
            TicketKind::Result(key) => {
                bytes.push(b'r');
                bytes.extend_from_slice(key);
            }
        }
        let t = TicketStatementQuery {
            statement_handle: bytes.into(),
        };
        Ticket::new(t.as_any().encode_to_vec())
    }

    fn decode(handle: &[u8]) -> Result<TicketKind, Status> {
        let bad = || Status::invalid_argument("not a tablegate ticket");
        match handle.split_first() {
            Some((b'q', rest)) => {
                let (len, rest) = rest.split_first().ok_or_else(bad)?;
                let (txn, sql) = rest.split_at_checked(usize::from(*len)).ok_or_else(bad)?;
                Ok(TicketKind::Query {
                    txn: txn.to_vec(),
                    sql: String::from_utf8(sql.to_vec())
                        .map_err(|_| Status::invalid_argument("a ticket's query is not UTF-8"))?,
                })
            }
            Some((b'r', key)) => Ok(TicketKind::Result(key.to_vec())),
            _ => Err(bad()),
        }
    }
}

/// The schema as Flight sends it: uuid columns (16-byte values) carry
/// Arrow's canonical `arrow.uuid` extension type, so that clients read
/// uuids (pyarrow's `UuidType`), not 16 bytes.
fn flight_schema(schema: &Schema) -> SchemaRef {
    let uuid = |f: &arrow_schema::Field| f.data_type() == &DataType::FixedSizeBinary(16);
    if !schema.fields().iter().any(|f| uuid(f)) {
        return Arc::new(schema.clone());
    }
    let fields: Vec<arrow_schema::FieldRef> = schema
        .fields()
        .iter()
        .map(|f| {
            if !uuid(f) {
                return f.clone();
            }
            let mut metadata = f.metadata().clone();
            metadata.insert("ARROW:extension:name".into(), "arrow.uuid".into());
            metadata.insert("ARROW:extension:metadata".into(), String::new());
            Arc::new(f.as_ref().clone().with_metadata(metadata))
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Batches as a DoGet stream (errors as gRPC statuses carrying the
/// SQLSTATE).
fn flight_stream(schema: SchemaRef, batches: Batches) -> Response<DoGetStream> {
    let schema = flight_schema(&schema);
    let declared = schema.clone();
    let batches = batches
        .map_ok(move |b| {
            if b.schema().fields().len() == declared.fields().len() && b.schema() != declared {
                RecordBatch::try_new(declared.clone(), b.columns().to_vec()).unwrap_or(b)
            } else {
                b
            }
        })
        .map_err(|e| FlightError::Tonic(Box::new(status(e))));
    let s = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .build(batches)
        .map_err(Status::from);
    Response::new(Box::pin(s))
}

/// A statement's outcome as a DoGet stream (a command's: no rows).
fn outcome_stream(outcome: Outcome) -> Response<DoGetStream> {
    match outcome {
        Outcome::Rows { schema, batches } => flight_stream(schema, batches),
        Outcome::Done { .. } => flight_stream(
            Arc::new(Schema::empty()),
            Box::pin(futures::stream::empty()),
        ),
    }
}

fn one_batch(batch: RecordBatch) -> Response<DoGetStream> {
    let schema = batch.schema();
    flight_stream(schema, Box::pin(futures::stream::iter([Ok(batch)])))
}

fn info(
    schema: &Schema,
    ticket: Option<Ticket>,
    descriptor: FlightDescriptor,
) -> Result<FlightInfo, Status> {
    let mut info = FlightInfo::new()
        .try_with_schema(&flight_schema(schema))
        .map_err(|e| Status::internal(e.to_string()))?
        .with_descriptor(descriptor)
        .with_ordered(true);
    if let Some(t) = ticket {
        info = info.with_endpoint(FlightEndpoint::new().with_ticket(t));
    }
    Ok(info)
}

fn schema_bytes(schema: &Schema) -> Result<bytes::Bytes, Status> {
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &Default::default())
        .try_into()
        .map_err(|e: arrow_schema::ArrowError| Status::internal(e.to_string()))?;
    Ok(bytes)
}

/// The record batches a DoPut carries.
fn put_batches(request: Request<PeekableFlightDataStream>) -> FlightRecordBatchStream {
    let data = request
        .into_inner()
        .map_err(|e| FlightError::Tonic(Box::new(e)));
    FlightRecordBatchStream::new_from_flight_data(data)
}

fn pg_batches(stream: FlightRecordBatchStream) -> Batches {
    Box::pin(stream.map_err(|e| match e {
        FlightError::Tonic(s) => PgError::protocol_violation(s.message().to_owned()),
        other => PgError::protocol_violation(format!("record batch stream: {other}")),
    }))
}

/// The SQL type a bulk-ingested Arrow column creates.
fn sql_type(dt: &DataType) -> Option<&'static str> {
    Some(match dt {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "text",
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => "smallint",
        DataType::Int32 | DataType::UInt16 => "integer",
        DataType::Int64 | DataType::UInt32 => "bigint",
        DataType::Float16 | DataType::Float32 | DataType::Float64 => "double precision",
        DataType::Boolean => "boolean",
        DataType::Timestamp(_, Some(_)) => "timestamptz",
        DataType::Timestamp(_, None) => "timestamp",
        DataType::Date32 | DataType::Date64 => "date",
        DataType::FixedSizeBinary(16) => "uuid",
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => "bytea",
        _ => return None,
    })
}

impl FlightSql {
    async fn session<T>(
        &self,
        request: &Request<T>,
        txn: Option<&[u8]>,
    ) -> Result<Arc<ArrowSession>, Status> {
        self.sessions.session(request.metadata(), txn).await
    }

    /// The plan of a prepared statement, planned again when the catalog
    /// changed since (a table dropped and created with other types).
    async fn plan_of(&self, stmt: &Statement) -> Result<Prepared, Status> {
        let version = self.sessions.planner().catalog().version();
        {
            let plan = stmt.plan.lock();
            if plan.1 == version {
                return Ok(plan.0.clone());
            }
        }
        let p = stmt.session.prepare(&stmt.sql).await.map_err(status)?;
        *stmt.plan.lock() = (p.clone(), version);
        Ok(p)
    }

    /// Runs a statement once per parameter row (once without parameters).
    async fn run_rows(
        session: Arc<ArrowSession>,
        p: Prepared,
        rows: Vec<Vec<Option<Value>>>,
        sql: String,
    ) -> Result<Outcome, PgError> {
        if rows.len() <= 1 {
            let params = rows.into_iter().next().unwrap_or_default();
            return session.run(&p, &params, &sql).await;
        }
        match ArrowSession::result_schema(&p) {
            // A query run for each row: the results one after another.
            Some(schema) => {
                let runs = futures::stream::iter(rows).then(move |params| {
                    let (session, p, sql) = (session.clone(), p.clone(), sql.clone());
                    async move {
                        match session.run(&p, &params, &sql).await {
                            Ok(Outcome::Rows { batches, .. }) => batches,
                            Ok(Outcome::Done { .. }) => Box::pin(futures::stream::empty()),
                            Err(e) => Box::pin(futures::stream::iter([Err(e)])),
                        }
                    }
                });
                Ok(Outcome::Rows {
                    schema,
                    batches: Box::pin(runs.flatten()),
                })
            }
            None => {
                let mut total = 0;
                for params in rows {
                    total += count(session.run(&p, &params, &sql).await?).await?;
                }
                Ok(Outcome::Done { rows: total })
            }
        }
    }

    /// FlightInfo for a statement: a ticket to run a query with known
    /// columns, or the result of anything else, run now.
    async fn statement_info(
        &self,
        session: Arc<ArrowSession>,
        p: Prepared,
        params: Vec<Vec<Option<Value>>>,
        sql: String,
        query_ticket: Ticket,
        descriptor: FlightDescriptor,
    ) -> Result<FlightInfo, Status> {
        if let Some(schema) = ArrowSession::result_schema(&p) {
            return info(&schema, Some(query_ticket), descriptor);
        }
        match Self::run_rows(session, p, params, sql)
            .await
            .map_err(status)?
        {
            Outcome::Rows { schema, batches } => {
                let batches: Vec<RecordBatch> = batches.try_collect().await.map_err(status)?;
                let key = self.sessions.keep_result(schema.clone(), batches);
                info(&schema, Some(TicketKind::Result(key).encode()), descriptor)
            }
            Outcome::Done { rows } => {
                Ok(info(&Schema::empty(), None, descriptor)?.with_total_records(rows as i64))
            }
        }
    }

    /// FlightInfo for a metadata command: its schema, and a ticket that
    /// is the command itself (DoGet answers it from the catalog).
    async fn metadata_info(
        &self,
        request: Request<FlightDescriptor>,
        command: Any,
        schema: &Schema,
    ) -> Result<Response<FlightInfo>, Status> {
        self.session(&request, None).await?;
        let ticket = Ticket::new(command.encode_to_vec());
        Ok(Response::new(info(
            schema,
            Some(ticket),
            request.into_inner(),
        )?))
    }

    /// A prepared statement's bound parameter rows, as its types.
    fn bound_rows(stmt: &Statement, p: &Prepared) -> Result<Vec<Vec<Option<Value>>>, Status> {
        let batches = stmt.params.lock().clone();
        ArrowSession::param_rows(&batches, ArrowSession::param_types(p)).map_err(status)
    }
}

/// The rows an outcome counts (a query's rows are read and counted).
async fn count(o: Outcome) -> Result<u64, PgError> {
    match o {
        Outcome::Done { rows } => Ok(rows),
        Outcome::Rows { mut batches, .. } => {
            let mut n = 0;
            while let Some(b) = batches.next().await {
                n += b?.num_rows() as u64;
            }
            Ok(n)
        }
    }
}

#[tonic::async_trait]
impl FlightSqlService for FlightSql {
    type FlightService = FlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let authorization = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let token = self.sessions.handshake(authorization.as_deref()).await?;
        let answer = HandshakeResponse {
            protocol_version: 0,
            payload: token.clone().into(),
        };
        let mut response: Response<Pin<Box<dyn Stream<Item = _> + Send>>> =
            Response::new(Box::pin(futures::stream::iter([Ok(answer)])));
        let bearer = format!("Bearer {token}")
            .parse()
            .map_err(|_| Status::internal("token is not a header value"))?;
        response.metadata_mut().insert("authorization", bearer);
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let session = self
            .session(&request, query.transaction_id.as_deref())
            .await?;
        let p = session.prepare(&query.query).await.map_err(status)?;
        let ticket = TicketKind::Query {
            txn: query.transaction_id.as_deref().unwrap_or_default().to_vec(),
            sql: query.query.clone(),
        }
        .encode();
        let info = self
            .statement_info(
                session,
                p,
                Vec::new(),
                query.query,
                ticket,
                request.into_inner(),
            )
            .await?;
        Ok(Response::new(info))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        match TicketKind::decode(&ticket.statement_handle)? {
            TicketKind::Result(key) => {
                let (schema, batches) = self.sessions.take_result(&key)?;
                Ok(flight_stream(
                    schema,
                    Box::pin(futures::stream::iter(batches.into_iter().map(Ok))),
                ))
            }
            TicketKind::Query { txn, sql } => {
                let session = self.session(&request, Some(&txn)).await?;
                let p = session.prepare(&sql).await.map_err(status)?;
                Ok(outcome_stream(
                    session.run(&p, &[], &sql).await.map_err(status)?,
                ))
            }
        }
    }

    async fn do_put_statement_update(
        &self,
        cmd: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let session = self
            .session(&request, cmd.transaction_id.as_deref())
            .await?;
        let p = session.prepare(&cmd.query).await.map_err(status)?;
        let outcome = session.run(&p, &[], &cmd.query).await.map_err(status)?;
        Ok(count(outcome).await.map_err(status)? as i64)
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let session = self
            .session(&request, query.transaction_id.as_deref())
            .await?;
        let p = session.prepare(&query.query).await.map_err(status)?;
        let dataset = ArrowSession::result_schema(&p).unwrap_or_else(|| Arc::new(Schema::empty()));
        let params = Schema::new(
            ArrowSession::param_types(&p)
                .iter()
                .enumerate()
                .map(|(i, t)| arrow_schema::Field::new(format!("${}", i + 1), t.arrow(), true))
                .collect::<Vec<_>>(),
        );
        let version = self.sessions.planner().catalog().version();
        let handle = self.sessions.keep_statement(Statement {
            sql: query.query,
            session,
            plan: parking_lot::Mutex::new((p, version)),
            params: parking_lot::Mutex::default(),
        })?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: handle.into(),
            dataset_schema: schema_bytes(&flight_schema(&dataset))?,
            parameter_schema: schema_bytes(&params)?,
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        self.sessions
            .close_statement(&query.prepared_statement_handle);
        Ok(())
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let stmt = self.sessions.statement(&query.prepared_statement_handle)?;
        let batches: Vec<RecordBatch> = put_batches(request)
            .try_collect()
            .await
            .map_err(Status::from)?;
        *stmt.params.lock() = batches;
        Ok(DoPutPreparedStatementResult {
            prepared_statement_handle: Some(query.prepared_statement_handle),
        })
    }

    async fn get_flight_info_prepared_statement(
        &self,
        cmd: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let stmt = self.sessions.statement(&cmd.prepared_statement_handle)?;
        let p = self.plan_of(&stmt).await?;
        let rows = Self::bound_rows(&stmt, &p)?;
        let ticket = Ticket::new(cmd.as_any().encode_to_vec());
        let info = self
            .statement_info(
                stmt.session.clone(),
                p,
                rows,
                stmt.sql.clone(),
                ticket,
                request.into_inner(),
            )
            .await?;
        Ok(Response::new(info))
    }

    async fn do_get_prepared_statement(
        &self,
        cmd: CommandPreparedStatementQuery,
        _request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let stmt = self.sessions.statement(&cmd.prepared_statement_handle)?;
        let p = self.plan_of(&stmt).await?;
        let rows = Self::bound_rows(&stmt, &p)?;
        let outcome = Self::run_rows(stmt.session.clone(), p, rows, stmt.sql.clone())
            .await
            .map_err(status)?;
        Ok(outcome_stream(outcome))
    }

    async fn do_put_prepared_statement_update(
        &self,
        cmd: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let stmt = self.sessions.statement(&cmd.prepared_statement_handle)?;
        let p = self.plan_of(&stmt).await?;
        let batches: Vec<RecordBatch> = put_batches(request)
            .try_collect()
            .await
            .map_err(Status::from)?;
        let rows =
            ArrowSession::param_rows(&batches, ArrowSession::param_types(&p)).map_err(status)?;
        let rows = if rows.is_empty() {
            vec![Vec::new()]
        } else {
            rows
        };
        let outcome = Self::run_rows(stmt.session.clone(), p, rows, stmt.sql.clone())
            .await
            .map_err(status)?;
        Ok(count(outcome).await.map_err(status)? as i64)
    }

    async fn do_put_statement_ingest(
        &self,
        cmd: CommandStatementIngest,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let session = self
            .session(&request, cmd.transaction_id.as_deref())
            .await?;
        if cmd.temporary {
            return Err(status(PgError::feature_not_supported(
                "bulk ingest into a temporary table is not supported",
            )));
        }
        if let Some(s) = cmd
            .schema
            .as_deref()
            .filter(|s| !s.is_empty() && *s != metadata::SCHEMA)
        {
            return Err(status(
                PgError::invalid_schema_name(format!("schema \"{s}\" does not exist"))
                    .hint("every table is in schema public"),
            ));
        }
        let options = cmd.table_definition_options.unwrap_or_default();
        let exists = session.planner().catalog().table(&cmd.table).is_ok();
        let mut stream = put_batches(request);
        let first = stream.next().await.transpose().map_err(Status::from)?;
        if exists {
            match TableExistsOption::try_from(options.if_exists)
                .unwrap_or(TableExistsOption::Unspecified)
            {
                TableExistsOption::Append => {}
                TableExistsOption::Replace => {
                    return Err(status(
                        PgError::feature_not_supported(
                            "bulk ingest that replaces a table is not supported",
                        )
                        .hint("DROP TABLE and ingest with mode create, or TRUNCATE-free: append"),
                    ));
                }
                TableExistsOption::Fail | TableExistsOption::Unspecified => {
                    return Err(status(
                        PgError::duplicate_table(format!(
                            "relation \"{}\" already exists",
                            cmd.table
                        ))
                        .hint("ingest with mode append to add rows to it"),
                    ));
                }
            }
        } else {
            match TableNotExistOption::try_from(options.if_not_exist)
                .unwrap_or(TableNotExistOption::Unspecified)
            {
                TableNotExistOption::Create => {
                    let schema = match (&first, stream.schema()) {
                        (Some(b), _) => b.schema(),
                        (None, Some(s)) => s.clone(),
                        (None, None) => return Ok(0),
                    };
                    let mut columns = Vec::new();
                    for f in schema.fields() {
                        let ty = sql_type(f.data_type()).ok_or_else(|| {
                            status(PgError::feature_not_supported(format!(
                                "column \"{}\": no SQL type for Arrow type {}",
                                f.name(),
                                f.data_type()
                            )))
                        })?;
                        columns.push(format!("{} {ty}", quote(f.name())));
                    }
                    let sql = format!(
                        "CREATE TABLE {} ({})",
                        quote(&cmd.table),
                        columns.join(", ")
                    );
                    let p = session.prepare(&sql).await.map_err(status)?;
                    session.run(&p, &[], &sql).await.map_err(status)?;
                }
                TableNotExistOption::Fail | TableNotExistOption::Unspecified => {
                    return Err(status(PgError::undefined_table(format!(
                        "relation \"{}\" does not exist",
                        cmd.table
                    ))));
                }
            }
        }
        let rest = pg_batches(stream);
        let batches: Batches = Box::pin(futures::stream::iter(first.map(Ok)).chain(rest));
        let rows = session.ingest(&cmd.table, batches).await.map_err(status)?;
        Ok(rows as i64)
    }

    async fn do_action_begin_transaction(
        &self,
        _query: ActionBeginTransactionRequest,
        request: Request<Action>,
    ) -> Result<ActionBeginTransactionResult, Status> {
        let session = self.session(&request, None).await?;
        let p = session.prepare("BEGIN").await.map_err(status)?;
        session.run(&p, &[], "BEGIN").await.map_err(status)?;
        let id = self.sessions.begin(session)?;
        Ok(ActionBeginTransactionResult {
            transaction_id: id.into(),
        })
    }

    async fn do_action_end_transaction(
        &self,
        query: ActionEndTransactionRequest,
        _request: Request<Action>,
    ) -> Result<(), Status> {
        let session = self.sessions.end(&query.transaction_id)?;
        let sql = match EndTransaction::try_from(query.action) {
            Ok(EndTransaction::Commit) => "COMMIT",
            _ => "ROLLBACK",
        };
        let p = session.prepare(sql).await.map_err(status)?;
        session.run(&p, &[], sql).await.map_err(status)?;
        Ok(())
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let command = query.as_any();
        let schema = query.into_builder().schema();
        self.metadata_info(request, command, &schema).await
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.session(&request, None).await?;
        Ok(one_batch(metadata::catalogs(query)?))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let command = query.as_any();
        let schema = query.into_builder().schema();
        self.metadata_info(request, command, &schema).await
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.session(&request, None).await?;
        Ok(one_batch(metadata::schemas(query)?))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let command = query.as_any();
        let schema = query.into_builder().schema();
        self.metadata_info(request, command, &schema).await
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.session(&request, None).await?;
        Ok(one_batch(metadata::tables(self.sessions.planner(), query)?))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let command = query.as_any();
        let schema = query.into_builder().schema();
        self.metadata_info(request, command, &schema).await
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.session(&request, None).await?;
        Ok(one_batch(metadata::table_types(query)?))
    }

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let command = query.as_any();
        let schema = metadata::primary_keys_schema();
        self.metadata_info(request, command, &schema).await
    }

    async fn do_get_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.session(&request, None).await?;
        Ok(one_batch(metadata::primary_keys(
            self.sessions.planner(),
            &query,
        )?))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let command = query.as_any();
        let schema = query.into_builder(&metadata::SQL_INFO).schema();
        self.metadata_info(request, command, &schema).await
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.session(&request, None).await?;
        let batch = query
            .into_builder(&metadata::SQL_INFO)
            .build()
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(one_batch(batch))
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let command = query.as_any();
        let schema = query.into_builder(&metadata::XDBC_TYPES).schema();
        self.metadata_info(request, command, &schema).await
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.session(&request, None).await?;
        let batch = query
            .into_builder(&metadata::XDBC_TYPES)
            .build()
            .map_err(|e| Status::internal(e.to_string()))?;
        Ok(one_batch(batch))
    }

    async fn do_get_fallback(
        &self,
        _request: Request<Ticket>,
        message: Any,
    ) -> Result<Response<DoGetStream>, Status> {
        Err(Status::invalid_argument(format!(
            "not a ticket this server handed out: {}",
            message.type_url
        )))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
