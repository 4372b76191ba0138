//! The protocol handlers: one [`Connection`] per client socket, holding the
//! session, answering the simple and extended query protocols.
//!
//! Both protocols share [`prepare`] (SQL → [`Prepared`]) and
//! [`ConnHandler::run`] (Prepared + parameters → response). Results stream:
//! a simple query's rows are produced as pgwire sends them; an extended
//! Execute without a row limit writes DataRows as store pages arrive, and
//! one with a row limit leaves the live scan in the suspended portal, so
//! the next Execute resumes it (pgwire's default would collect every row
//! first).

use std::fmt::Debug;
use std::sync::{Arc, LazyLock};
use std::time::Instant;

use async_trait::async_trait;
use futures::{Sink, SinkExt, StreamExt};
use parking_lot::Mutex;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{
    ExtendedQueryHandler, SimpleQueryHandler, send_execution_response, send_query_response,
    send_ready_for_query,
};
use pgwire::api::results::{
    DataRowEncoder, DescribePortalResponse, DescribeResponse, DescribeStatementResponse, FieldInfo,
    QueryResponse, Response, Tag,
};
use pgwire::api::stmt::QueryParser;
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{
    ClientInfo, ClientPortalStore, PgWireConnectionState, PgWireServerHandlers, Type,
};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::messages::data::{NoData, ParameterDescription, RowDescription};
use pgwire::messages::extendedquery::{
    Bind, BindComplete, Describe, Execute, TARGET_TYPE_BYTE_PORTAL, TARGET_TYPE_BYTE_STATEMENT,
};
use pgwire::messages::response::{EmptyQueryResponse, NoticeResponse, TransactionStatus};
use pgwire::messages::simplequery::Query;
use pgwire::types::FromSqlText;
use pgwire::types::format::FormatOptions;
use postgres_types::FromSqlOwned;
use sqlparser::ast::{self, Statement};
use tablegate_catalog::{ColumnRef, SqlType};
use tablegate_planner::{Plan, Planner, Route, SelectPlan, Transaction, WritePlan};
use tablegate_store::Value;
use tracing::Instrument;

use crate::analytics::{Engine, EnginePlan};
use crate::auth::{AuthMode, ScramStartup};
use crate::cancel::{CancelRegistry, CancelSignal, RegistryCancelHandler};
use crate::copy::CopyFormat;
use crate::encode::{self, Stop, error_info, fields, pg_type, text_field, wire_error};
use crate::session::{Session, version_string};
use crate::sqlstate::PgError;
use crate::telemetry::{StatementClass, StatementGuard};

/// Rows one Execute message sends at most before PortalSuspended
/// (pgwire reserves room for the count the client asks for).
const MAX_ROWS_PER_EXECUTE: i32 = 100_000;

/// A statement ready to run, shared by both protocols.
#[derive(Debug, Clone)]
pub enum Prepared {
    /// A SELECT.
    Select(NativeSelect),
    /// EXPLAIN [ANALYZE] [FORMAT JSON].
    Explain {
        /// Run it too.
        analyze: bool,
        /// JSON output.
        json: bool,
        /// The SELECT (for UPDATE / DELETE: their scan).
        select: Arc<SelectPlan>,
        /// `Update` / `Delete` when explaining a write.
        write: Option<&'static str>,
    },
    /// INSERT, UPDATE, DELETE.
    Write(Arc<WritePlan>),
    /// CREATE / DROP / ALTER TABLE.
    Ddl(Plan),
    /// SET name = value.
    Set(String, String),
    /// RESET name.
    Reset(String),
    /// SHOW name / SHOW ALL.
    Show(String),
    /// BEGIN.
    Begin,
    /// COMMIT.
    Commit,
    /// ROLLBACK.
    Rollback,
    /// SAVEPOINT name.
    Savepoint(String),
    /// RELEASE [SAVEPOINT] name.
    Release(String),
    /// ROLLBACK TO [SAVEPOINT] name.
    RollbackTo(String),
    /// SELECT version().
    Version,
    /// DECLARE name [NO SCROLL] CURSOR [WITH HOLD] FOR select.
    Declare {
        /// Cursor name.
        name: String,
        /// Its query.
        query: CursorQuery,
        /// WITH HOLD: survives COMMIT.
        hold: bool,
    },
    /// FETCH [n | ALL | NEXT] FROM name; `None` is ALL.
    Fetch {
        /// Cursor name.
        name: String,
        /// Rows to fetch.
        count: Option<usize>,
    },
    /// CLOSE name / CLOSE ALL (`None`).
    Close(Option<String>),
    /// DEALLOCATE [PREPARE] name | ALL (`None`): drops a statement of
    /// [`Prepared::PrepareSql`]; other names are acknowledged (drivers
    /// release protocol-level statements with Close messages).
    Deallocate(Option<String>),
    /// PREPARE name AS statement: the SQL-level prepared statement.
    PrepareSql {
        /// Its name, folded like an identifier.
        name: String,
        /// The statement, planned once.
        stmt: Box<Prepared>,
        /// Its text's length (counted against [`MAX_PREPARED_BYTES`]).
        bytes: usize,
    },
    /// EXPLAIN [ANALYZE] EXECUTE name [(constants)]: the plan of the
    /// prepared statement with these parameters (their class is decided at
    /// bind time, so it can differ from one call to the next).
    ExplainExecute {
        /// The prepared statement's name.
        name: String,
        /// Its parameters, as constant expressions.
        args: Vec<ast::Expr>,
        /// ANALYZE: run it too.
        analyze: bool,
        /// FORMAT JSON.
        json: bool,
    },
    /// EXECUTE name [(constants)].
    ExecuteSql {
        /// The prepared statement's name.
        name: String,
        /// Its parameters, as constant expressions.
        args: Vec<ast::Expr>,
    },
    /// COPY t [(cols)] FROM STDIN.
    CopyIn {
        /// An INSERT of the named columns.
        plan: Arc<WritePlan>,
        /// The columns the input's fields fill, in order.
        columns: Vec<ColumnRef>,
        /// Text or CSV and their options.
        format: CopyFormat,
    },
    /// A statement for the analytics engine, not yet planned by it (the
    /// planner's reason says why it is not native).
    EngineSql {
        /// The statement's text.
        sql: String,
        /// Why the native path does not run it.
        reason: String,
        /// `Some(analyze)` for EXPLAIN [ANALYZE].
        explain: Option<bool>,
    },
    /// A statement planned by the analytics engine.
    Engine {
        /// DataFusion's plan.
        plan: Arc<EnginePlan>,
        /// `Some(analyze)` for EXPLAIN [ANALYZE].
        explain: Option<bool>,
    },
    /// COPY t / (query) TO STDOUT.
    CopyOut {
        /// The rows.
        select: Arc<SelectPlan>,
        /// Text or CSV and their options.
        format: CopyFormat,
    },
}

/// A native SELECT with its RowDescription in text format, made when it
/// is prepared: a prepared statement's Describe and Execute each built the
/// fields again (a name and format options per column) every time.
#[derive(Debug, Clone)]
pub struct NativeSelect {
    /// The plan.
    pub plan: Arc<SelectPlan>,
    text_fields: Arc<Vec<FieldInfo>>,
}

impl NativeSelect {
    fn new(plan: Arc<SelectPlan>) -> Self {
        let text_fields = Arc::new(fields(&plan.columns, None));
        NativeSelect { plan, text_fields }
    }

    /// The result's fields in `format` (the ones made at prepare time
    /// when every column is text).
    fn fields(&self, format: Option<&Format>) -> Arc<Vec<FieldInfo>> {
        match format {
            None | Some(Format::UnifiedText) => self.text_fields.clone(),
            Some(f) => Arc::new(fields(&self.plan.columns, Some(f))),
        }
    }
}

impl Prepared {
    /// The types of the statement's `$n` parameters.
    /// Parameters the plan leaves untyped (analytics only): each takes
    /// the type the client declares.
    fn open_params(&self) -> &[bool] {
        match self {
            Prepared::Engine { plan, .. }
            | Prepared::Declare {
                query: CursorQuery::Engine(plan),
                ..
            } => &plan.open_params,
            _ => &[],
        }
    }

    fn param_types(&self) -> &[SqlType] {
        match self {
            Prepared::Select(s) => &s.plan.param_types,
            Prepared::Explain { select: s, .. } => &s.param_types,
            Prepared::Write(w) => &w.param_types,
            Prepared::Engine { plan, .. } => &plan.param_types,
            Prepared::Declare { query, .. } => query.param_types(),
            _ => &[],
        }
    }
}

/// What a cursor reads: a native scan, or an analytics statement (an
/// aggregate over a server-side cursor, as psycopg's named cursors send).
#[derive(Debug, Clone)]
pub enum CursorQuery {
    /// A native scan.
    Native(Arc<SelectPlan>),
    /// An analytics statement not yet planned by the engine.
    EngineSql {
        /// The query's text.
        sql: String,
        /// Why the native path does not run it.
        reason: String,
    },
    /// An analytics statement planned by the engine.
    Engine(Arc<EnginePlan>),
}

impl CursorQuery {
    /// The types of its `$n` parameters.
    fn param_types(&self) -> &[SqlType] {
        match self {
            CursorQuery::Native(s) => &s.param_types,
            CursorQuery::Engine(plan) => &plan.param_types,
            CursorQuery::EngineSql { .. } => &[],
        }
    }
}

/// A `COPY ... FROM STDIN` in progress: parser state, rows not yet
/// written, and what was written so far.
/// Identity ids a COPY reserves at once.
const COPY_IDS: usize = 1_000;

