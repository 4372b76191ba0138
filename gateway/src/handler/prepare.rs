//! Statements and their preparation: SQL → [`Prepared`], shared by both
//! protocols.
//!
//! Session commands (SET, SHOW, transactions, cursors, PREPARE, COPY) are
//! recognized here; every other statement is the planner's, whose
//! [`Plan`] says whether the native path or the analytics engine runs it.
//! An analytics statement is planned by DataFusion at prepare time too
//! ([`resolve`]), so a prepared statement describes its parameters and
//! columns before it runs.

use std::sync::Arc;

use pgwire::api::portal::Format;
use pgwire::api::results::FieldInfo;
use sqlparser::ast::{self, Statement};
use tablegate_catalog::{ColumnRef, SqlType};
use tablegate_planner::{ExplainPlan, Plan, Planner, SelectPlan, WritePlan};

use super::Session;
use super::copy::format::CopyFormat;
use super::cursor::{CursorQuery, cursor_name};
use crate::analytics::EnginePlan;
use crate::encode::fields;
use crate::sqlstate::PgError;

/// A statement the extended protocol keeps: what runs, and its normalized
/// text for the statement log (normalized once, at Parse).
#[derive(Debug, Clone)]
pub struct Parsed {
    /// What runs.
    pub prepared: Prepared,
    /// The normalized text ([`crate::statements::normalize`]).
    pub text: Arc<str>,
    /// The text as sent and the catalog version it was planned at, to plan
    /// it again after DDL ([`replan`]); `None` for portals made here.
    pub source: Option<(Arc<str>, u64)>,
}

impl std::ops::Deref for Parsed {
    type Target = Prepared;
    fn deref(&self) -> &Prepared {
        &self.prepared
    }
}

/// A statement ready to run, shared by both protocols.
#[derive(Debug, Clone)]
pub enum Prepared {
    /// A SELECT.
    Select(NativeSelect),
    /// EXPLAIN [ANALYZE] [FORMAT JSON] of a native SELECT or a write's scan.
    Explain(Arc<ExplainPlan>),
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
    /// BEGIN [READ ONLY | READ WRITE]; `None`: the session's default.
    Begin {
        /// The access mode it names, if any.
        read_only: Option<bool>,
    },
    /// SET TRANSACTION [READ ONLY | READ WRITE], and with SESSION
    /// CHARACTERISTICS AS, the session's default.
    SetTransaction {
        /// The access mode it names, if any.
        read_only: Option<bool>,
        /// SESSION CHARACTERISTICS: sets `default_transaction_read_only`.
        session: bool,
    },
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
    /// SELECT pg_sleep(seconds), waited out here so that statement_timeout
    /// and cancel requests end it (a sleep inside the analytics engine
    /// would hold one of its threads, deaf to both).
    Sleep(std::time::Duration),
    /// `SELECT * FROM tablegate.advise('table' [, 'workload'])`.
    Advise(super::advise::Call),
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
        /// The statement, planned once (again after DDL, see [`replan`]).
        stmt: Box<Prepared>,
        /// The statement's text (its length is counted against
        /// [`super::MAX_PREPARED_BYTES`]).
        sql: Arc<str>,
        /// The catalog version it was planned at.
        version: u64,
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
    pub(super) fn new(plan: Arc<SelectPlan>) -> Self {
        let text_fields = Arc::new(fields(&plan.columns, None));
        NativeSelect { plan, text_fields }
    }

    /// The result's fields in `format` (the ones made at prepare time
    /// when every column is text).
    pub(super) fn fields(&self, format: Option<&Format>) -> Arc<Vec<FieldInfo>> {
        match format {
            None | Some(Format::UnifiedText) => self.text_fields.clone(),
            Some(f) => Arc::new(fields(&self.plan.columns, Some(f))),
        }
    }
}

