//! The analytics engine: DataFusion over the store, for what the native
//! path does not run (aggregates, joins, sorts, subqueries, CTEs, window
//! functions, set operations, functions over columns) and for the
//! `pg_catalog` / `information_schema` queries drivers and psql send.
//!
//! The planner decides the route ([`tablegate_planner::Route`]); the
//! gateway sends engine routes here. Each connection has its own
//! [`Engine`] (one DataFusion `SessionContext`, created on first use), so
//! settings never leak between sessions. Store tables are DataFusion tables
//! whose scans push key spans, residual filters, projection and LIMIT into
//! the store through the planner's classifier ([`provider`]).
//!
//! `pg_catalog` comes from the datafusion-pg-catalog crate (the
//! datafusion-postgres project): its tables read DataFusion's catalog, which
//! lists the store's tables in schema `public`, and its SQL rewriter turns
//! psql's catalog queries into SQL DataFusion runs. We chose it over a
//! hand-written catalog because it already answers psql's `\d` family and
//! common driver metadata queries; it pulls pgwire 0.41 (through arrow-pg)
//! beside our 0.42, used only for its type tables. Its SQL rewrites apply
//! to user queries only where they keep the answer ([`dialect`]).
//!
//! Memory is bounded for the whole server by one DataFusion memory pool
//! ([`MEMORY_LIMIT`] by default, [`Pool`]): sorts and aggregates spill to
//! disk, what cannot spill (a hash join's build side) fails with 53200, and
//! the server is never OOM-killed.

mod decorrelate;
mod dialect;
pub mod functions;
pub mod info_schema;
pub mod literals;
pub mod overflow;
pub mod pg_fix;
mod pg_indexes;
pub mod provider;
mod sizes;
pub mod system;

use std::sync::Arc;

use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::common::{DataFusionError, ParamValues, ScalarValue};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{SendableRecordBatchStream, displayable};
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_pg_catalog::pg_catalog::context::{PgCatalogContextProvider, Role};
use parking_lot::Mutex;
use tablegate_catalog::SqlType;
use tablegate_catalog::types::MICROS_PER_DAY;
use tablegate_planner::{ExecOptions, Planner};
use tablegate_store::Value;

use crate::sqlstate::PgError;

use provider::{SharedOptions, StoreSchema};

/// What the engine's calls fail with.
pub type EngineError = DataFusionError;

/// The catalog (database) name DataFusion and pg_catalog report.
pub const DATABASE: &str = "tablegate";

/// Memory all sessions' analytics queries may hold together by default
/// (sorts, hash tables); `tablegate serve --engine-memory-mb` changes it.
pub const MEMORY_LIMIT: usize = 1 << 30;

/// Where every session's analytics run: a runtime of their own (so a busy
/// engine never delays the listener, cancel requests or native queries on
/// their own threads), a bound on how many statements run at once (more
/// wait in a queue, then are refused with 53000), and one memory pool for
/// the whole server (sorts and aggregates spill, then fail with 53200).
#[derive(Clone)]
pub struct Pool {
    runtime: tokio::runtime::Handle,
    /// Owned here when this pool made its runtime ([`Pool::new`]).
    owned: Option<Arc<Mutex<OwnedRuntime>>>,
    running: Arc<tokio::sync::Semaphore>,
    limit: usize,
    queue_wait: std::time::Duration,
    memory: Arc<dyn datafusion::execution::memory_pool::MemoryPool>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("free", &self.running.available_permits())
            .finish_non_exhaustive()
    }
}