struct CopyIn {
    plan: Arc<WritePlan>,
    columns: Vec<ColumnRef>,
    parser: crate::copy::Parser,
    rows: Vec<tablegate_planner::write::Row>,
    /// The first error; later data is swallowed and the error reported at
    /// CopyDone (pgwire would otherwise drop the connection's COPY state).
    error: Option<PgError>,
    rows_done: u64,
    groups_done: u64,
    opts: tablegate_planner::ExecOptions,
    /// The cancel generation when COPY started, and its statement_timeout
    /// deadline: checked with every CopyData and every 1,000 records.
    since: u64,
    deadline: Option<Instant>,
}

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

/// An open cursor: what it reads, and the rows it has not fetched yet.
///
/// Its rows wait as Arrow batches, not encoded rows, so each FETCH encodes
/// them in the format that FETCH asks for (tokio-postgres asks for binary,
/// psql for text), as PostgreSQL does.
struct Cursor {
    query: CursorQuery,
    rows: Arc<tokio::sync::Mutex<CursorRows>>,
    hold: bool,
    /// Savepoints of the transaction when it was declared: ROLLBACK TO an
    /// earlier one closes it, as in PostgreSQL.
    depth: usize,
}

impl Cursor {
    /// Its columns, described in `format`.
    fn fields(&self, format: Option<&Format>) -> Vec<FieldInfo> {
        match &self.query {
            CursorQuery::Native(s) => fields(&s.columns, format),
            CursorQuery::Engine(plan) => encode::arrow_fields(&plan.schema, format),
            CursorQuery::EngineSql { .. } => Vec::new(),
        }
    }
}

type BatchStream = std::pin::Pin<
    Box<dyn futures::Stream<Item = Result<arrow_array::RecordBatch, PgError>> + Send>,
>;

/// The rows of a cursor not fetched yet: its remaining batches, and the
/// batch the last FETCH stopped inside.
struct CursorRows {
    batches: BatchStream,
    /// A batch partly fetched, and how many of its rows have gone.
    partial: Option<(arrow_array::RecordBatch, usize)>,
    /// The batches have ended (a finished stream must not be polled again).
    done: bool,
}

impl CursorRows {
    /// The next `count` rows (all of them for `None`), as batch slices.
    async fn take(
        &mut self,
        count: Option<usize>,
        stop: &Stop,
    ) -> Result<Vec<arrow_array::RecordBatch>, PgError> {
        let mut out = Vec::new();
        let mut left = count.unwrap_or(usize::MAX);
        while left > 0 {
            let (batch, used) = match self.partial.take() {
                Some(p) => p,
                None if self.done => break,
                None => {
                    let next = tokio::select! {
                        n = self.batches.next() => n,
                        e = stop.wait() => return Err(e),
                    };
                    match next {
                        None => {
                            self.done = true;
                            break;
                        }
                        Some(batch) => (batch?, 0),
                    }
                }
            };
            let n = (batch.num_rows() - used).min(left);
            out.push(batch.slice(used, n));
            left -= n;
            if used + n < batch.num_rows() {
                self.partial = Some((batch, used + n));
            }
        }
        Ok(out)
    }
}

impl Debug for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cursor")
            .field("hold", &self.hold)
            .finish_non_exhaustive()
    }
}

/// A session's open cursors, shared with its statement parser (which
/// describes FETCH results).
type Cursors = Arc<Mutex<std::collections::HashMap<String, Cursor>>>;

fn expr_text(e: &ast::Expr) -> String {
    match e {
        ast::Expr::Value(v) => match &v.value {
            ast::Value::SingleQuotedString(s) => s.clone(),
            other => other.to_string(),
        },
        ast::Expr::Identifier(i) => i.value.clone(),
        other => other.to_string(),
    }
}

/// Is this `SELECT version()`?
fn is_version_query(q: &ast::Query) -> bool {
    match &*q.body {
        ast::SetExpr::Select(s) if s.from.is_empty() && s.projection.len() == 1 => matches!(
            &s.projection[0],
            ast::SelectItem::UnnamedExpr(ast::Expr::Function(f)) if f.name.to_string().eq_ignore_ascii_case("version")
        ),
        _ => false,
    }
}