impl Prepared {
    /// The command a read-only transaction refuses (`None`: a read).
    pub(super) fn writes(&self) -> Option<&'static str> {
        match self {
            Prepared::Write(w) => Some(w.verb()),
            Prepared::CopyIn { .. } => Some("COPY FROM"),
            Prepared::Ddl(Plan::CreateTable { .. }) => Some("CREATE TABLE"),
            Prepared::Ddl(Plan::DropTable { .. }) => Some("DROP TABLE"),
            Prepared::Ddl(Plan::CreateIndex { .. }) => Some("CREATE INDEX"),
            Prepared::Ddl(Plan::DropIndex { .. }) => Some("DROP INDEX"),
            Prepared::Ddl(_) => Some("ALTER TABLE"),
            _ => None,
        }
    }

    /// The types of the statement's `$n` parameters.
    /// Parameters the plan leaves untyped (analytics only): each takes
    /// the type the client declares.
    pub(super) fn open_params(&self) -> &[bool] {
        match self {
            Prepared::Engine { plan, .. }
            | Prepared::Declare {
                query: CursorQuery::Engine(plan),
                ..
            } => &plan.open_params,
            _ => &[],
        }
    }

    pub(super) fn param_types(&self) -> &[SqlType] {
        match self {
            Prepared::Select(s) => &s.plan.param_types,
            Prepared::Explain(e) => &e.select.param_types,
            Prepared::Write(w) => &w.param_types,
            Prepared::Engine { plan, .. } => &plan.param_types,
            Prepared::Declare { query, .. } => query.param_types(),
            Prepared::Advise(call) => &call.param_types,
            _ => &[],
        }
    }
}

/// The last READ ONLY / READ WRITE among a transaction's modes. Isolation
/// levels are accepted: every transaction is one entity-group transaction,
/// serializable whatever it asks for.
fn access_mode(modes: &[ast::TransactionMode]) -> Option<bool> {
    modes.iter().rev().find_map(|m| match m {
        ast::TransactionMode::AccessMode(a) => {
            Some(matches!(a, ast::TransactionAccessMode::ReadOnly))
        }
        _ => None,
    })
}

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

/// The seconds of `SELECT pg_sleep(constant)`, as PostgreSQL waits them
/// (none for a negative or NaN count).
fn sleep_query(q: &ast::Query) -> Option<std::time::Duration> {
    let ast::SetExpr::Select(s) = &*q.body else {
        return None;
    };
    if !s.from.is_empty() || s.projection.len() != 1 || s.selection.is_some() {
        return None;
    }
    let ast::SelectItem::UnnamedExpr(ast::Expr::Function(f)) = &s.projection[0] else {
        return None;
    };
    if !f.name.to_string().eq_ignore_ascii_case("pg_sleep") {
        return None;
    }
    let ast::FunctionArguments::List(list) = &f.args else {
        return None;
    };
    let [ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(arg))] = list.args.as_slice() else {
        return None;
    };
    let (negative, arg) = match arg {
        ast::Expr::UnaryOp {
            op: ast::UnaryOperator::Minus,
            expr,
        } => (true, &**expr),
        a => (false, a),
    };
    let ast::Expr::Value(v) = arg else {
        return None;
    };
    let secs: f64 = match &v.value {
        ast::Value::Number(n, _) => n.parse().ok()?,
        ast::Value::SingleQuotedString(s) => s.trim().parse().ok()?,
        _ => return None,
    };
    let secs = if negative { -secs } else { secs };
    Some(std::time::Duration::from_secs_f64(if secs > 0.0 {
        secs.min(1e9)
    } else {
        0.0
    }))
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

/// A statement for the analytics engine: its own text when it is the whole
/// query string (`own_text`), else its SQL rendering.
fn engine_sql(
    stmt: &Statement,
    own_text: Option<&str>,
    reason: String,
    explain: Option<bool>,
) -> Prepared {
    Prepared::EngineSql {
        sql: match own_text {
            Some(text) if explain.is_none() => text.to_owned(),
            _ => stmt.to_string(),
        },
        reason,
        explain,
    }
}

