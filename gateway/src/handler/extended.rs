//! The extended query protocol: Parse, Bind, Describe, Execute and
//! Close, within the session's budget of prepared statements, with
//! answers queued until Sync as PostgreSQL writes them.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::{Sink, SinkExt, StreamExt};
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::ExtendedQueryHandler;
use pgwire::api::results::{
    DescribePortalResponse, DescribeResponse, DescribeStatementResponse, FieldInfo, Response, Tag,
};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{ClientInfo, ClientPortalStore, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::data::{NoData, ParameterDescription, RowDescription};
use pgwire::messages::extendedquery::{
    Bind, BindComplete, Describe, Execute, TARGET_TYPE_BYTE_PORTAL, TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::response::TransactionStatus;
use tablegate_planner::Planner;

use super::params::decode_param;
use super::prepare::{Parsed, Prepared, prepare, replan, resolve};
use super::session::too_many_prepared;
use super::simple::settle_status;
use super::{ConnHandler, MAX_NAMED_STATEMENTS, MAX_PREPARED_BYTES, MAX_ROWS_PER_EXECUTE, Session};
use crate::encode::{self, fields, pg_type, text_field};
use crate::sqlstate::{PgError, error_info, wire_error};

/// Parses and plans statements for the extended protocol.
#[derive(Debug)]
pub struct StatementParser {
    planner: Planner,
    session: Arc<Session>,
}

impl StatementParser {
    pub(super) fn new(planner: Planner, session: Arc<Session>) -> Self {
        StatementParser { planner, session }
    }
}

#[async_trait]
impl QueryParser for StatementParser {
    type Statement = Parsed;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Parsed>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let stmts = Planner::parse(sql).map_err(|e| wire_error(PgError::from(&e)))?;
        match stmts.as_slice() {
            [] => Ok(None),
            [stmt] => {
                let version = self.planner.catalog().version();
                let p = prepare(&self.planner, stmt, sql, true).map_err(wire_error)?;
                let prepared = resolve(&self.planner, &self.session, p)
                    .await
                    .map_err(wire_error)?;
                Ok(Some(Parsed {
                    prepared,
                    text: crate::statements::normalize(sql).into(),
                    source: Some((sql.into(), version)),
                }))
            }
            _ => Err(wire_error(PgError::syntax_error(
                "cannot insert multiple commands into a prepared statement",
            ))),
        }
    }

    fn get_parameter_types(&self, stmt: &Parsed) -> PgWireResult<Vec<Type>> {
        Ok(stmt.param_types().iter().map(|t| pg_type(*t)).collect())
    }

    fn get_result_schema(
        &self,
        stmt: &Parsed,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        Ok(Arc::unwrap_or_clone(self.result_fields(stmt, format)))
    }
}

impl StatementParser {
    /// A statement's result columns in `format`: a prepared SELECT's are
    /// shared, not copied (a portal is described on every execution that
    /// libpq sends).
    pub(super) fn result_fields(
        &self,
        stmt: &Prepared,
        format: Option<&Format>,
    ) -> Arc<Vec<FieldInfo>> {
        let fields = match stmt {
            // Made at prepare time; the others are made when asked.
            Prepared::Select(s) => return s.fields(format),
            Prepared::Write(w) => fields(&w.returning, format),
            Prepared::Engine {
                plan,
                explain: None,
            } => encode::arrow_fields(&plan.schema, format),
            Prepared::Explain(_) | Prepared::Engine { .. } => text_field("QUERY PLAN"),
            Prepared::Show(n) => text_field(n),
            Prepared::Version => text_field("version"),
            Prepared::Sleep(_) => text_field("pg_sleep"),
            Prepared::Advise(call) => encode::arrow_fields(&call.schema(), format),
            Prepared::Fetch { name, .. } => self
                .session
                .lock()
                .cursors
                .get(name)
                .map(|c| c.fields(format))
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        Arc::new(fields)
    }
}

/// A Describe's answer, queued for the flush at Sync: ParameterDescription
/// for a statement, then RowDescription or NoData.
async fn feed_describe<C, D>(client: &mut C, d: &D) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    D: DescribeResponse,
{
    if let Some(types) = d.parameters() {
        client
            .feed(PgWireBackendMessage::ParameterDescription(
                ParameterDescription::new(types.iter().map(|t| t.oid()).collect()),
            ))
            .await?;
    }
    client.feed(row_description(d.fields())).await?;
    Ok(())
}

/// RowDescription of `fields`, or NoData when there are none.
fn row_description(fields: &[FieldInfo]) -> PgWireBackendMessage {
    if fields.is_empty() {
        PgWireBackendMessage::NoData(NoData::new())
    } else {
        PgWireBackendMessage::RowDescription(RowDescription::new(
            fields.iter().map(Into::into).collect(),
        ))
    }
}

#[async_trait]
impl ExtendedQueryHandler for ConnHandler {
    type Statement = Parsed;
    type QueryParser = StatementParser;

    fn query_parser(&self) -> Arc<StatementParser> {
        self.parser.clone()
    }

    /// Parse, as pgwire's default, within the session's budget of named
    /// statements (the unnamed one is replaced, not added).
    async fn on_parse<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::extendedquery::Parse,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message
            .name
            .clone()
            .unwrap_or_else(|| pgwire::api::DEFAULT_NAME.to_owned());
        let named = name != pgwire::api::DEFAULT_NAME;
        if named {
            let s = self.session.lock();
            let parsed = &s.parsed;
            let held: usize = parsed
                .iter()
                .filter(|(n, _)| **n != name)
                .map(|(_, len)| len)
                .sum();
            let too_many = !parsed.contains_key(&name) && parsed.len() >= MAX_NAMED_STATEMENTS;
            if too_many || held + message.query.len() > MAX_PREPARED_BYTES {
                return Err(wire_error(too_many_prepared(
                    "close statements no longer needed (Close, or the driver's statement cache size)",
                )));
            }
        }
        match pgwire::api::stmt::StoredStatement::parse(client, &message, self.query_parser())
            .await?
        {
            Some(stmt) => client.portal_store().put_statement(Arc::new(stmt)),
            None => client.portal_store().put_empty_statement(&name),
        }
        if named {
            self.session.lock().parsed.insert(name, message.query.len());
        }
        client
            .send(PgWireBackendMessage::ParseComplete(
                pgwire::messages::extendedquery::ParseComplete::new(),
            ))
            .await?;
        Ok(())
    }

    /// Close, as pgwire's default, releasing the statement's place in the
    /// session's budget.
    async fn on_close<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::extendedquery::Close,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(pgwire::api::DEFAULT_NAME);
        match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => {
                client.portal_store().rm_statement(name);
                self.session.lock().parsed.remove(name);
            }
            TARGET_TYPE_BYTE_PORTAL => client.portal_store().rm_portal(name),
            _ => {}
        }
        client
            .send(PgWireBackendMessage::CloseComplete(
                pgwire::messages::extendedquery::CloseComplete::new(),
            ))
            .await?;
        Ok(())
    }

    /// Bind, as pgwire's default but for one thing: BindComplete is queued
    /// (`feed`), not flushed. PostgreSQL writes a Bind/Execute/Sync round's
    /// answers in one go at Sync; a flush here was a second `send` per
    /// prepared statement, waking the client for nothing.
    async fn on_bind<C>(&self, client: &mut C, message: Bind) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statement_name = message
            .statement_name
            .as_deref()
            .unwrap_or(pgwire::api::DEFAULT_NAME);
        let portal_name = message
            .portal_name
            .as_deref()
            .unwrap_or(pgwire::api::DEFAULT_NAME);
        match client.portal_store().get_statement(statement_name) {
            Some(Entry::Value(statement)) => {
                let portal = Portal::try_new(&message, statement)?;
                client.portal_store().put_portal(Arc::new(portal));
            }
            Some(Entry::Empty) => {
                if !message.parameters.is_empty() {
                    return Err(wire_error(PgError::protocol_violation(format!(
                        "bind message supplies {} parameters, but prepared statement \"{statement_name}\" requires 0",
                        message.parameters.len()
                    ))));
                }
                client.portal_store().put_empty_portal(portal_name);
            }
            None => return Err(PgWireError::StatementNotFound(statement_name.to_owned())),
        }
        client
            .feed(PgWireBackendMessage::BindComplete(BindComplete::new()))
            .await?;
        Ok(())
    }

    /// Describe, as pgwire's default but queued, not flushed: pgbench's
    /// and many drivers' prepared statements send Bind, Describe, Execute
    /// and Sync every time (see [`Self::on_bind`]).
    async fn on_describe<C>(&self, client: &mut C, message: Describe) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let name = message.name.as_deref().unwrap_or(pgwire::api::DEFAULT_NAME);
        match message.target_type {
            TARGET_TYPE_BYTE_STATEMENT => match client.portal_store().get_statement(name) {
                Some(Entry::Value(stmt)) => {
                    let r = self.do_describe_statement(client, &stmt).await?;
                    feed_describe(client, &r).await
                }
                Some(Entry::Empty) => {
                    feed_describe(client, &DescribeStatementResponse::no_data()).await
                }
                None => Err(PgWireError::StatementNotFound(name.to_owned())),
            },
            TARGET_TYPE_BYTE_PORTAL => match client.portal_store().get_portal(name) {
                Some(Entry::Value(portal)) => {
                    // pgwire's do_describe_portal, without copying the fields.
                    let fields = self.parser.result_fields(
                        &portal.statement.statement,
                        Some(&portal.result_column_format),
                    );
                    client.feed(row_description(&fields)).await?;
                    Ok(())
                }
                Some(Entry::Empty) => {
                    feed_describe(client, &DescribePortalResponse::no_data()).await
                }
                None => Err(PgWireError::PortalNotFound(name.to_owned())),
            },
            other => Err(PgWireError::InvalidTargetType(other)),
        }
    }

    /// pgwire's Execute, then the session's transaction status
    /// ([`settle_status`]); the ReadyForQuery at Sync carries it.
    async fn on_execute<C>(&self, client: &mut C, mut message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // pgwire casts the row count to usize and reserves room for that
        // many rows: a negative one (PostgreSQL: all rows) overflowed the
        // capacity, a large one asked the allocator for gigabytes. Fewer
        // rows then PortalSuspended is a valid answer to a large count.
        message.max_rows = match message.max_rows {
            n if n <= 0 => 0,
            n => n.min(MAX_ROWS_PER_EXECUTE),
        };
        let result = self._on_execute(client, message).await;
        let derived = if self.session.take_restored() {
            TransactionStatus::Transaction
        } else {
            client.transaction_status()
        };
        let status = settle_status(self.session.in_transaction(), derived);
        client.set_transaction_status(status);
        result
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Parsed>,
        max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let error = |e: PgError| Response::Error(Box::new(error_info(e)));
        let mut p: &Prepared = &portal.statement.statement;
        // Planned before a table definition changed: plan it again (once
        // per catalog version; the session keeps the new plan).
        let replanned;
        let now = self.planner.catalog().version();
        if let Some((sql, version)) = &portal.statement.statement.source
            && *version != now
        {
            let cached = (self.session.lock().replanned.get(sql))
                .filter(|(v, _)| *v == now)
                .map(|(_, p)| p.clone());
            replanned = match cached {
                Some(r) => r,
                None => match replan(&self.planner, &self.session, p, sql).await {
                    Ok(r) => {
                        let mut s = self.session.lock();
                        if s.replanned.len() >= super::MAX_NAMED_STATEMENTS {
                            s.replanned.clear();
                        }
                        s.replanned.insert(sql.clone(), (now, r.clone()));
                        r
                    }
                    Err(e) => return Ok(error(e)),
                },
            };
            p = &replanned;
        }
        if client.transaction_status() == TransactionStatus::Error
            && !matches!(
                p,
                Prepared::Commit | Prepared::Rollback | Prepared::RollbackTo(_)
            )
        {
            return Ok(error(PgError::aborted()));
        }
        let param_types = p.param_types();
        // Format codes: none, one for all, or one each (PostgreSQL's rule).
        let codes_ok = |f: &Format, n: usize| match f {
            Format::Individual(v) => v.len() == n,
            _ => true,
        };
        let result_columns = match p {
            Prepared::Select(s) => Some(s.plan.columns.len()),
            Prepared::Write(w) => Some(w.returning.len()),
            Prepared::Engine {
                plan,
                explain: None,
            } => Some(plan.schema.fields().len()),
            _ => None,
        };
        if !codes_ok(&portal.parameter_format, portal.parameter_len())
            || result_columns.is_some_and(|n| !codes_ok(&portal.result_column_format, n))
        {
            return Ok(error(PgError::protocol_violation(
                "bind message has a format code count that matches neither the parameters nor the result columns",
            )));
        }
        if portal.parameter_len() != param_types.len() {
            return Ok(error(PgError::protocol_violation(format!(
                "bind message supplies {} parameters, but prepared statement requires {}",
                portal.parameter_len(),
                param_types.len()
            ))));
        }
        let mut params = Vec::with_capacity(param_types.len());
        let open = p.open_params();
        for (i, t) in param_types.iter().enumerate() {
            match decode_param(portal, i, *t, open.get(i).copied().unwrap_or(false)) {
                Ok(v) => params.push(v),
                Err(e) => return Ok(error(e)),
            }
        }
        let response = match self
            .run(
                client,
                p,
                &params,
                Some(&portal.result_column_format),
                Some(portal.statement.statement.text.clone()),
            )
            .await
        {
            Ok(r) => r,
            Err(e) => return Ok(error(e)),
        };
        // A cursor is also a protocol portal of the same name, so clients
        // that Describe it (psycopg's server-side cursors) get its columns.
        match p {
            Prepared::Declare { name, .. } => {
                let stmt = Arc::new(pgwire::api::stmt::StoredStatement::new(
                    name.clone(),
                    Parsed {
                        prepared: Prepared::Fetch {
                            name: name.clone(),
                            count: None,
                        },
                        text: format!("FETCH ALL FROM {name}").into(),
                        source: None,
                    },
                    Vec::new(),
                ));
                client
                    .portal_store()
                    .put_portal(Arc::new(Portal::new_cursor(name.clone(), stmt)));
            }
            Prepared::Close(Some(name)) => client.portal_store().rm_portal(name),
            _ => {}
        }
        match response {
            // No row limit: write rows as they come and complete here, so
            // pgwire never collects the result.
            Response::Query(mut q) if max_rows == 0 => {
                let mut n = 0usize;
                while let Some(row) = q.data_rows().next().await {
                    match row {
                        Ok(row) => {
                            client.feed(PgWireBackendMessage::DataRow(row)).await?;
                            n += 1;
                        }
                        Err(PgWireError::UserError(info)) => return Ok(Response::Error(info)),
                        Err(e) => return Err(e),
                    }
                }
                Ok(Response::Execution(Tag::new(q.command_tag()).with_rows(n)))
            }
            other => Ok(other),
        }
    }
}