/// The row count a command tag carries (`INSERT 0 5` → 5).
fn tag_rows(tag: &Tag) -> u64 {
    pgwire::messages::response::CommandComplete::from(tag.clone())
        .tag
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A cursor name as PostgreSQL folds it.
pub fn cursor_name(i: &ast::Ident) -> String {
    tablegate_planner::expr::fold(i)
}

/// A statement for the analytics engine: its own text when it is the whole
/// query string, else its SQL rendering.
fn engine_sql(stmt: &Statement, sql: &str, reason: &str, explain: Option<bool>) -> Prepared {
    let single = !sql.is_empty() && Planner::parse(sql).is_ok_and(|v| v.len() == 1);
    Prepared::EngineSql {
        sql: if single && explain.is_none() {
            sql.to_owned()
        } else {
            stmt.to_string()
        },
        reason: reason.to_owned(),
        explain,
    }
}

/// When the planner refuses a query the analytics engine may run: a
/// construct it does not run natively, or a catalog table (`pg_catalog`,
/// `information_schema`) it does not know.
fn engine_route(
    stmt: &Statement,
    sql: &str,
    e: tablegate_planner::PlanError,
) -> Result<Prepared, PgError> {
    use tablegate_planner::PlanError;
    let query = match stmt {
        Statement::Query(_) => Some((stmt, None)),
        Statement::Explain {
            statement, analyze, ..
        } if matches!(**statement, Statement::Query(_)) => Some((&**statement, Some(*analyze))),
        _ => None,
    };
    let lower = sql.to_ascii_lowercase();
    let catalog = |name: &str| {
        name.starts_with("pg_")
            || lower.contains("pg_catalog")
            || lower.contains("information_schema")
    };
    match (&e, query) {
        (PlanError::NeedsAnalytics { reason }, Some((q, explain))) => Ok(engine_sql(
            q,
            if explain.is_some() { "" } else { sql },
            reason,
            explain,
        )),
        (PlanError::UnknownTable { name, .. }, Some((q, explain))) if catalog(name) => {
            Ok(engine_sql(
                q,
                if explain.is_some() { "" } else { sql },
                "a system catalog query",
                explain,
            ))
        }
        _ => Err(PgError::from(&e)),
    }
}

/// Plans one statement.
pub fn prepare(planner: &Planner, stmt: &Statement, sql: &str) -> Result<Prepared, PgError> {
    let plan_err = |e: tablegate_planner::PlanError| PgError::from(&e);
    Ok(match stmt {
        Statement::Query(q) if is_version_query(q) => Prepared::Version,
        Statement::Set(ast::Set::SingleAssignment {
            variable, values, ..
        }) => {
            let value = values.iter().map(expr_text).collect::<Vec<_>>().join(", ");
            Prepared::Set(variable.to_string(), value)
        }
        Statement::Set(ast::Set::SetTimeZone { value, .. }) => {
            Prepared::Set("TimeZone".into(), expr_text(value))
        }
        Statement::Set(ast::Set::SetNames { charset_name, .. }) => {
            Prepared::Set("client_encoding".into(), charset_name.to_string())
        }
        Statement::Reset(r) => Prepared::Reset(match &r.reset {
            ast::Reset::ConfigurationParameter(n) => n.to_string(),
            ast::Reset::ALL => {
                return Err(PgError::new("0A000", "RESET ALL is not supported")
                    .hint("reset settings one by one"));
            }
        }),
        // `SHOW tablegate.page_size` arrives as two identifiers; PostgreSQL
        // spells two settings in words (SQLAlchemy asks the first on connect).
        Statement::ShowVariable { variable } => {
            let words: Vec<String> = variable
                .iter()
                .map(|i| i.value.to_ascii_lowercase())
                .collect();
            Prepared::Show(
                match words.iter().map(String::as_str).collect::<Vec<_>>()[..] {
                    ["transaction", "isolation", "level"] => "transaction_isolation".into(),
                    ["time", "zone"] => "timezone".into(),
                    _ => variable
                        .iter()
                        .map(|i| i.value.clone())
                        .collect::<Vec<_>>()
                        .join("."),
                },
            )
        }
        Statement::Declare { stmts } => match stmts.as_slice() {
            [d] if d.names.len() == 1 && d.for_query.is_some() => {
                if d.scroll == Some(true) {
                    return Err(PgError::new("0A000", "SCROLL cursors are not supported")
                        .hint("cursors move forward only, like the store's continuation tokens"));
                }
                let q = Statement::Query(d.for_query.clone().expect("checked"));
                let query = match planner.plan(&q, sql) {
                    Ok(Plan::Select(s)) => match &s.route {
                        Route::Native => CursorQuery::Native(s),
                        Route::Engine(reason) => CursorQuery::EngineSql {
                            sql: q.to_string(),
                            reason: reason.clone(),
                        },
                    },
                    Ok(_) => return Err(PgError::new("42601", "DECLARE needs a SELECT")),
                    // What the analytics engine runs, a cursor reads too;
                    // its text is the query alone, not the DECLARE.
                    Err(e) => match engine_route(&q, sql, e)? {
                        Prepared::EngineSql { reason, .. } => CursorQuery::EngineSql {
                            sql: q.to_string(),
                            reason,
                        },
                        _ => return Err(PgError::new("42601", "DECLARE needs a SELECT")),
                    },
                };
                Prepared::Declare {
                    name: crate::handler::cursor_name(&d.names[0]),
                    query,
                    hold: d.hold == Some(true),
                }
            }
            _ => {
                return Err(PgError::new(
                    "0A000",
                    "this form of DECLARE is not supported",
                ));
            }
        },
        Statement::Fetch {
            name, direction, ..
        } => {
            let n = |v: &ast::ValueWithSpan| match &v.value {
                ast::Value::Number(n, _) => n
                    .parse::<usize>()
                    .map_err(|_| PgError::new("22023", format!("invalid FETCH count {n}"))),
                other => Err(PgError::new(
                    "22023",
                    format!("invalid FETCH count {other}"),
                )),
            };
            let count = match direction {
                ast::FetchDirection::Count { limit } => Some(n(limit)?),
                ast::FetchDirection::Forward { limit: Some(limit) } => Some(n(limit)?),
                ast::FetchDirection::Next | ast::FetchDirection::Forward { limit: None } => Some(1),
                ast::FetchDirection::All | ast::FetchDirection::ForwardAll => None,
                other => {
                    return Err(
                        PgError::new("0A000", format!("FETCH {other} is not supported"))
                            .hint("cursors move forward only: FETCH n, FETCH NEXT, FETCH ALL"),
                    );
                }
            };
            Prepared::Fetch {
                name: cursor_name(name),
                count,
            }
        }
        Statement::Deallocate { name, .. } => Prepared::Deallocate(
            (!name.value.eq_ignore_ascii_case("all")).then(|| tablegate_planner::expr::fold(name)),
        ),
        Statement::Explain { statement, .. }
            if matches!(**statement, Statement::Execute { .. }) =>
        {
            let (analyze, json) = tablegate_planner::explain_flags(stmt).map_err(plan_err)?;
            match prepare(planner, statement, sql)? {
                Prepared::ExecuteSql { name, args } => Prepared::ExplainExecute {
                    name,
                    args,
                    analyze,
                    json,
                },
                _ => {
                    return Err(PgError::new(
                        "42601",
                        "EXPLAIN EXECUTE needs a statement name",
                    ));
                }
            }
        }
        Statement::Prepare {
            name, statement, ..
        } => {
            if matches!(**statement, Statement::Prepare { .. }) {
                return Err(PgError::new("42601", "PREPARE cannot prepare a PREPARE"));
            }
            // Parameter types come from the statement's context, as for
            // the extended protocol; declared types are not needed.
            let inner = statement.to_string();
            Prepared::PrepareSql {
                name: tablegate_planner::expr::fold(name),
                stmt: Box::new(prepare(planner, statement, &inner)?),
                bytes: inner.len(),
            }
        }
        Statement::Execute {
            name: Some(name),
            parameters,
            immediate: false,
            into,
            using,
            ..
        } if into.is_empty() && using.is_empty() => Prepared::ExecuteSql {
            name: tablegate_planner::expr::fold(
                name.0.last().and_then(|p| p.as_ident()).ok_or_else(|| {
                    PgError::new("42601", "EXECUTE needs a prepared statement's name")
                })?,
            ),
            args: parameters.clone(),
        },
        Statement::Close { cursor } => Prepared::Close(match cursor {
            ast::CloseCursor::All => None,
            ast::CloseCursor::Specific { name } => Some(cursor_name(name)),
        }),
        Statement::StartTransaction { .. } => Prepared::Begin,
        Statement::Commit { .. } => Prepared::Commit,
        Statement::Rollback {
            savepoint: None, ..
        } => Prepared::Rollback,
        Statement::Rollback {
            savepoint: Some(name),
            ..
        } => Prepared::RollbackTo(tablegate_planner::expr::fold(name)),
        Statement::Savepoint { name } => Prepared::Savepoint(tablegate_planner::expr::fold(name)),
        Statement::ReleaseSavepoint { name } => {
            Prepared::Release(tablegate_planner::expr::fold(name))
        }
        Statement::Copy {
            source,
            to,
            target,
            options,
            legacy_options,
            values,
        } => {
            crate::copy::check_target(target, *to)?;
            if !values.is_empty() {
                return Err(PgError::new("0A000", "inline COPY data is not supported")
                    .hint("send the data after the COPY statement (psql does)"));
            }
            let format = CopyFormat::from_options(options, legacy_options)?;
            match (source, *to) {
                (
                    ast::CopySource::Table {
                        table_name,
                        columns,
                    },
                    false,
                ) => {
                    let (plan, columns) = tablegate_planner::write::plan_copy_in(
                        planner.catalog(),
                        table_name,
                        columns,
                    )
                    .map_err(plan_err)?;
                    Prepared::CopyIn {
                        plan: Arc::new(plan),
                        columns,
                        format,
                    }
                }
                (
                    ast::CopySource::Table {
                        table_name,
                        columns,
                    },
                    true,
                ) => Prepared::CopyOut {
                    select: Arc::new(
                        tablegate_planner::write::plan_copy_out(
                            planner.catalog(),
                            table_name,
                            columns,
                        )
                        .map_err(plan_err)?,
                    ),
                    format,
                },
                (ast::CopySource::Query(q), true) => {
                    match planner
                        .plan(&Statement::Query(q.clone()), sql)
                        .map_err(plan_err)?
                    {
                        Plan::Select(select) => Prepared::CopyOut { select, format },
                        _ => return Err(PgError::new("42601", "COPY (query) needs a SELECT")),
                    }
                }
                (ast::CopySource::Query(_), false) => {
                    return Err(PgError::new("42601", "COPY (query) FROM is not valid")
                        .hint("COPY a table FROM STDIN"));
                }
            }
        }
        other => match match planner.plan(other, sql) {
            Ok(plan) => plan,
            Err(e) => return engine_route(other, sql, e),
        } {
            Plan::Select(s) => match &s.route {
                Route::Engine(reason) => engine_sql(other, sql, reason, None),
                Route::Native => Prepared::Select(NativeSelect::new(s)),
            },
            Plan::Explain {
                analyze,
                json,
                select,
                write,
            } => match (&select.route, other) {
                (Route::Engine(reason), Statement::Explain { statement, .. })
                    if write.is_none() =>
                {
                    engine_sql(statement, "", reason, Some(analyze))
                }
                _ => Prepared::Explain {
                    analyze,
                    json,
                    select,
                    write,
                },
            },
            Plan::Write(w) => Prepared::Write(w),
            p @ (Plan::CreateTable { .. } | Plan::DropTable { .. } | Plan::AddColumn { .. }) => {
                Prepared::Ddl(p)
            }
            Plan::Other(s) => {
                let verb = s
                    .to_string()
                    .split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ")
                    .to_uppercase();
                return Err(PgError::new("0A000", format!("{verb} is not supported")));
            }
        },
    })
}

/// Most prepared statements one session holds, SQL-level (PREPARE) and
/// protocol-level (named Parse) each: a prepared plan is several KiB, and
/// every session may hold this many (JDBC caches 256 by default, psycopg
/// 100).
pub const MAX_NAMED_STATEMENTS: usize = 1_000;
/// Most text of prepared statements one session holds, SQL-level and
/// protocol-level each (their plans take a few times more).
pub const MAX_PREPARED_BYTES: usize = 16 << 20;

/// Most open cursors one session holds.
pub const MAX_CURSORS: usize = 100;

/// One client connection's handlers and session.
#[derive(Debug)]
pub struct ConnHandler {
    planner: Planner,
    session: Mutex<Session>,
    parser: Arc<StatementParser>,
    cancel: Arc<CancelSignal>,
    registry: Arc<CancelRegistry>,
    /// Process id given at startup (for cancel requests).
    pid: Arc<Mutex<Option<i32>>>,
    cursors: Cursors,
    /// Statements of SQL-level PREPARE, by name, with their text lengths.
    named: Mutex<std::collections::HashMap<String, (Prepared, usize)>>,
    /// Names and text lengths of the protocol-level prepared statements
    /// (pgwire keeps them; this counts them against
    /// [`MAX_NAMED_STATEMENTS`] and [`MAX_PREPARED_BYTES`]).
    parsed: Mutex<std::collections::HashMap<String, usize>>,
    /// The open `BEGIN` block's staged writes.
    txn: Mutex<Option<Transaction>>,
    /// Set by a ROLLBACK TO SAVEPOINT that succeeded: the transaction is
    /// no longer failed (pgwire's status would keep it failed).
    restored: std::sync::atomic::AtomicBool,
    /// A `COPY ... FROM STDIN` in progress.
    copy_in: tokio::sync::Mutex<Option<CopyIn>>,
    /// The session's analytics engine, made on first use.
    engine: EngineCell,
    auth: AuthMode,
    /// Refuse sessions that did not negotiate TLS.
    tls_required: bool,
    /// Where the session's slot comes from (none outside a server).
    admission: Option<Arc<crate::admission::Admission>>,
    /// The session's slot, taken at the end of authentication.
    slot: Arc<Mutex<Option<crate::admission::SessionSlot>>>,
}

impl Drop for ConnHandler {
    fn drop(&mut self) {
        if let Some(pid) = *self.pid.lock() {
            self.registry.unregister(pid, &self.cancel);
        }
    }
}

/// The handler set pgwire drives for one socket.
#[derive(Debug, Clone)]
pub struct Connection {
    handler: Arc<ConnHandler>,
}

impl Connection {
    /// The session's cancel signal (fired by cancel requests, and by the
    /// server when the client hangs up mid-statement).
    pub fn cancel_signal(&self) -> Arc<CancelSignal> {
        self.handler.cancel.clone()
    }

    /// A fresh session over `planner`, cancellable through `registry`.
    pub fn new(planner: Planner, registry: Arc<CancelRegistry>, auth: AuthMode) -> Self {
        let cursors = Cursors::default();
        let engine = EngineCell::default();
        Connection {
            handler: Arc::new(ConnHandler {
                parser: Arc::new(StatementParser {
                    planner: planner.clone(),
                    cursors: cursors.clone(),
                    engine: engine.clone(),
                }),
                engine,
                cursors,
                named: Mutex::default(),
                parsed: Mutex::default(),
                txn: Mutex::new(None),
                restored: Default::default(),
                copy_in: tokio::sync::Mutex::new(None),
                planner,
                session: Mutex::new(Session::default()),
                cancel: Arc::new(CancelSignal::default()),
                registry,
                pid: Arc::new(Mutex::new(None)),
                auth,
                tls_required: false,
                admission: None,
                slot: Arc::default(),
            }),
        }
    }
}

impl Connection {
    /// Where the session's analytics run (the server's pool); without it,
    /// on a pool of the caller's runtime.
    #[must_use]
    pub fn analytics_pool(self, pool: crate::analytics::Pool) -> Self {
        *self.handler.engine.pool.lock() = Some(pool);
        self
    }

    /// Whether clients are trusted (no password): authentication is over
    /// with the startup packet.
    pub fn trusts(&self) -> bool {
        matches!(self.handler.auth, AuthMode::Trust)
    }

    /// Admission: the session takes a slot at the end of authentication,
    /// or is refused with FATAL 53300.
    #[must_use]
    pub fn admission(mut self, admission: Arc<crate::admission::Admission>) -> Self {
        if let Some(h) = Arc::get_mut(&mut self.handler) {
            h.admission = Some(admission);
        }
        self
    }

    /// Starts the session with the server's configured settings (already
    /// validated by `Server::bind`; invalid ones are ignored here).
    #[must_use]
    pub fn session_defaults(self, defaults: &[(String, String)]) -> Self {
        if !defaults.is_empty()
            && let Ok(s) = Session::with_defaults(defaults)
        {
            *self.handler.session.lock() = s;
        }
        self
    }

    /// Requires TLS: a client that did not negotiate it is refused (28000).
    #[must_use]
    pub fn require_tls(mut self, required: bool) -> Self {
        if let Some(h) = Arc::get_mut(&mut self.handler) {
            h.tls_required = required;
        }
        self
    }
}

impl PgWireServerHandlers for Connection {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.handler.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.handler.clone()
    }

    fn startup_handler(&self) -> Arc<impl pgwire::api::auth::StartupHandler> {
        let h = &self.handler;
        let mode = match &h.auth {
            AuthMode::Trust => StartupMode::Trust(h.clone()),
            AuthMode::Scram(users) => StartupMode::Scram(ScramStartup::new(
                users.clone(),
                h.registry.clone(),
                h.cancel.clone(),
                h.pid.clone(),
            )),
        };
        Arc::new(Startup {
            mode,
            engine: h.engine.clone(),
            tls_required: h.tls_required,
            admission: h.admission.clone(),
            slot: h.slot.clone(),
        })
    }

    fn copy_handler(&self) -> Arc<impl pgwire::api::copy::CopyHandler> {
        self.handler.clone()
    }

    fn cancel_handler(&self) -> Arc<impl pgwire::api::cancel::CancelHandler> {
        Arc::new(RegistryCancelHandler(self.handler.registry.clone()))
    }
}