/// Plans one statement of the query string `sql`; `single` says whether
/// it is the string's only statement (the analytics engine then gets the
/// text as the client wrote it).
pub fn prepare(
    planner: &Planner,
    stmt: &Statement,
    sql: &str,
    single: bool,
) -> Result<Prepared, PgError> {
    let plan_err = |e: tablegate_planner::PlanError| PgError::from(&e);
    Ok(match stmt {
        Statement::Query(q) if is_version_query(q) => Prepared::Version,
        Statement::Query(q) if sleep_query(q).is_some() => {
            Prepared::Sleep(sleep_query(q).unwrap_or_default())
        }
        Statement::Query(q) if let Some(call) = super::advise::advise_call(q) => {
            Prepared::Advise(call?)
        }
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
                return Err(PgError::feature_not_supported("RESET ALL is not supported")
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
                    return Err(
                        PgError::feature_not_supported("SCROLL cursors are not supported").hint(
                            "cursors move forward only, like the store's continuation tokens",
                        ),
                    );
                }
                let q = Statement::Query(d.for_query.clone().expect("checked"));
                // What the analytics engine runs, a cursor reads too; its
                // text is the query alone, not the DECLARE.
                let query = match planner.plan(&q, sql).map_err(plan_err)? {
                    Plan::Select(s) => CursorQuery::Native(s),
                    Plan::Analytics { reason, .. } => CursorQuery::EngineSql {
                        sql: q.to_string(),
                        reason,
                    },
                    _ => return Err(PgError::syntax_error("DECLARE needs a SELECT")),
                };
                Prepared::Declare {
                    name: cursor_name(&d.names[0]),
                    query,
                    hold: d.hold == Some(true),
                }
            }
            _ => {
                return Err(PgError::feature_not_supported(
                    "this form of DECLARE is not supported",
                ));
            }
        },
        Statement::Fetch {
            name, direction, ..
        } => {
            let n = |v: &ast::ValueWithSpan| match &v.value {
                ast::Value::Number(n, _) => n.parse::<usize>().map_err(|_| {
                    PgError::invalid_parameter_value(format!("invalid FETCH count {n}"))
                }),
                other => Err(PgError::invalid_parameter_value(format!(
                    "invalid FETCH count {other}"
                ))),
            };
            let count = match direction {
                ast::FetchDirection::Count { limit } => Some(n(limit)?),
                ast::FetchDirection::Forward { limit: Some(limit) } => Some(n(limit)?),
                ast::FetchDirection::Next | ast::FetchDirection::Forward { limit: None } => Some(1),
                ast::FetchDirection::All | ast::FetchDirection::ForwardAll => None,
                other => {
                    return Err(PgError::feature_not_supported(format!(
                        "FETCH {other} is not supported"
                    ))
                    .hint("cursors move forward only: FETCH n, FETCH NEXT, FETCH ALL"));
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
            match prepare(planner, statement, sql, false)? {
                Prepared::ExecuteSql { name, args } => Prepared::ExplainExecute {
                    name,
                    args,
                    analyze,
                    json,
                },
                _ => {
                    return Err(PgError::syntax_error(
                        "EXPLAIN EXECUTE needs a statement name",
                    ));
                }
            }
        }
        Statement::Prepare {
            name, statement, ..
        } => {
            if matches!(**statement, Statement::Prepare { .. }) {
                return Err(PgError::syntax_error("PREPARE cannot prepare a PREPARE"));
            }
            // Parameter types come from the statement's context, as for
            // the extended protocol; declared types are not needed.
            let inner = statement.to_string();
            let version = planner.catalog().version();
            Prepared::PrepareSql {
                name: tablegate_planner::expr::fold(name),
                stmt: Box::new(prepare(planner, statement, &inner, true)?),
                sql: inner.into(),
                version,
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
                    PgError::syntax_error("EXECUTE needs a prepared statement's name")
                })?,
            ),
            args: parameters.clone(),
        },
        Statement::Close { cursor } => Prepared::Close(match cursor {
            ast::CloseCursor::All => None,
            ast::CloseCursor::Specific { name } => Some(cursor_name(name)),
        }),
        Statement::StartTransaction { modes, .. } => Prepared::Begin {
            read_only: access_mode(modes),
        },
        Statement::Set(ast::Set::SetTransaction { modes, session, .. }) => {
            Prepared::SetTransaction {
                read_only: access_mode(modes),
                session: *session,
            }
        }
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
            super::copy::format::check_target(target, *to)?;
            if !values.is_empty() {
                return Err(
                    PgError::feature_not_supported("inline COPY data is not supported")
                        .hint("send the data after the COPY statement (psql does)"),
                );
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
                        Plan::Analytics { reason, .. } => {
                            return Err(plan_err(tablegate_planner::PlanError::NeedsAnalytics {
                                reason,
                            }));
                        }
                        _ => return Err(PgError::syntax_error("COPY (query) needs a SELECT")),
                    }
                }
                (ast::CopySource::Query(_), false) => {
                    return Err(PgError::syntax_error("COPY (query) FROM is not valid")
                        .hint("COPY a table FROM STDIN"));
                }
            }
        }
        other => match planner.plan(other, sql).map_err(plan_err)? {
            Plan::Select(s) => Prepared::Select(NativeSelect::new(s)),
            Plan::Analytics { reason, explain } => match (other, explain) {
                (Statement::Explain { statement, .. }, Some(_)) => {
                    engine_sql(statement, None, reason, explain)
                }
                _ => engine_sql(other, single.then_some(sql), reason, explain),
            },
            Plan::Explain(e) => Prepared::Explain(e),
            Plan::Write(w) => Prepared::Write(w),
            p @ (Plan::CreateTable { .. }
            | Plan::CreateTableAs { .. }
            | Plan::DropTable { .. }
            | Plan::AddColumn { .. }
            | Plan::CreateIndex { .. }
            | Plan::DropIndex { .. }) => Prepared::Ddl(p),
            Plan::Other(s) => {
                let verb = s
                    .to_string()
                    .split_whitespace()
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ")
                    .to_uppercase();
                return Err(PgError::feature_not_supported(format!(
                    "{verb} is not supported"
                )));
            }
        },
    })
}