impl Pool {
    /// A pool with a runtime of its own: one worker per core, each with an
    /// 8 MiB stack (plans recurse over statement trees).
    pub fn new(
        memory: usize,
        running: usize,
        queue_wait: std::time::Duration,
    ) -> std::io::Result<Pool> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .thread_name("tablegate-analytics")
            .thread_stack_size(8 << 20)
            .enable_all()
            .build()?;
        let mut pool = Pool::on(runtime.handle().clone(), memory, running, queue_wait);
        pool.owned = Some(Arc::new(Mutex::new(OwnedRuntime(Some(runtime)))));
        Ok(pool)
    }

    /// A pool on the caller's runtime holding at most `memory` bytes
    /// (tests and tools without a server).
    pub fn current(memory: usize) -> Pool {
        Pool::on(
            tokio::runtime::Handle::current(),
            memory,
            16,
            std::time::Duration::from_secs(60),
        )
    }

    fn on(
        runtime: tokio::runtime::Handle,
        memory: usize,
        running: usize,
        queue_wait: std::time::Duration,
    ) -> Pool {
        Pool {
            runtime,
            owned: None,
            running: Arc::new(tokio::sync::Semaphore::new(running.max(1))),
            limit: running.max(1),
            queue_wait,
            memory: Arc::new(datafusion::execution::memory_pool::FairSpillPool::new(
                memory,
            )),
        }
    }

    /// Waits for a turn to run a statement; refuses with 53000 after the
    /// pool's queue wait.
    async fn admit(&self) -> Result<tokio::sync::OwnedSemaphorePermit, DataFusionError> {
        match tokio::time::timeout(self.queue_wait, self.running.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(DataFusionError::External(Box::new(
                crate::sqlstate::PgError::insufficient_resources(format!(
                        "the analytics engine is busy: {} statements are running and this one waited {:?}",
                        self.limit,
                        self.queue_wait
                    ),
                )
                .hint("retry with backoff; key queries (point and range lookups) do not wait for the analytics engine"),
            ))),
        }
    }

    /// A turn for `plan`, unless it reads no data at all (`SELECT 1`,
    /// `SELECT version()`: drivers' health checks and session set-up must
    /// not wait behind heavy queries).
    async fn admit_plan(
        &self,
        plan: &LogicalPlan,
    ) -> Result<Option<tokio::sync::OwnedSemaphorePermit>, DataFusionError> {
        if reads_data(plan) {
            self.admit().await.map(Some)
        } else {
            Ok(None)
        }
    }

    /// Stops the pool's runtime (if it owns one): running plans stop at
    /// their next yield.
    pub fn shutdown(&self) {
        if let Some(owned) = &self.owned {
            owned.lock().stop();
        }
    }
}