/// The startup handler of a connection: trust or SCRAM, behind the TLS
/// requirement.
#[derive(Debug)]
pub struct Startup {
    mode: StartupMode,
    engine: EngineCell,
    tls_required: bool,
    admission: Option<Arc<crate::admission::Admission>>,
    slot: Arc<Mutex<Option<crate::admission::SessionSlot>>>,
}

/// How a connection authenticates.
#[derive(Debug)]
pub enum StartupMode {
    /// No password (loopback only).
    Trust(Arc<ConnHandler>),
    /// SCRAM-SHA-256.
    Scram(ScramStartup),
}

#[async_trait]
impl pgwire::api::auth::StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if self.tls_required && !client.is_secure() {
            let mut info = error_info(
                PgError::new("28000", "this server requires TLS")
                    .hint("connect with sslmode=require"),
            );
            info.severity = "FATAL".to_owned();
            return Err(PgWireError::UserError(Box::new(info)));
        }
        if let pgwire::messages::PgWireFrontendMessage::Startup(s) = &message
            && let Some(user) = s.parameters.get(pgwire::api::METADATA_USER)
        {
            user.clone_into(&mut self.engine.user.lock());
        }
        let Some(admission) = &self.admission else {
            return match &self.mode {
                StartupMode::Trust(h) => h.on_startup(client, message).await,
                StartupMode::Scram(s) => s.on_startup(client, message).await,
            };
        };
        let mut gate = crate::admission::SlotGate {
            inner: client,
            admission,
            slot: &self.slot,
            refused: false,
        };
        match &self.mode {
            StartupMode::Trust(h) => h.on_startup(&mut gate, message).await?,
            StartupMode::Scram(s) => s.on_startup(&mut gate, message).await?,
        }
        if gate.refused {
            let mut info = error_info(
                PgError::new("53300", "sorry, too many clients already")
                    .hint("the remaining connection slots are reserved for the server's operators (reserved_connections)"),
            );
            info.severity = "FATAL".to_owned();
            return Err(PgWireError::UserError(Box::new(info)));
        }
        Ok(())
    }
}

// Trust authentication; the server only accepts it on loopback. The
// session becomes reachable by cancel requests before ReadyForQuery.
#[async_trait]
impl pgwire::api::auth::StartupHandler for ConnHandler {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let pgwire::messages::PgWireFrontendMessage::Startup(startup) = &message {
            pgwire::api::auth::protocol_negotiation(client, startup).await?;
            pgwire::api::auth::save_startup_parameters_to_metadata(client, startup);
            let (pid, secret) = crate::cancel::pid_generator().generate(client);
            client.set_pid_and_secret_key(pid, secret.clone());
            self.registry.register(pid, secret, self.cancel.clone());
            *self.pid.lock() = Some(pid);
            pgwire::api::auth::finish_authentication(client, &crate::auth::server_parameters())
                .await?;
        }
        Ok(())
    }
}

fn one_text_row(name: &str, values: &[String]) -> Response {
    let f = Arc::new(text_field(name));
    let mut enc = DataRowEncoder::new(f.clone());
    let rows: Vec<_> = values
        .iter()
        .map(|v| enc.encode_field(&v.as_str()).map(|_| enc.take_row()))
        .collect();
    Response::Query(QueryResponse::new(f, futures::stream::iter(rows)))
}

async fn notice<C>(client: &mut C, message: String) -> PgWireResult<()>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    let mut info = error_info(PgError::new("00000", message));
    info.severity = "NOTICE".to_owned();
    client
        .feed(PgWireBackendMessage::NoticeResponse(NoticeResponse::from(
            info,
        )))
        .await?;
    Ok(())
}