/// Plans an engine statement with DataFusion; other statements pass.
pub(super) async fn resolve(
    planner: &Planner,
    session: &Session,
    p: Prepared,
) -> Result<Prepared, PgError> {
    let plan = |sql: String, reason: String| async move {
        let engine = session.engine(planner).await?;
        let plan = engine
            .plan(&sql, &reason)
            .await
            .map_err(|e| PgError::from(&e))?;
        Ok::<_, PgError>(Arc::new(plan))
    };
    Ok(match p {
        Prepared::EngineSql {
            sql,
            reason,
            explain,
        } => Prepared::Engine {
            plan: plan(sql, reason).await?,
            explain,
        },
        Prepared::PrepareSql {
            name,
            stmt,
            sql,
            version,
        } => Prepared::PrepareSql {
            name,
            stmt: Box::new(Box::pin(resolve(planner, session, *stmt)).await?),
            sql,
            version,
        },
        Prepared::Declare {
            name,
            query: CursorQuery::EngineSql { sql, reason },
            hold,
        } => Prepared::Declare {
            name,
            query: CursorQuery::Engine(plan(sql, reason).await?),
            hold,
        },
        other => other,
    })
}

/// Plans a prepared statement's text again because a table definition
/// changed since it was planned (PostgreSQL re-plans cached plans after DDL
/// too): it must not run with the old columns and types. As in PostgreSQL,
/// a new result shape is refused (0A000), and so are new parameter types.
pub(super) async fn replan(
    planner: &Planner,
    session: &Session,
    old: &Prepared,
    sql: &str,
) -> Result<Prepared, PgError> {
    let stmts = Planner::parse(sql).map_err(|e| PgError::from(&e))?;
    let [stmt] = stmts.as_slice() else {
        return Err(PgError::internal("a prepared statement is one statement"));
    };
    let new = resolve(planner, session, prepare(planner, stmt, sql, true)?).await?;
    if new.param_types() != old.param_types() {
        return Err(PgError::new(
            "42804",
            "a table this prepared statement uses was changed, and its parameters would now \
             have other types",
        )
        .hint("prepare the statement again"));
    }
    if row_shape(&new) != row_shape(old) {
        return Err(
            PgError::feature_not_supported("cached plan must not change result type")
                .hint("a table this prepared statement reads was changed; prepare it again"),
        );
    }
    Ok(new)
}

/// The result columns' names and types.
fn row_shape(p: &Prepared) -> Vec<(String, pgwire::api::Type)> {
    let fields = match p {
        Prepared::Select(s) => Arc::unwrap_or_clone(s.fields(None)),
        Prepared::Write(w) => fields(&w.returning, None),
        Prepared::Engine {
            plan,
            explain: None,
        } => crate::encode::arrow_fields(&plan.schema, None),
        _ => return Vec::new(),
    };
    fields
        .iter()
        .map(|f| (f.name().to_owned(), f.datatype().clone()))
        .collect()
}