/// Whether a plan scans a table (or a table function) or unnests,
/// anywhere, subqueries included.
fn reads_data(plan: &LogicalPlan) -> bool {
    use datafusion::common::tree_node::TreeNodeRecursion;
    let mut found = false;
    let _ = plan.apply_with_subqueries(|n| {
        if matches!(
            n,
            LogicalPlan::TableScan(_) | LogicalPlan::Unnest(_) | LogicalPlan::RecursiveQuery(_)
        ) {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// A runtime that stops without waiting for its tasks when dropped (a
/// runtime dropped inside another's task would panic waiting).
struct OwnedRuntime(Option<tokio::runtime::Runtime>);

impl OwnedRuntime {
    fn stop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One connection's DataFusion session.
pub struct Engine {
    ctx: SessionContext,
    /// Where plans run (see [`Engine::execute`]).
    pool: Pool,
    opts: SharedOptions,
    parser: &'static dialect::SqlDialect,
    /// The connection's settings as of its current statement.
    session: Arc<Mutex<crate::settings::Settings>>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine").finish_non_exhaustive()
    }
}

/// A statement planned by DataFusion.
#[derive(Debug, Clone)]
pub struct EnginePlan {
    /// The logical plan (parameters unbound).
    pub plan: Arc<LogicalPlan>,
    /// Result schema.
    pub schema: SchemaRef,
    /// Parameter types, `$1` first (unknown ones are text).
    pub param_types: Vec<SqlType>,
    /// True for each parameter the plan gives no type: it takes the value
    /// as the client sent it (its declared type, else text).
    pub open_params: Vec<bool>,
    /// Why the planner sent it here.
    pub reason: String,
}

/// The roles `pg_roles` shows (psql's `\du`): the session's user and the
/// store's SCRAM users, each with every attribute, since tablegate has no
/// privileges to withhold.
#[derive(Debug, Clone)]
struct SessionRoles {
    user: String,
    users: crate::auth::UserStore,
}

impl SessionRoles {
    /// The session's user and every SCRAM user in the store, in name
    /// order. A store that cannot list them still shows the session's.
    async fn names(&self) -> Vec<String> {
        let mut names = self.users.names().await.unwrap_or_default();
        names.push(self.user.clone());
        names.sort();
        names.dedup();
        names
    }
}

#[async_trait::async_trait]
impl PgCatalogContextProvider for SessionRoles {
    async fn roles(&self) -> Vec<String> {
        self.names().await
    }

    async fn role(&self, name: &str) -> Option<Role> {
        // Every user may do everything: there are no privileges to show.
        (name == self.user || self.names().await.iter().any(|n| n == name)).then(|| Role {
            name: name.to_owned(),
            is_superuser: true,
            can_login: true,
            can_create_db: true,
            can_create_role: true,
            can_create_user: true,
            can_replication: false,
            grants: Vec::new(),
            inherited_roles: Vec::new(),
        })
    }
}

impl Engine {
    /// A session of `user` over `planner`'s catalog and store.
    pub fn new(planner: Planner, pool: Pool, user: &str) -> Result<Engine, DataFusionError> {
        let config = SessionConfig::new()
            .with_default_catalog_and_schema(DATABASE, "public")
            .with_information_schema(false)
            // `1.5` is numeric, as PostgreSQL types it (exact, printed with
            // its scale), not a double.
            .set_bool("datafusion.sql_parser.parse_float_as_decimal", true)
            // TIMESTAMPTZ literals and casts, now() and CURRENT_TIMESTAMP
            // are timestamptz, as store columns are (without a zone they
            // were `timestamp`: printed without offset, typed 1114).
            .set_str("datafusion.execution.time_zone", "UTC")
            .with_target_partitions(4);
        let env = RuntimeEnvBuilder::new()
            .with_memory_pool(pool.memory.clone())
            .build_arc()?;
        let state = datafusion::execution::SessionStateBuilder::new()
            .with_config(config)
            .with_runtime_env(env)
            .with_default_features()
            .with_analyzer_rules(
                std::iter::once(Arc::new(overflow::BigintSums) as _)
                    .chain(datafusion::optimizer::Analyzer::new().rules)
                    .collect(),
            )
            .with_physical_optimizer_rule(Arc::new(overflow::CheckedArithmetic))
            .build();
        let ctx = SessionContext::new_with_state(state);
        let opts: SharedOptions = Arc::new(Mutex::new(ExecOptions::default()));
        ctx.catalog(DATABASE)
            .ok_or_else(|| DataFusionError::Internal("no default catalog".into()))?
            .register_schema(
                "public",
                Arc::new(StoreSchema::new(planner.clone(), opts.clone())),
            )?;
        ctx.catalog(DATABASE)
            .ok_or_else(|| DataFusionError::Internal("no default catalog".into()))?
            .register_schema(
                "information_schema",
                Arc::new(info_schema::InfoSchema::new(planner.clone(), DATABASE)),
            )?;
        ctx.catalog(DATABASE)
            .ok_or_else(|| DataFusionError::Internal("no default catalog".into()))?
            .register_schema(
                system::SCHEMA,
                Arc::new(system::SystemSchema::new(planner.clone())),
            )?;
        let planner_for_fix = planner;
        let oids = datafusion_pg_catalog::setup_pg_catalog(
            &ctx,
            DATABASE,
            SessionRoles {
                user: user.to_owned(),
                users: crate::auth::UserStore::existing(planner_for_fix.store().system()),
            },
        )
        .map_err(|e| *e)?;
        let catalog = ctx
            .catalog(DATABASE)
            .ok_or_else(|| DataFusionError::Internal("no default catalog".into()))?;
        if let Some(pg) = catalog.schema("pg_catalog") {
            catalog.register_schema(
                "pg_catalog",
                Arc::new(pg_fix::PgCatalogFix::new(pg, planner_for_fix.clone())),
            )?;
        }
        let session = Arc::new(Mutex::new(crate::settings::Settings::default()));
        functions::register(&ctx, user, session.clone());
        pg_indexes::register(&ctx, planner_for_fix.clone(), oids.clone());
        sizes::register(&ctx, planner_for_fix.clone(), oids, DATABASE);
        ctx.add_analyzer_rule(Arc::new(literals::TimestampLiterals));
        ctx.add_analyzer_rule(Arc::new(overflow::CheckedConstants));
        Ok(Engine {
            ctx,
            session,
            pool,
            opts,
            parser: dialect::SqlDialect::shared(),
        })
    }

    /// The settings the next statement reads (`current_setting`).
    pub fn set_session(&self, session: &crate::settings::Settings) {
        self.session.lock().clone_from(session);
    }

    /// Plans one statement's SQL text.
    pub async fn plan(&self, sql: &str, reason: &str) -> Result<EnginePlan, DataFusionError> {
        // DataFusion's parser holds as much as ours: large texts take turns.
        let _turn = tablegate_planner::budget::admit(sql)
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let mut stmts = self
            .parser
            .parse(sql)
            .map_err(|e| DataFusionError::SQL(Box::new(e), None))?;
        if stmts.len() != 1 {
            return Err(DataFusionError::Plan(format!(
                "expected one statement, got {}",
                stmts.len()
            )));
        }
        let stmt = stmts.remove(0);
        let plan = self
            .ctx
            .state()
            .statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(
                stmt,
            )))
            .await?;
        let mut types = plan.get_parameter_types()?;
        for (name, ty) in cast_parameter_types(&plan) {
            if let Some(t @ None) = types.get_mut(&name) {
                *t = Some(ty);
            }
        }
        let mut param_types = Vec::new();
        let mut open_params = Vec::new();
        for (name, ty) in types {
            let Some(n) = name
                .strip_prefix('$')
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|n| *n >= 1)
            else {
                continue;
            };
            if param_types.len() < n {
                param_types.resize(n, SqlType::Text);
                open_params.resize(n, true);
            }
            param_types[n - 1] = ty.as_ref().map_or(SqlType::Text, sql_type);
            open_params[n - 1] = ty.is_none();
        }
        let schema = plan.schema().as_arrow().clone();
        // Result columns named as PostgreSQL names them (`count`, `upper`,
        // `?column?`), not as DataFusion prints the expression.
        let schema = match pg_column_names(sql) {
            Some(names) if names.len() == schema.fields().len() => {
                datafusion::arrow::datatypes::Schema::new(
                    schema
                        .fields()
                        .iter()
                        .zip(names)
                        .map(|(f, n)| match n {
                            Some(n) => f.as_ref().clone().with_name(n),
                            None => f.as_ref().clone(),
                        })
                        .collect::<Vec<_>>(),
                )
            }
            _ => schema,
        };
        let schema = Arc::new(schema);
        Ok(EnginePlan {
            plan: Arc::new(plan),
            schema,
            param_types,
            open_params,
            reason: reason.to_owned(),
        })
    }

    fn bind(
        &self,
        p: &EnginePlan,
        params: &[Option<Value>],
        opts: ExecOptions,
    ) -> Result<LogicalPlan, DataFusionError> {
        *self.opts.lock() = opts;
        let plan = p.plan.as_ref().clone();
        if params.len() < p.param_types.len() {
            // A `$n` the client never sent (say, in a simple query): name
            // the first one the statement uses, as PostgreSQL does.
            let missing = plan
                .get_parameter_types()
                .ok()
                .and_then(|used| {
                    used.keys()
                        .filter_map(|k| k.trim_start_matches('$').parse::<usize>().ok())
                        .filter(|n| *n > params.len())
                        .min()
                })
                .unwrap_or(params.len() + 1);
            return Err(DataFusionError::External(Box::new(
                PgError::undefined_parameter(format!("there is no parameter ${missing}"))
                    .hint("send parameter values with the extended protocol, or PREPARE the statement and EXECUTE it with values"),
            )));
        }
        if params.is_empty() {
            return Ok(plan);
        }
        let values: Vec<ScalarValue> = params
            .iter()
            .zip(&p.param_types)
            .map(|(v, t)| scalar(v.as_ref(), *t))
            .collect();
        plan.with_param_values(ParamValues::from(values))
    }

    /// Runs a planned statement; the stream stops when dropped.
    ///
    /// The plan runs on the engine's runtime (the server's multi-threaded
    /// one: DataFusion spawns a task per partition on the runtime that
    /// polls it, and a session's own runtime is single-threaded); batches
    /// come back over a two-batch channel.
    pub async fn execute(
        &self,
        p: &EnginePlan,
        params: &[Option<Value>],
        opts: ExecOptions,
    ) -> Result<SendableRecordBatchStream, DataFusionError> {
        self.execute_counted(p, params, opts, Arc::default()).await
    }

    /// [`execute`](Self::execute), leaving in `scans` what the plan's store
    /// scans did (entities read, throttled retries) once its last batch is
    /// produced.
    pub async fn execute_counted(
        &self,
        p: &EnginePlan,
        params: &[Option<Value>],
        opts: ExecOptions,
        scans: Arc<Mutex<tablegate_planner::Actuals>>,
    ) -> Result<SendableRecordBatchStream, DataFusionError> {
        use futures::{FutureExt, StreamExt};
        let plan = self.bind(p, params, opts)?;
        let permit = self.pool.admit_plan(&plan).await?;
        let ctx = self.ctx.clone();
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let (tx, mut rx) = tokio::sync::mpsc::channel(2);
        let on_panic = tx.clone();
        let pool = self.pool.clone();
        let work = async move {
            // The turn is held while the plan computes, and given back
            // while a batch waits for its reader: a cursor nobody fetches
            // from, or a client that stops reading, holds no turn.
            let metered = permit.is_some();
            let mut permit = permit;
            let physical = match ctx.execute_logical_plan(plan).await {
                Ok(df) => df.create_physical_plan().await,
                Err(e) => Err(e),
            };
            let (physical, stream) = match physical {
                Ok(p) => (
                    Some(p.clone()),
                    datafusion::physical_plan::execute_stream(p, ctx.task_ctx()),
                ),
                Err(e) => (None, Err(e)),
            };
            let mut stream = match stream {
                Ok(s) => {
                    let _ = started_tx.send(Ok(s.schema()));
                    s
                }
                Err(e) => {
                    let _ = started_tx.send(Err(e));
                    return;
                }
            };
            loop {
                // A started plan waits for its turn as long as it takes
                // (it was admitted once, and its reader asked).
                let held = match (metered, permit.take()) {
                    (_, Some(p)) => Some(p),
                    (true, None) => match pool.running.clone().acquire_owned().await {
                        Ok(p) => Some(p),
                        Err(_) => return,
                    },
                    (false, None) => None,
                };
                let Some(batch) = stream.next().await else {
                    if let Some(p) = &physical {
                        *scans.lock() = provider::StoreScanExec::scanned_by(p);
                    }
                    return;
                };
                drop(held);
                if tx.send(batch).await.is_err() {
                    return; // the reader is gone
                }
            }
        };
        let task = self.pool.runtime.spawn(async move {
            // A panic must not pass for the end of the result.
            if let Err(panic) = std::panic::AssertUnwindSafe(work).catch_unwind().await {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!("analytics task panicked: {what}");
                let _ = on_panic
                    .send(Err(DataFusionError::Execution(format!(
                        "the analytics engine failed: {what}"
                    ))))
                    .await;
            }
        });
        let abort = AbortOnDrop(task.abort_handle());
        let schema = match started.await {
            Ok(r) => r?,
            Err(_) => {
                return Err(DataFusionError::Execution(
                    "the analytics task ended before its plan started".into(),
                ));
            }
        };
        let batches = futures::stream::poll_fn(move |cx| {
            // Dropping the stream aborts the task, and with it the plan.
            let _task = &abort;
            rx.poll_recv(cx)
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(schema, batches)))
    }

    /// EXPLAIN [ANALYZE]: the route, then DataFusion's physical plan with
    /// the store scans annotated (class, spans, residual, estimates, and
    /// actuals after ANALYZE).
    pub async fn explain(
        &self,
        p: &EnginePlan,
        params: &[Option<Value>],
        analyze: bool,
        opts: ExecOptions,
    ) -> Result<Vec<String>, DataFusionError> {
        use futures::StreamExt;
        let plan = self.bind(p, params, opts)?;
        let physical = self
            .ctx
            .execute_logical_plan(plan)
            .await?
            .create_physical_plan()
            .await?;
        let mut lines = vec![format!(
            "Route: analytics engine (DataFusion): {}",
            p.reason
        )];
        let text = if analyze {
            let permit = self.pool.admit_plan(p.plan.as_ref()).await?;
            let started = std::time::Instant::now();
            let task = self.ctx.task_ctx();
            let plan = physical.clone();
            // On the engine's runtime, as `execute` runs it.
            let run = self.pool.runtime.spawn(async move {
                let _permit = permit;
                let mut stream = datafusion::physical_plan::execute_stream(plan, task)?;
                let mut rows = 0usize;
                while let Some(b) = stream.next().await {
                    rows += b?.num_rows();
                }
                Ok::<_, DataFusionError>(rows)
            });
            let _abort = AbortOnDrop(run.abort_handle());
            let rows = match run.await {
                Ok(r) => r?,
                Err(e) => return Err(DataFusionError::Execution(format!("EXPLAIN ANALYZE: {e}"))),
            };
            lines.push(format!(
                "Actual: rows {rows}, elapsed {:?}",
                started.elapsed()
            ));
            datafusion::physical_plan::display::DisplayableExecutionPlan::with_metrics(
                physical.as_ref(),
            )
            .indent(false)
            .to_string()
        } else {
            displayable(physical.as_ref()).indent(false).to_string()
        };
        lines.extend(text.lines().map(str::to_owned));
        Ok(lines)
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The names PostgreSQL gives a query's result columns, from its
/// top-level select list: an alias, a column's name, a function's name,
/// the type of a cast literal, or `?column?`. `None` for an item that
/// expands (`*`) — then DataFusion's names stay.
fn pg_column_names(sql: &str) -> Option<Vec<Option<String>>> {
    use sqlparser::ast::{Expr, SelectItem, SetExpr, Statement};
    let stmt = Planner::parse(sql).ok()?.into_iter().next()?;
    let Statement::Query(q) = stmt else {
        return None;
    };
    let SetExpr::Select(sel) = &*q.body else {
        return None;
    };
    fn name(e: &Expr) -> String {
        match e {
            Expr::Identifier(i) => tablegate_planner::expr::fold(i),
            Expr::CompoundIdentifier(ids) => ids
                .last()
                .map(tablegate_planner::expr::fold)
                .unwrap_or_default(),
            Expr::Function(f) => f
                .name
                .0
                .last()
                .and_then(|p| p.as_ident())
                .map(|i| i.value.to_lowercase())
                .unwrap_or_else(|| "?column?".into()),
            Expr::Nested(x) => name(x),
            Expr::Cast {
                expr, data_type, ..
            } => match &**expr {
                // `varchar(2)` names its column `varchar`.
                Expr::Value(_) => {
                    let t = data_type.to_string().to_lowercase();
                    t.split('(').next().unwrap_or_default().trim().to_owned()
                }
                other => name(other),
            },
            Expr::TypedString(ts) => ts.data_type.to_string().to_lowercase(),
            Expr::Interval(_) => "interval".into(),
            Expr::Case { .. } => "case".into(),
            Expr::Extract { .. } => "extract".into(),
            Expr::Substring { .. } => "substring".into(),
            Expr::Trim { .. } => "btrim".into(),
            Expr::Exists { .. } => "exists".into(),
            // A scalar subquery is named after its one item.
            Expr::Subquery(q) => match &*q.body {
                SetExpr::Select(sel) => match sel.projection.as_slice() {
                    [SelectItem::UnnamedExpr(e)] => name(e),
                    [SelectItem::ExprWithAlias { alias, .. }] => {
                        tablegate_planner::expr::fold(alias)
                    }
                    _ => "?column?".into(),
                },
                _ => "?column?".into(),
            },
            _ => "?column?".into(),
        }
    }
    sel.projection
        .iter()
        .map(|item| match item {
            SelectItem::UnnamedExpr(e) => Some(Some(name(e))),
            SelectItem::ExprWithAlias { alias, .. } => {
                Some(Some(tablegate_planner::expr::fold(alias)))
            }
            _ => None,
        })
        .collect()
}

/// The SQL type a DataFusion parameter type decodes as.
/// The types casts give `$n` parameters (`$1::INTEGER`, as SQLAlchemy
/// writes every parameter) where DataFusion infers none.
fn cast_parameter_types(plan: &LogicalPlan) -> Vec<(String, DataType)> {
    use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
    use datafusion::logical_expr::{Cast, Expr, TryCast};
    let mut out = Vec::new();
    let _ = plan.apply_with_subqueries(|p| {
        p.apply_expressions(|e| {
            e.apply(|e| {
                let (Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field })) = e
                else {
                    return Ok(TreeNodeRecursion::Continue);
                };
                if let Expr::Placeholder(p) = expr.as_ref() {
                    out.push((p.id.clone(), field.data_type().clone()));
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    });
    out
}

fn sql_type(t: &DataType) -> SqlType {
    match t {
        DataType::Int8 | DataType::Int16 => SqlType::Int2,
        DataType::Int32 => SqlType::Int4,
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => SqlType::Int8,
        DataType::Float16 | DataType::Float32 | DataType::Float64 => SqlType::Float8,
        DataType::Boolean => SqlType::Bool,
        DataType::Timestamp(_, Some(_)) => SqlType::Timestamptz,
        DataType::Timestamp(_, None) => SqlType::Timestamp,
        DataType::Binary | DataType::LargeBinary => SqlType::Bytea,
        DataType::Date32 | DataType::Date64 => SqlType::Date,
        _ => SqlType::Text,
    }
}

/// A parameter value as a DataFusion literal.
fn scalar(v: Option<&Value>, t: SqlType) -> ScalarValue {
    let Some(v) = v else {
        return match t {
            SqlType::Int2 => ScalarValue::Int16(None),
            SqlType::Int4 => ScalarValue::Int32(None),
            SqlType::Int8 => ScalarValue::Int64(None),
            SqlType::Float8 => ScalarValue::Float64(None),
            SqlType::Bool => ScalarValue::Boolean(None),
            SqlType::Date => ScalarValue::Date32(None),
            _ => ScalarValue::Utf8(None),
        };
    };
    match (v, t) {
        (Value::Int32(i), SqlType::Int2) => ScalarValue::Int16(i16::try_from(*i).ok()),
        (Value::DateTime(d), SqlType::Date) => {
            ScalarValue::Date32(i32::try_from(d.micros().div_euclid(MICROS_PER_DAY)).ok())
        }
        _ => literal_of(v),
    }
}

/// A store value as the DataFusion literal of its own type.
fn literal_of(v: &Value) -> ScalarValue {
    match v {
        Value::String(s) => ScalarValue::Utf8(Some(s.clone())),
        Value::Int32(i) => ScalarValue::Int32(Some(*i)),
        Value::Int64(i) => ScalarValue::Int64(Some(*i)),
        Value::Double(d) => ScalarValue::Float64(Some(*d)),
        Value::Boolean(b) => ScalarValue::Boolean(Some(*b)),
        Value::DateTime(t) => ScalarValue::TimestampMicrosecond(
            Some(t.micros()),
            matches!(v, Value::DateTime(_)).then(|| "+00:00".into()),
        ),
        Value::Guid(g) => ScalarValue::Utf8(Some(tablegate_store::entity::guid_text(g))),
        Value::Binary(b) => ScalarValue::Binary(Some(b.clone())),
    }
}