impl ConnHandler {
    /// Runs one planned statement, timed and counted by a
    /// [`StatementGuard`] inside a `statement` tracing span. A streaming
    /// result carries the guard, so the statement is recorded when its
    /// last row has gone (or the portal is dropped).
    async fn run<C>(
        &self,
        client: &mut C,
        p: &Prepared,
        params: &[Option<Value>],
        format: Option<&Format>,
    ) -> Result<Response, PgError>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let class = match p {
            Prepared::Write(_) | Prepared::Commit | Prepared::CopyIn { .. } => {
                StatementClass::Write
            }
            Prepared::Engine { explain: None, .. } => StatementClass::Analytics,
            _ => StatementClass::Other,
        };
        let mut guard = Some(StatementGuard::start(class));
        let span = guard
            .as_ref()
            .map_or_else(tracing::Span::none, |g| g.span().clone());
        let result = self
            .run_statement(client, p, params, format, &mut guard)
            .instrument(span)
            .await;
        if let Some(g) = guard.as_mut() {
            match &result {
                Err(_) | Ok(Response::Error(_)) => g.fail(),
                Ok(Response::Execution(tag)) if class == StatementClass::Write => {
                    g.set_rows(tag_rows(tag));
                }
                _ => {}
            }
        }
        result
    }

    /// A SQL-level prepared statement and its EXECUTE parameters, typed by
    /// the statement.
    fn named_call(
        &self,
        name: &str,
        args: &[ast::Expr],
    ) -> Result<(Prepared, Vec<Option<Value>>), PgError> {
        let stmt = self
            .named
            .lock()
            .get(name)
            .map(|(p, _)| p.clone())
            .ok_or_else(|| {
                PgError::new(
                    "26000",
                    format!("prepared statement \"{name}\" does not exist"),
                )
            })?;
        let types = stmt.param_types();
        if args.len() != types.len() {
            return Err(PgError::new(
                "42601",
                format!("wrong number of parameters for prepared statement \"{name}\""),
            )
            .detail(format!(
                "Expected {} parameters but got {}.",
                types.len(),
                args.len()
            )));
        }
        let params = args
            .iter()
            .zip(types)
            .map(|(a, t)| constant_param(a, *t))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((stmt, params))
    }

    async fn run_statement<C>(
        &self,
        client: &mut C,
        p: &Prepared,
        params: &[Option<Value>],
        format: Option<&Format>,
        guard: &mut Option<StatementGuard>,
    ) -> Result<Response, PgError>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let plan_err = |e: tablegate_planner::PlanError| PgError::from(&e);
        let in_transaction = client.transaction_status() != TransactionStatus::Idle;
        let (mut opts, deadline) = {
            let s = self.session.lock();
            (
                s.exec_options(),
                s.statement_timeout().map(|t| Instant::now() + t),
            )
        };
        let stop = Stop {
            deadline,
            cancel: self.cancel.clone(),
            since: self.cancel.generation(),
        };
        // Reads inside a transaction see its staged writes.
        if matches!(
            p,
            Prepared::Select(_)
                | Prepared::Explain { .. }
                | Prepared::Declare { .. }
                | Prepared::Engine { .. }
        ) {
            let txn = self.txn.lock().take();
            if let Some(mut t) = txn {
                let overlay = if t.is_empty() {
                    Ok(None)
                } else {
                    t.overlay(self.planner.store(), &opts.retry).await
                };
                *self.txn.lock() = Some(t);
                opts.overlay = overlay.map_err(plan_err)?;
            }
        }
        Ok(match p {
            Prepared::Select(select) => {
                let rows = self
                    .planner
                    .execute(&select.plan, params, &opts)
                    .map_err(plan_err)?;
                let f = select.fields(format);
                Response::Query(QueryResponse::new(
                    f.clone(),
                    encode::row_stream(rows, f, stop, guard.take()),
                ))
            }
            Prepared::Explain {
                analyze,
                json,
                select,
                write,
            } => {
                let run = self
                    .planner
                    .explain(select, params, *analyze, *json, *write, &opts);
                let lines = tokio::select! {
                    r = run => r.map_err(plan_err)?,
                    e = stop.wait() => return Err(e),
                };
                one_text_row("QUERY PLAN", &lines)
            }
            Prepared::Ddl(plan) => {
                let outcome = self.planner.run_ddl(plan).await.map_err(plan_err)?;
                if let Some(n) = outcome.notice {
                    notice(client, n)
                        .await
                        .map_err(|e| PgError::new("08006", e.to_string()))?;
                }
                Response::Execution(Tag::new(outcome.tag))
            }
            Prepared::Set(name, value) => {
                // Debug builds only (tests): a statement that panics its
                // connection's thread while holding the session's state.
                // Not under the fuzzer, for which any panic is a finding.
                #[cfg(all(debug_assertions, not(fuzzing)))]
                if name.eq_ignore_ascii_case("tablegate.inject_panic") {
                    let _held = (self.session.lock(), self.txn.lock());
                    panic!("injected panic: {value}");
                }
                self.session.lock().set(name, value)?;
                Response::Execution(Tag::new("SET"))
            }
            Prepared::Reset(name) => {
                self.session.lock().reset(name)?;
                Response::Execution(Tag::new("RESET"))
            }
            Prepared::Show(name) if name.eq_ignore_ascii_case("all") => {
                let s = self.session.lock();
                let f = Arc::new(vec![
                    FieldInfo::new(
                        "name".into(),
                        None,
                        None,
                        Type::TEXT,
                        pgwire::api::results::FieldFormat::Text,
                    ),
                    FieldInfo::new(
                        "setting".into(),
                        None,
                        None,
                        Type::TEXT,
                        pgwire::api::results::FieldFormat::Text,
                    ),
                ]);
                let mut enc = DataRowEncoder::new(f.clone());
                let rows: Vec<_> = s
                    .all()
                    .map(|(k, v)| {
                        enc.encode_field(&k.as_str())?;
                        enc.encode_field(&v.as_str())?;
                        Ok(enc.take_row())
                    })
                    .collect();
                Response::Query(QueryResponse::new(f, futures::stream::iter(rows)))
            }
            Prepared::Show(name) => {
                // `SHOW TIME ZONE` and the like are words, not a dotted name.
                let v = {
                    let s = self.session.lock();
                    s.get(name)
                        .or_else(|e| s.get(&name.replace('.', " ")).map_err(|_| e))?
                };
                one_text_row(name, &[v])
            }
            Prepared::Write(w) => {
                let _writing = self.cancel.writing();
                let mut txn = self.txn.lock().take();
                // A cancelled write stops between entity-group
                // transactions: those applied stay applied.
                let result = tokio::select! {
                    r = self.planner.write(w, params, txn.as_mut(), &opts) => r.map_err(plan_err),
                    e = stop.wait() => Err(e),
                };
                *self.txn.lock() = txn;
                let out = result?;
                if let Some(n) = out.notice {
                    notice(client, n)
                        .await
                        .map_err(|e| PgError::new("08006", e.to_string()))?;
                }
                let tag = |verb: &str| {
                    if verb == "INSERT" {
                        "INSERT 0".to_owned()
                    } else {
                        verb.to_owned()
                    }
                };
                if w.returning.is_empty() {
                    Response::Execution(Tag::new(&tag(w.verb())).with_rows(out.rows as usize))
                } else {
                    let f = Arc::new(fields(&w.returning, format));
                    let cols: Vec<_> = w.returning.iter().map(|c| c.column.clone()).collect();
                    let schema = tablegate_catalog::TableDef::arrow_schema(&cols);
                    let batch = tablegate_planner::exec::to_batch(
                        &w.table,
                        &w.returning,
                        &out.returning,
                        &schema,
                    )
                    .map_err(plan_err)?;
                    let mut rows = Vec::new();
                    encode::encode_batch(&batch, &f, &mut rows)
                        .map_err(|e| PgError::new("XX000", e.to_string()))?;
                    let mut q =
                        QueryResponse::new(f, futures::stream::iter(rows.into_iter().map(Ok)));
                    q.set_command_tag(&tag(w.verb()));
                    Response::Query(q)
                }
            }
            Prepared::Begin => {
                // The session's own record, not pgwire's status: in a
                // multi-statement simple query that status is the one from
                // before the query.
                if self.txn.lock().is_some() {
                    notice(client, "there is already a transaction in progress".into())
                        .await
                        .map_err(|e| PgError::new("08006", e.to_string()))?;
                } else {
                    *self.txn.lock() = Some(Transaction::new());
                }
                Response::TransactionStart(Tag::new("BEGIN"))
            }
            Prepared::Commit | Prepared::Rollback => {
                // Cursors without HOLD end with their transaction.
                self.cursors.lock().retain(|_, c| c.hold);
                let txn = self.txn.lock().take();
                // A ROLLBACK TO earlier in this same Query message ended the
                // failed state pgwire still reports.
                let failed = client.transaction_status() == TransactionStatus::Error
                    && !self.restored.load(std::sync::atomic::Ordering::Relaxed);
                if matches!(p, Prepared::Commit) && !failed {
                    if let Some(t) = txn {
                        let _writing = self.cancel.writing();
                        // The transaction is over whatever COMMIT answers:
                        // a failed one (40001, 53000) applied nothing, and
                        // the session goes back to idle, as in PostgreSQL.
                        self.planner.commit(t, &opts).await.map_err(plan_err)?;
                    }
                    Response::TransactionEnd(Tag::new("COMMIT"))
                } else {
                    if txn.is_none() && !in_transaction {
                        notice(client, "there is no transaction in progress".into())
                            .await
                            .map_err(|e| PgError::new("08006", e.to_string()))?;
                    }
                    Response::TransactionEnd(Tag::new("ROLLBACK"))
                }
            }
            Prepared::Savepoint(name) | Prepared::Release(name) | Prepared::RollbackTo(name) => {
                let (verb, tag) = match p {
                    Prepared::Savepoint(_) => ("SAVEPOINT", "SAVEPOINT"),
                    Prepared::Release(_) => ("RELEASE SAVEPOINT", "RELEASE"),
                    _ => ("ROLLBACK TO SAVEPOINT", "ROLLBACK"),
                };
                let mut txn = self.txn.lock();
                let Some(t) = txn.as_mut() else {
                    return Err(PgError::new(
                        "25P01",
                        format!("{verb} can only be used in transaction blocks"),
                    ));
                };
                match p {
                    Prepared::Savepoint(_) => t.savepoint(name),
                    Prepared::Release(_) => t.release(name),
                    _ => t.rollback_to(name).map(|kept| {
                        // Cursors declared after the savepoint go with it.
                        self.cursors.lock().retain(|_, c| c.hold || c.depth < kept);
                        self.restored
                            .store(true, std::sync::atomic::Ordering::Relaxed);
                    }),
                }
                .map_err(plan_err)?;
                Response::Execution(Tag::new(tag))
            }
            Prepared::Declare { name, query, hold } => {
                // The session's record too: after BEGIN in the same
                // multi-statement query, pgwire's status is still idle.
                if !in_transaction && !hold && self.txn.lock().is_none() {
                    return Err(PgError::new(
                        "25P01",
                        "DECLARE CURSOR can only be used in transaction blocks",
                    )
                    .hint("BEGIN first, or DECLARE ... CURSOR WITH HOLD"));
                }
                let open = {
                    let cursors = self.cursors.lock();
                    if cursors.contains_key(name) {
                        return Err(PgError::new(
                            "42P03",
                            format!("cursor \"{name}\" already exists"),
                        ));
                    }
                    cursors.len()
                };
                // Each open cursor holds a running scan or plan and its
                // buffered batches.
                if open >= MAX_CURSORS {
                    return Err(PgError::new(
                        "54000",
                        format!("too many open cursors: a session holds at most {MAX_CURSORS}"),
                    )
                    .hint("CLOSE cursors no longer needed"));
                }
                // A cursor outlives its statement: each FETCH runs under
                // its own statement_timeout and cancel scope.
                let batches: BatchStream = match query {
                    CursorQuery::Native(select) => {
                        let rows = self
                            .planner
                            .execute(select, params, &opts)
                            .map_err(plan_err)?;
                        Box::pin(futures::stream::unfold(rows, |mut rows| async move {
                            let batch = rows.next().await?;
                            Some((batch.map_err(|e| PgError::from(&e)), rows))
                        }))
                    }
                    CursorQuery::Engine(plan) => {
                        let engine = self.engine_for_run().await?;
                        let run = engine.execute(plan, params, opts.clone());
                        let batches = tokio::select! {
                            r = run => r.map_err(|e| PgError::from(&e))?,
                            e = stop.wait() => return Err(e),
                        };
                        Box::pin(batches.map(|b| b.map_err(|e| PgError::from(&e))))
                    }
                    CursorQuery::EngineSql { .. } => {
                        return Err(PgError::new("XX000", "a cursor's query ran unplanned"));
                    }
                };
                let depth = self.txn.lock().as_ref().map_or(0, Transaction::depth);
                self.cursors.lock().insert(
                    name.clone(),
                    Cursor {
                        query: query.clone(),
                        rows: Arc::new(tokio::sync::Mutex::new(CursorRows {
                            batches,
                            partial: None,
                            done: false,
                        })),
                        hold: *hold,
                        depth,
                    },
                );
                Response::Execution(Tag::new("DECLARE CURSOR"))
            }
            Prepared::Fetch { name, count } => {
                let (f, rows) = {
                    let cursors = self.cursors.lock();
                    let c = cursors.get(name).ok_or_else(|| {
                        PgError::new("34000", format!("cursor \"{name}\" does not exist"))
                    })?;
                    (Arc::new(c.fields(format)), c.rows.clone())
                };
                // The scan's own error (53000, 57014, ...) is the FETCH's.
                let batches = rows.lock().await.take(*count, &stop).await?;
                let mut out = Vec::new();
                for b in &batches {
                    match encode::encode_batch(b, &f, &mut out) {
                        Ok(()) => {}
                        Err(PgWireError::UserError(info)) => return Ok(Response::Error(info)),
                        Err(e) => return Err(PgError::new("XX000", e.to_string())),
                    }
                }
                let mut q = QueryResponse::new(f, futures::stream::iter(out.into_iter().map(Ok)));
                q.set_command_tag("FETCH");
                Response::Query(q)
            }
            Prepared::Close(name) => {
                let mut cursors = self.cursors.lock();
                match name {
                    None => cursors.clear(),
                    Some(n) => {
                        if cursors.remove(n).is_none() {
                            return Err(PgError::new(
                                "34000",
                                format!("cursor \"{n}\" does not exist"),
                            ));
                        }
                    }
                }
                Response::Execution(Tag::new(if name.is_some() {
                    "CLOSE CURSOR"
                } else {
                    "CLOSE CURSOR ALL"
                }))
            }
            Prepared::Version => one_text_row("version", &[version_string()]),
            Prepared::Deallocate(name) => {
                let mut named = self.named.lock();
                match name {
                    None => named.clear(),
                    Some(n) => {
                        named.remove(n);
                    }
                }
                Response::Execution(Tag::new(if name.is_none() {
                    "DEALLOCATE ALL"
                } else {
                    "DEALLOCATE"
                }))
            }
            Prepared::PrepareSql { name, stmt, bytes } => {
                let mut named = self.named.lock();
                if named.contains_key(name) {
                    return Err(PgError::new(
                        "42P05",
                        format!("prepared statement \"{name}\" already exists"),
                    ));
                }
                let held: usize = named.values().map(|(_, b)| b).sum();
                if named.len() >= MAX_NAMED_STATEMENTS || held + bytes > MAX_PREPARED_BYTES {
                    return Err(PgError::new(
                        "54000",
                        format!(
                            "too many prepared statements: a session holds at most {MAX_NAMED_STATEMENTS}, of {} MiB of text in all",
                            MAX_PREPARED_BYTES >> 20
                        ),
                    )
                    .hint("DEALLOCATE statements no longer needed"));
                }
                named.insert(name.clone(), ((**stmt).clone(), *bytes));
                Response::Execution(Tag::new("PREPARE"))
            }
            Prepared::ExecuteSql { name, args } => {
                let (stmt, params) = self.named_call(name, args)?;
                return Box::pin(self.run_statement(client, &stmt, &params, format, guard)).await;
            }
            Prepared::ExplainExecute {
                name,
                args,
                analyze,
                json,
            } => {
                let (stmt, params) = self.named_call(name, args)?;
                let explain = match stmt {
                    Prepared::Select(select) => Prepared::Explain {
                        analyze: *analyze,
                        json: *json,
                        select: select.plan,
                        write: None,
                    },
                    Prepared::Engine {
                        plan,
                        explain: None,
                    } => Prepared::Engine {
                        plan,
                        explain: Some(*analyze),
                    },
                    _ => {
                        return Err(PgError::new(
                            "0A000",
                            format!("EXPLAIN EXECUTE of \"{name}\" is not supported"),
                        )
                        .hint("EXPLAIN EXECUTE shows prepared queries; EXPLAIN the write itself"));
                    }
                };
                return Box::pin(self.run_statement(client, &explain, &params, format, guard))
                    .await;
            }
            Prepared::CopyIn {
                plan,
                columns,
                format,
            } => {
                *self.copy_in.lock().await = Some(CopyIn {
                    plan: plan.clone(),
                    columns: columns.clone(),
                    parser: crate::copy::Parser::new(format.clone()),
                    rows: Vec::new(),
                    error: None,
                    rows_done: 0,
                    groups_done: 0,
                    opts,
                    since: self.cancel.generation(),
                    deadline,
                });
                Response::CopyIn(pgwire::api::results::CopyResponse::new(
                    0,
                    columns.len(),
                    futures::stream::empty(),
                ))
            }
            Prepared::EngineSql { .. } => {
                return Err(PgError::new(
                    "XX000",
                    "an analytics statement ran unplanned",
                ));
            }
            Prepared::Engine { plan, explain } => {
                let engine = self.engine_for_run().await?;
                let df = |e: crate::analytics::EngineError| PgError::from(&e);
                match explain {
                    Some(analyze) => {
                        let run = engine.explain(plan, params, *analyze, opts.clone());
                        let lines = tokio::select! {
                            r = run => r.map_err(df)?,
                            e = stop.wait() => return Err(e),
                        };
                        one_text_row("QUERY PLAN", &lines)
                    }
                    None => {
                        let run = engine.execute(plan, params, opts.clone());
                        let stream = tokio::select! {
                            r = run => r.map_err(df)?,
                            e = stop.wait() => return Err(e),
                        };
                        let f = Arc::new(encode::arrow_fields(&plan.schema, format));
                        let batches = stream.map(|b| b.map_err(|e| PgError::from(&e)));
                        let batches: std::pin::Pin<Box<dyn futures::Stream<Item = _> + Send>> =
                            match guard.take() {
                                Some(g) => Box::pin(encode::counted(batches, g)),
                                None => Box::pin(batches),
                            };
                        Response::Query(QueryResponse::new(
                            f.clone(),
                            encode::batch_stream(batches, f, stop),
                        ))
                    }
                }
            }
            Prepared::CopyOut { select, format } => {
                self.copy_out(client, select, format, params, &opts, &stop)
                    .await?
            }
        })
    }

    /// COPY ... TO STDOUT: CopyOutResponse, one CopyData per row, CopyDone;
    /// the caller sends `COPY n`. Values are the text a SELECT would send.
    async fn copy_out<C>(
        &self,
        client: &mut C,
        select: &Arc<SelectPlan>,
        format: &CopyFormat,
        params: &[Option<Value>],
        opts: &tablegate_planner::ExecOptions,
        stop: &Stop,
    ) -> Result<Response, PgError>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        use pgwire::messages::copy::{CopyData, CopyDone, CopyOutResponse};
        let wire = |e: PgWireError| PgError::new("08006", e.to_string());
        let mut rows = self
            .planner
            .execute(select, params, opts)
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
                e = stop.wait() => return Err(e),
            };
            let Some(batch) = next else { break };
            let batch = batch.map_err(|e| PgError::from(&e))?;
            let mut encoded = Vec::new();
            encode::encode_batch(&batch, &f, &mut encoded)
                .map_err(|e| PgError::new("XX000", e.to_string()))?;
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
        let in_txn = self.txn.lock().is_some();
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
    async fn copy_flush(&self, st: &mut CopyIn) {
        let rows = std::mem::take(&mut st.rows);
        let mut txn = self.txn.lock().take();
        let r = tablegate_planner::apply::insert_rows(
            self.planner.store(),
            &st.plan,
            rows,
            txn.as_mut(),
            &st.opts,
        )
        .await
        .map_err(|e| e.with_key_columns(&st.plan.table));
        *self.txn.lock() = txn;
        match r {
            Ok(out) => {
                st.rows_done += out.rows;
                st.groups_done += out.groups;
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
                    st.plan.table.name, st.parser.line, st.rows_done, st.groups_done
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

/// One COPY record as a row of every user column (DEFAULTs for the ones
/// not named).
fn copy_row(
    plan: &WritePlan,
    columns: &[ColumnRef],
    (line, fields): (u64, Vec<crate::copy::Field>),
) -> Result<tablegate_planner::write::Row, PgError> {
    let table = &plan.table;
    // Every user column, resolved when COPY was planned, with the index of
    // the input field that fills it (`None`: its DEFAULT).
    let Some(targets) = plan.insert_targets() else {
        return Err(PgError::new(
            "XX000",
            "COPY FROM was planned as another write",
        ));
    };
    if fields.len() < columns.len() {
        return Err(PgError::new(
            "22P04",
            format!(
                "missing data for column \"{}\" on line {line}",
                columns[fields.len()].name
            ),
        ));
    }
    if fields.len() > columns.len() {
        return Err(PgError::new(
            "22P04",
            format!("extra data after last expected column on line {line}"),
        ));
    }
    let mut row = Vec::with_capacity(targets.len());
    for (col, field) in targets {
        let v = match *field {
            Some(i) => match &fields[i] {
                None => None,
                Some(text) => Some(col.ty.parse_text(text).map_err(|e| {
                    let mut pg = PgError::from(&e);
                    pg.message = format!("{} (line {line}, column {})", pg.message, col.name);
                    pg
                })?),
            },
            None => tablegate_planner::write::default_value(col, table)
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
        let mut guard = self.copy_in.lock().await;
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
        let Some(mut st) = self.copy_in.lock().await.take() else {
            return Err(wire_error(PgError::new(
                "08P01",
                "CopyDone without COPY in progress",
            )));
        };
        self.copy_progress(&mut st, true).await;
        if let Some(e) = st.error {
            return Err(wire_error(e));
        }
        if st.groups_done > 1 {
            notice(
                client,
                format!(
                    "COPY was applied as {} entity-group transactions (one per PartitionKey, at most 100 operations each); they are not atomic together",
                    st.groups_done
                ),
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
        let st = self.copy_in.lock().await.take();
        let applied = st.map_or(0, |s| s.rows_done);
        wire_error(
            PgError::new("57014", format!("COPY from stdin failed: {}", fail.message)).detail(
                format!("{applied} row(s) were applied before the client stopped the COPY."),
            ),
        )
    }
}

/// The transaction status to report after a message: pgwire derives it
/// from the responses (an error inside a transaction aborts it), but the
/// session's own record has the last word. A COMMIT that fails has already
/// ended its transaction, as in PostgreSQL, where pgwire would leave the
/// session aborted (25P02 until ROLLBACK).
fn settle_status(txn_open: bool, derived: TransactionStatus) -> TransactionStatus {
    if txn_open {
        derived
    } else {
        TransactionStatus::Idle
    }
}

#[async_trait]
impl SimpleQueryHandler for ConnHandler {
    /// The Query message, written out here rather than pgwire's default
    /// only so that the ReadyForQuery it ends with carries the session's
    /// transaction status ([`settle_status`]). Cancel requests reach the
    /// statements through the session's own [`Stop`].
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        let mut status = client.transaction_status();
        client.set_state(PgWireConnectionState::QueryInProgress);
        if query.query.chars().all(|c| c == ';' || c.is_whitespace()) {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
        } else {
            let responses = SimpleQueryHandler::do_query(self, client, &query.query).await?;
            // A ROLLBACK TO among them ended a failed state; any later
            // response comes after it and moves the status on from there.
            if self
                .restored
                .swap(false, std::sync::atomic::Ordering::Relaxed)
            {
                status = TransactionStatus::Transaction;
            }
            for r in responses {
                match r {
                    Response::EmptyQuery => {
                        client
                            .feed(PgWireBackendMessage::EmptyQueryResponse(
                                EmptyQueryResponse::new(),
                            ))
                            .await?;
                    }
                    Response::Query(q) => send_query_response(client, q, true).await?,
                    Response::Execution(tag) => send_execution_response(client, tag).await?,
                    Response::TransactionStart(tag) => {
                        send_execution_response(client, tag).await?;
                        status = status.to_in_transaction_state();
                    }
                    Response::TransactionEnd(tag) => {
                        send_execution_response(client, tag).await?;
                        status = status.to_idle_state();
                    }
                    Response::Error(e) => {
                        client
                            .feed(PgWireBackendMessage::ErrorResponse((*e).into()))
                            .await?;
                        status = status.to_error_state();
                    }
                    Response::CopyIn(r) => {
                        pgwire::api::copy::send_copy_in_response(client, r).await?;
                        client.set_state(PgWireConnectionState::CopyInProgress(false));
                    }
                    Response::CopyOut(r) => {
                        pgwire::api::copy::send_copy_out_response(client, r).await?;
                    }
                    Response::CopyBoth(r) => {
                        pgwire::api::copy::send_copy_both_response(client, r).await?;
                        client.set_state(PgWireConnectionState::CopyInProgress(false));
                    }
                }
            }
        }
        // During COPY FROM, the copy handler sends ReadyForQuery at the end.
        if !matches!(client.state(), PgWireConnectionState::CopyInProgress(_)) {
            let status = settle_status(self.txn.lock().is_some(), status);
            client.set_state(PgWireConnectionState::ReadyForQuery);
            client.set_transaction_status(status);
            send_ready_for_query(client, status).await?;
        }
        Ok(())
    }

    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let error = |e: PgError| Response::Error(Box::new(error_info(e)));
        let stmts = match Planner::parse(query) {
            Ok(s) => s,
            Err(e) => return Ok(vec![error(PgError::from(&e))]),
        };
        let mut failed = client.transaction_status() == TransactionStatus::Error;
        let mut out = Vec::with_capacity(stmts.len());
        for stmt in &stmts {
            let is_end = matches!(stmt, Statement::Commit { .. } | Statement::Rollback { .. });
            if failed && !is_end {
                out.push(error(PgError::aborted()));
                break;
            }
            // (COMMIT of a failed transaction rolls it back: `run` knows.)
            let prepared = match prepare(&self.planner, stmt, query) {
                Ok(p) => resolve(&self.planner, &self.engine, p).await,
                Err(e) => Err(e),
            };
            let result = match prepared {
                Ok(p) => self.run(client, &p, &[], None).await,
                Err(e) => Err(e),
            };
            match result {
                Ok(r) => out.push(r),
                Err(e) => {
                    out.push(error(e));
                    break;
                }
            }
            failed = false;
        }
        Ok(out)
    }
}

/// Parses and plans statements for the extended protocol.
#[derive(Debug)]
pub struct StatementParser {
    planner: Planner,
    cursors: Cursors,
    engine: EngineCell,
}

/// A session's analytics engine, created on first use (most sessions of
/// key-value clients never need it), and the pool it runs on.
#[derive(Debug, Default)]
struct EngineSlot {
    engine: tokio::sync::OnceCell<Arc<Engine>>,
    pool: Mutex<Option<crate::analytics::Pool>>,
    /// The authenticated user (`current_user`), set at startup.
    user: Mutex<String>,
}

type EngineCell = Arc<EngineSlot>;

async fn engine_of(planner: &Planner, cell: &EngineCell) -> Result<Arc<Engine>, PgError> {
    cell.engine
        .get_or_try_init(|| async {
            let pool =
                cell.pool.lock().clone().unwrap_or_else(|| {
                    crate::analytics::Pool::current(crate::analytics::MEMORY_LIMIT)
                });
            let user = cell.user.lock().clone();
            Engine::new(planner.clone(), pool, &user)
                .map(Arc::new)
                .map_err(|e| PgError::from(&e))
        })
        .await
        .cloned()
}

impl ConnHandler {
    /// The session's engine, reading the session's settings as they are
    /// now (`current_setting`).
    async fn engine_for_run(&self) -> Result<Arc<Engine>, PgError> {
        let engine = engine_of(&self.planner, &self.engine).await?;
        engine.set_session(&self.session.lock());
        Ok(engine)
    }
}

/// Plans an engine statement with DataFusion; other statements pass.
async fn resolve(planner: &Planner, cell: &EngineCell, p: Prepared) -> Result<Prepared, PgError> {
    match p {
        Prepared::EngineSql {
            sql,
            reason,
            explain,
        } => {
            let engine = engine_of(planner, cell).await?;
            let plan = engine
                .plan(&sql, &reason)
                .await
                .map_err(|e| PgError::from(&e))?;
            Ok(Prepared::Engine {
                plan: Arc::new(plan),
                explain,
            })
        }
        Prepared::PrepareSql { name, stmt, bytes } => Ok(Prepared::PrepareSql {
            name,
            stmt: Box::new(Box::pin(resolve(planner, cell, *stmt)).await?),
            bytes,
        }),
        Prepared::Declare {
            name,
            query: CursorQuery::EngineSql { sql, reason },
            hold,
        } => {
            let engine = engine_of(planner, cell).await?;
            let plan = engine
                .plan(&sql, &reason)
                .await
                .map_err(|e| PgError::from(&e))?;
            Ok(Prepared::Declare {
                name,
                query: CursorQuery::Engine(Arc::new(plan)),
                hold,
            })
        }
        other => Ok(other),
    }
}

#[async_trait]
impl QueryParser for StatementParser {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let stmts = Planner::parse(sql).map_err(|e| wire_error(PgError::from(&e)))?;
        match stmts.as_slice() {
            [] => Ok(None),
            [stmt] => {
                let p = prepare(&self.planner, stmt, sql).map_err(wire_error)?;
                resolve(&self.planner, &self.engine, p)
                    .await
                    .map(Some)
                    .map_err(wire_error)
            }
            _ => Err(wire_error(PgError::new(
                "42601",
                "cannot insert multiple commands into a prepared statement",
            ))),
        }
    }

    fn get_parameter_types(&self, stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        Ok(stmt.param_types().iter().map(|t| pg_type(*t)).collect())
    }

    fn get_result_schema(
        &self,
        stmt: &Prepared,
        format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        Ok(Arc::unwrap_or_clone(self.result_fields(stmt, format)))
    }
}

impl StatementParser {
    /// A statement's result columns in `format`: a prepared SELECT's are
    /// shared, not copied (a portal is described on every execution that
    /// libpq sends).
    fn result_fields(&self, stmt: &Prepared, format: Option<&Format>) -> Arc<Vec<FieldInfo>> {
        let fields = match stmt {
            // Made at prepare time; the others are made when asked.
            Prepared::Select(s) => return s.fields(format),
            Prepared::Write(w) => fields(&w.returning, format),
            Prepared::Engine {
                plan,
                explain: None,
            } => encode::arrow_fields(&plan.schema, format),
            Prepared::Explain { .. } | Prepared::Engine { .. } => text_field("QUERY PLAN"),
            Prepared::Show(n) => text_field(n),
            Prepared::Version => text_field("version"),
            Prepared::Fetch { name, .. } => self
                .cursors
                .lock()
                .get(name)
                .map(|c| c.fields(format))
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        Arc::new(fields)
    }
}

/// Parameter `i` of a portal as `T`: what pgwire's `Portal::parameter`
/// does, except that a text-format value is parsed with one shared
/// `FormatOptions`. pgwire builds a default one (four `String`s) per call:
/// 8 of the 104 allocations a prepared point lookup made in the server.
fn portal_param<'a, T>(portal: &'a Portal<Prepared>, i: usize, ty: &Type) -> PgWireResult<Option<T>>
where
    T: FromSqlOwned + FromSqlText<'a>,
{
    static TEXT_FORMAT: LazyLock<FormatOptions> = LazyLock::new(FormatOptions::default);
    if !T::accepts(ty) {
        return Err(PgWireError::InvalidRustTypeForParameter(
            ty.name().to_owned(),
        ));
    }
    let raw = portal
        .parameters
        .get(i)
        .ok_or(PgWireError::ParameterIndexOutOfBound(i))?;
    let Some(raw) = raw else {
        return Ok(None);
    };
    if portal.parameter_format.is_binary(i) {
        T::from_sql(ty, raw)
    } else {
        T::from_sql_text(ty, raw, &TEXT_FORMAT)
    }
    .map(Some)
    .map_err(PgWireError::FailedToParseParameter)
}

/// An EXECUTE parameter: a constant (number, string, boolean, NULL,
/// possibly negated or cast), read as the statement's parameter type.
fn constant_param(e: &ast::Expr, want: SqlType) -> Result<Option<Value>, PgError> {
    fn text(e: &ast::Expr) -> Result<Option<String>, PgError> {
        Ok(match e {
            ast::Expr::Value(v) => match &v.value {
                ast::Value::Null => None,
                ast::Value::Number(n, _) => Some(n.clone()),
                ast::Value::SingleQuotedString(s) => Some(s.clone()),
                ast::Value::Boolean(b) => Some(b.to_string()),
                other => {
                    return Err(PgError::new(
                        "0A000",
                        format!("EXECUTE parameter {other} is not supported"),
                    ));
                }
            },
            ast::Expr::UnaryOp {
                op: ast::UnaryOperator::Minus,
                expr,
            } => text(expr)?.map(|t| format!("-{t}")),
            ast::Expr::Cast { expr, .. } | ast::Expr::Nested(expr) => text(expr)?,
            other => {
                return Err(PgError::new(
                    "0A000",
                    format!("EXECUTE parameter {other} is not a constant"),
                )
                .hint("pass constants: numbers, 'strings', true/false or NULL"));
            }
        })
    }
    match text(e)? {
        None => Ok(None),
        Some(t) => want.parse_text(&t).map(Some).map_err(|e| PgError::from(&e)),
    }
}

/// Decodes parameter `i` of a portal as the SQL type the planner inferred,
/// honouring the type the client declared (tokio-postgres and JDBC bind
/// typed values; psql and simple drivers send text).
fn decode_param(
    portal: &Portal<Prepared>,
    i: usize,
    want: SqlType,
    open: bool,
) -> Result<Option<Value>, PgError> {
    let declared = portal
        .statement
        .parameter_types
        .get(i)
        .cloned()
        .flatten()
        .filter(|t| *t != Type::UNKNOWN)
        .unwrap_or_else(|| pg_type(want));
    let bad = |e: PgWireError| PgError::new("22P02", format!("parameter ${}: {e}", i + 1));
    let v: Option<Value> = match declared {
        Type::INT2 => portal_param::<i16>(portal, i, &declared)
            .map_err(bad)?
            .map(|v| Value::Int64(v.into())),
        Type::INT4 => portal_param::<i32>(portal, i, &declared)
            .map_err(bad)?
            .map(|v| Value::Int64(v.into())),
        Type::INT8 => portal_param::<i64>(portal, i, &declared)
            .map_err(bad)?
            .map(Value::Int64),
        Type::FLOAT4 => portal_param::<f32>(portal, i, &declared)
            .map_err(bad)?
            .map(|v| Value::Double(v.into())),
        Type::FLOAT8 => portal_param::<f64>(portal, i, &declared)
            .map_err(bad)?
            .map(Value::Double),
        Type::BOOL => portal_param::<bool>(portal, i, &declared)
            .map_err(bad)?
            .map(Value::Boolean),
        Type::TIMESTAMPTZ => {
            portal_param::<chrono::DateTime<chrono::FixedOffset>>(portal, i, &declared)
                .map_err(bad)?
                .map(|t| Value::DateTime(tablegate_store::DateTime(t.timestamp_micros())))
        }
        Type::TIMESTAMP => portal_param::<chrono::NaiveDateTime>(portal, i, &declared)
            .map_err(bad)?
            .map(|t| Value::DateTime(tablegate_store::DateTime(t.and_utc().timestamp_micros()))),
        // Binary-format bytea and uuid are their raw bytes (text format
        // goes through the column type's text parser below).
        Type::BYTEA | Type::UUID if portal.parameter_format.is_binary(i) => {
            match portal.parameters.get(i).cloned().flatten() {
                None => None,
                Some(b) if declared == Type::BYTEA => Some(Value::Binary(b.to_vec())),
                Some(b) => Some(Value::Guid(b.as_ref().try_into().map_err(|_| {
                    PgError::new(
                        "22P02",
                        format!(
                            "parameter ${}: a binary uuid has 16 bytes, not {}",
                            i + 1,
                            b.len()
                        ),
                    )
                })?)),
            }
        }
        // Text, in either format, is its UTF-8 bytes: parsed where it lies.
        _ => match portal.parameters.get(i) {
            None => return Err(bad(PgWireError::ParameterIndexOutOfBound(i))),
            Some(None) => None,
            Some(Some(raw)) => {
                let text = std::str::from_utf8(raw).map_err(|e| {
                    PgError::new("22021", format!("parameter ${}: not UTF-8: {e}", i + 1))
                })?;
                Some(want.parse_text(text).map_err(|e| PgError::from(&e))?)
            }
        },
    };
    // Numbers meet the column's numeric type; everything else must match.
    Ok(match (v, want) {
        (None, _) => None,
        (v, _) if open => v,
        (Some(Value::Int64(n)), SqlType::Int4) => {
            Some(Value::Int32(i32::try_from(n).map_err(|_| {
                PgError::new(
                    "22003",
                    format!("parameter ${}: {n} is out of range for type integer", i + 1),
                )
            })?))
        }
        (Some(Value::Int64(n)), SqlType::Float8) => Some(Value::Double(n as f64)),
        (Some(v), want) if v.edm_type() == want.edm() => Some(v),
        (Some(v), want) => {
            return Err(PgError::new(
                "42804",
                format!(
                    "parameter ${} is {} but {} is expected",
                    i + 1,
                    v.edm_type().name(),
                    want.pg_name()
                ),
            ));
        }
    })
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
    type Statement = Prepared;
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
            let parsed = self.parsed.lock();
            let held: usize = parsed
                .iter()
                .filter(|(n, _)| **n != name)
                .map(|(_, len)| len)
                .sum();
            let too_many = !parsed.contains_key(&name) && parsed.len() >= MAX_NAMED_STATEMENTS;
            if too_many || held + message.query.len() > MAX_PREPARED_BYTES {
                return Err(wire_error(
                    PgError::new(
                        "54000",
                        format!(
                            "too many prepared statements: a session holds at most {MAX_NAMED_STATEMENTS}, of {} MiB of text in all",
                            MAX_PREPARED_BYTES >> 20
                        ),
                    )
                    .hint("close statements no longer needed (Close, or the driver's statement cache size)"),
                ));
            }
        }
        match pgwire::api::stmt::StoredStatement::parse(client, &message, self.query_parser())
            .await?
        {
            Some(stmt) => client.portal_store().put_statement(Arc::new(stmt)),
            None => client.portal_store().put_empty_statement(&name),
        }
        if named {
            self.parsed.lock().insert(name, message.query.len());
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
                self.parsed.lock().remove(name);
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
    /// prepared statement, waking the client for nothing (measured: 30k vs
    /// 45k point lookups/s, prepared vs simple, 4 pgbench clients).
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
                    return Err(wire_error(PgError::new(
                        "08P01",
                        format!(
                            "bind message supplies {} parameters, but prepared statement \"{statement_name}\" requires 0",
                            message.parameters.len()
                        ),
                    )));
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
        let derived = if self
            .restored
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            TransactionStatus::Transaction
        } else {
            client.transaction_status()
        };
        let status = settle_status(self.txn.lock().is_some(), derived);
        client.set_transaction_status(status);
        result
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let error = |e: PgError| Response::Error(Box::new(error_info(e)));
        let p = &portal.statement.statement;
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
            return Ok(error(PgError::new(
                "08P01",
                "bind message has a format code count that matches neither the parameters nor the result columns",
            )));
        }
        if portal.parameter_len() != param_types.len() {
            return Ok(error(PgError::new(
                "08P01",
                format!(
                    "bind message supplies {} parameters, but prepared statement requires {}",
                    portal.parameter_len(),
                    param_types.len()
                ),
            )));
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
            .run(client, p, &params, Some(&portal.result_column_format))
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
                    Prepared::Fetch {
                        name: name.clone(),
                        count: None,
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
