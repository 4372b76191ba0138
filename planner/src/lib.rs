//! SQL text to plans, and the native path that runs simple key queries.
//!
//! # The life of a query
//!
//! Take `SELECT name, age FROM registrations WHERE race = $1 AND runner >=
//! 'AGE:030' AND age > 40 LIMIT 10`, sent by a driver as Parse / Bind /
//! Execute:
//!
//! 1. **Wire message → SQL text.** The gateway (pgwire, in the
//!    connection's thread, one per connection, which waits for the message
//!    in a blocking read of its socket: `gateway/src/conn_io.rs`)
//!    receives Parse with the text and hands it to [`Planner::parse`] (sqlparser, PostgreSQL
//!    dialect). A syntax error becomes [`PlanError::Syntax`] with the
//!    character position (SQLSTATE 42601).
//! 2. **Prepare: bind names and types.** [`Planner::plan`] resolves the
//!    table in the [`Catalog`] and every column ([`expr::Binder`]):
//!    `race` is the PartitionKey, `runner` the RowKey, `age` an Int32
//!    property. Literals take the type of the column they meet (`'AGE:030'`
//!    is text, `40` an integer), and `$1` is inferred as text because it
//!    meets the PartitionKey — that is what ParameterDescription reports.
//!    The route is decided here ([`plan::Route`]): a single table with key
//!    order, no aggregate, join or sort goes **native**; anything else needs
//!    the analytics engine (DataFusion, a later issue).
//! 3. **Bind: parameters in, access classified.** [`plan::SelectPlan::bind`]
//!    substitutes `$1 = '2026 Boston Marathon__Full'` and calls
//!    [`keys::Access::from_where`], **where a query is classified**: NOT is
//!    pushed to the leaves, each predicate becomes a set of
//!    PartitionKey × RowKey boxes (exact or not), AND intersects, OR unites.
//!    Here the box is `PartitionKey = '…Full' AND RowKey >= 'AGE:030'`, the
//!    class is **row-range**, and `age > 40` is the residual filter the
//!    store evaluates on every scanned entity. A contradiction
//!    (`race = 'a' AND race = 'b'`) is class *empty*: zero store requests.
//! 4. **Execute: spans into the store.** [`exec::execute`] sends the spans,
//!    the residual filter and the projection (`name`, `age`) to the
//!    partition layer. Points become direct lookups; ranges become a scan
//!    cut into per-server segments ([`tablegate_store::partition::scan`]).
//! 5. **The partition scan.** In the store, the request is routed to the
//!    partition server owning the range, admitted or refused by the
//!    throttle (refusals are retried with the session's retry policy), and
//!    served by a page of at most 1,000 entities that ends at the next
//!    server's range with a continuation token
//!    ([`tablegate_store::LocalStore`], `local.rs`). On the Azure backend
//!    ([`tablegate_store::Backend::Remote`]) the same query becomes one
//!    request per page with an OData `$filter` (`azure/src/odata.rs`), the
//!    service throttles and pages, and each page is re-checked locally.
//! 6. **Pages → Arrow → rows.** Each page becomes one Arrow record batch
//!    on a two-batch channel, so memory stays bounded whatever the result
//!    size; LIMIT 10 stops the scan after ten rows and the gateway encodes
//!    the batches as DataRows. Outside a transaction the page arrives
//!    undecoded and its values go from the store's bytes into the columns
//!    ([`exec::encoded_to_batch`]); inside one, decoded entities are merged
//!    with the staged writes first ([`exec::to_batch`]). The scan's work
//!    runs in the connection's own task, polled as it reads
//!    ([`tablegate_store::driven::Driven`]): no thread hand-off per page.
//!
//! `EXPLAIN` renders step 3 and estimates steps 4–5 from the store's
//! statistics ([`explain`]); `EXPLAIN ANALYZE` also runs them and reports
//! what they did.
//!
//! # The life of a write
//!
//! `UPDATE registrations SET age = age + 1 WHERE race = $1 AND runner =
//! $2` is planned by [`write::plan_update`]: the SET becomes value
//! expressions, the WHERE a [`SelectPlan`] over every column. At run time
//! ([`apply::run`]) that plan is bound and classified exactly like a query
//! (here: a point), the matched entities are read, and each one's change is
//! decided: a Merge of `age`, with If-Match of the ETag that was read. In
//! autocommit, changes are grouped by PartitionKey (at most 100 per group)
//! and each group is one entity-group transaction; a conflict re-reads the
//! group and decides again. Inside `BEGIN`, the change is staged in the
//! [`txn::Transaction`] instead, and COMMIT sends all staged changes as one
//! EGT.

pub mod advise;
pub mod apply;
pub mod budget;
pub mod ddl;
pub mod error;
pub mod exec;
pub mod explain;
pub mod expr;
pub mod global;
pub mod identity;
pub mod index;
pub mod keys;
pub mod plan;
pub mod txn;
pub mod value_expr;
pub mod whatif;
pub mod write;

use std::sync::Arc;

use sqlparser::ast::{self, Statement};
use sqlparser::dialect::PostgreSqlDialect;
use sqlparser::parser::Parser;
use tablegate_catalog::{Catalog, CatalogError, Column, Created, REFRESH_EVERY, TableDef};
use tablegate_store::{Backend, RetryPolicy, TableStore, Value};

pub use apply::WriteOutcome;
pub use error::{PlanError, Result, TxnRule};

pub use exec::{Actuals, ExecOptions, IndexMode, RowStream};
pub use explain::Estimate;
pub use keys::{Access, AccessClass};
pub use plan::{BoundSelect, Route, SelectPlan};
pub use tablegate_catalog as catalog;
pub use txn::Transaction;
pub use write::WritePlan;

/// A planned statement: which engine runs it is part of the plan.
#[derive(Debug, Clone)]
pub enum Plan {
    /// A SELECT the native path runs.
    Select(Arc<SelectPlan>),
    /// A query the analytics engine (DataFusion) runs, or explains.
    Analytics {
        /// Why the native path does not run it.
        reason: String,
        /// `Some(analyze)` for EXPLAIN [ANALYZE] of it.
        explain: Option<bool>,
    },
    /// EXPLAIN of a native SELECT, or of an UPDATE / DELETE's scan.
    Explain(Arc<ExplainPlan>),
    /// INSERT, UPDATE or DELETE.
    Write(Arc<WritePlan>),
    /// CREATE TABLE.
    CreateTable {
        /// The definition.
        def: TableDef,
        /// IF NOT EXISTS.
        if_not_exists: bool,
    },
    /// CREATE TABLE name [(columns)] AS query: the gateway runs the query,
    /// creates the table from its result's columns (no primary key: hidden
    /// keys), and inserts its rows.
    CreateTableAs {
        /// The table.
        name: String,
        /// Column names given in the statement (else the query's).
        columns: Vec<String>,
        /// The query, as SQL.
        query: String,
        /// IF NOT EXISTS.
        if_not_exists: bool,
    },
    /// DROP TABLE.
    DropTable {
        /// Tables.
        names: Vec<String>,
        /// IF EXISTS.
        if_exists: bool,
    },
    /// ALTER TABLE ADD COLUMN.
    AddColumn {
        /// Table.
        table: String,
        /// Column.
        column: Column,
        /// IF NOT EXISTS.
        if_not_exists: bool,
    },
    /// CREATE [UNIQUE] INDEX: a local index, built over existing rows.
    CreateIndex {
        /// Table.
        table: String,
        /// Index name.
        name: String,
        /// Columns, INCLUDE, UNIQUE, GLOBAL (an index table across
        /// partitions: [`global`]).
        spec: catalog::IndexSpec,
        /// IF NOT EXISTS.
        if_not_exists: bool,
    },
    /// DROP INDEX.
    DropIndex {
        /// Indexes.
        names: Vec<String>,
        /// IF EXISTS.
        if_exists: bool,
    },
    /// A statement the planner does not handle (session commands, writes):
    /// the gateway decides.
    Other(Box<Statement>),
}

/// EXPLAIN [ANALYZE] [FORMAT JSON] of a native SELECT, or EXPLAIN of an
/// UPDATE / DELETE (the scan that finds the rows it writes).
#[derive(Debug, Clone)]
pub struct ExplainPlan {
    /// Run it too.
    pub analyze: bool,
    /// JSON instead of text.
    pub json: bool,
    /// The SELECT (for a write: its scan).
    pub select: Arc<SelectPlan>,
    /// For a write: `Update` or `Delete`.
    pub write: Option<&'static str>,
    /// `EXPLAIN (KEYS (…))`: the table as it really is; `select` is bound
    /// against the hypothetical keys ([`whatif`]).
    pub what_if: Option<Arc<TableDef>>,
}

/// Why a routed query is the analytics engine's.
fn engine_reason(routed: plan::Routed) -> String {
    match routed {
        plan::Routed::Bound(s) => match s.route {
            Route::Engine(reason) => reason,
            Route::Native => String::new(),
        },
        plan::Routed::Engine(reason) => reason,
    }
}

/// The result of a DDL statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DdlOutcome {
    /// Command tag (`CREATE TABLE`, `DROP TABLE`, `ALTER TABLE`).
    pub tag: &'static str,
    /// A NOTICE to send, if any (`relation "t" already exists, skipping`).
    pub notice: Option<String>,
}

/// Re-reads a shared catalog every [`REFRESH_EVERY`] while it is in use, so
/// DDL made through other gateways is seen within that bound.
fn refresh_every(catalog: std::sync::Weak<Catalog>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(REFRESH_EVERY).await;
            let Some(c) = catalog.upgrade() else { return };
            if let Err(e) = c.refresh().await {
                tracing::warn!(error = %e, "cannot refresh the catalog");
            }
        }
    });
}

/// Catalog and store, ready to plan and run statements.
#[derive(Debug, Clone)]
pub struct Planner {
    catalog: Arc<Catalog>,
    store: Backend,
    identities: Arc<identity::Identities>,
    /// CREATE INDEX builds running on this gateway, by index name.
    builds: Arc<parking_lot::Mutex<std::collections::BTreeMap<String, IndexBuild>>>,
    /// Applies queued changes to global indexes.
    maintainer: Arc<global::Maintainer>,
}

/// A CREATE INDEX backfill under way on this gateway.
#[derive(Debug, Clone)]
pub struct IndexBuild {
    /// The table it indexes.
    pub table: String,
    /// The index's id (a name dropped and created again is another).
    pub id: u32,
    /// Rows read so far.
    pub rows_read: u64,
    /// Entries written so far.
    pub entries_written: u64,
    /// When the backfill started.
    pub started: std::time::SystemTime,
}

/// Takes a build (name, id) off [`Planner::index_builds`] when dropped.
struct Unregister<'a>(
    &'a parking_lot::Mutex<std::collections::BTreeMap<String, IndexBuild>>,
    &'a str,
    u32,
);

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        let mut builds = self.0.lock();
        if builds.get(self.1).is_some_and(|b| b.id == self.2) {
            builds.remove(self.1);
        }
    }
}

/// How often a CREATE INDEX build reports its progress (a NOTICE).
const BUILD_REPORT_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

impl Planner {
    /// Opens the catalog over a backend (the embedded partitioned store, or
    /// a remote table service).
    pub async fn open(store: impl Into<Backend>) -> Result<Planner> {
        let store = store.into();
        let (system, data) = (store.system(), Arc::new(store.clone()));
        let catalog = match store {
            Backend::Embedded(_) => Catalog::open(system, data).await?,
            // A storage account also holds other applications' tables.
            Backend::Remote(_) => Catalog::open_shared(system, data).await?,
        };
        let catalog = Arc::new(catalog);
        if let Backend::Remote(_) = store {
            refresh_every(Arc::downgrade(&catalog));
        }
        Ok(Planner {
            maintainer: global::Maintainer::start(&catalog),
            catalog,
            identities: Arc::new(identity::Identities::new(store.system())),
            store,
            builds: Arc::default(),
        })
    }

    /// The catalog.
    pub fn catalog(&self) -> &Arc<Catalog> {
        &self.catalog
    }

    /// The store.
    pub fn store(&self) -> &Backend {
        &self.store
    }

    /// The identity columns' id blocks.
    pub fn identities(&self) -> &identity::Identities {
        &self.identities
    }

    /// Parses SQL text (PostgreSQL dialect) into statements.
    ///
    /// Deliberately limited by the statement budget ([`budget`]): text
    /// size, expression depth and count, set-operation chains, parameter
    /// numbers. Walking or even dropping a tree deeper than a thread's
    /// stack would abort the whole server.
    pub fn parse(sql: &str) -> Result<Vec<Statement>> {
        budget::check_length(sql)?;
        // Declared before the tokens and the tree, dropped after them: a
        // large text is tokenized, parsed and (if refused) dropped inside
        // its turn.
        let _turn = budget::admit(sql)?;
        budget::check_text(sql)?;
        budget::on_parse_stack(sql, || {
            let parsed = Parser::parse_sql(&PostgreSqlDialect {}, sql).or_else(|e| {
                // `CREATE INDEX … GLOBAL` is tablegate's own syntax.
                match ddl::global_index_syntax(sql) {
                    Some(text) => Parser::parse_sql(&PostgreSqlDialect {}, &text),
                    None => Err(e),
                }
            });
            let mut stmts = parsed.map_err(|e| syntax_error(sql, e))?;
            budget::check_tree(&mut stmts)?;
            Ok(stmts)
        })
    }

    /// Plans one statement (prepare time: names, types, and the route:
    /// native or analytics, decided once, here and in
    /// [`plan::plan_query`]).
    pub fn plan(&self, stmt: &Statement, sql: &str) -> Result<Plan> {
        Ok(match stmt {
            Statement::Query(q) => match plan::plan_query(&self.catalog, q, sql)? {
                plan::Routed::Bound(s) if s.route == Route::Native => Plan::Select(Arc::new(s)),
                routed => Plan::Analytics {
                    reason: engine_reason(routed),
                    explain: None,
                },
            },
            Statement::Explain { statement, .. } => {
                let (analyze, json) = explain_flags(stmt)?;
                if let Some(keys) = explain_keys(stmt)? {
                    return self.plan_what_if(statement, sql, &keys, analyze, json);
                }
                let write = |kind: &'static str, w: WritePlan| -> Result<Plan> {
                    if analyze {
                        return Err(PlanError::Unsupported {
                            feature: format!("EXPLAIN ANALYZE {}", kind.to_uppercase()),
                            hint: "EXPLAIN without ANALYZE shows the scan; EXPLAIN ANALYZE the matching SELECT to measure it".into(),
                        });
                    }
                    let scan = match &w.kind {
                        write::WriteKind::Update { scan, .. }
                        | write::WriteKind::Delete { scan } => scan.clone(),
                        write::WriteKind::Insert { .. } => unreachable!("only UPDATE and DELETE"),
                    };
                    Ok(Plan::Explain(Arc::new(ExplainPlan {
                        analyze,
                        json,
                        select: scan,
                        write: Some(kind),
                        what_if: None,
                    })))
                };
                match &**statement {
                    Statement::Query(q) => match plan::plan_query(&self.catalog, q, sql)? {
                        plan::Routed::Bound(s) if s.route == Route::Native => {
                            Plan::Explain(Arc::new(ExplainPlan {
                                analyze,
                                json,
                                select: Arc::new(s),
                                write: None,
                                what_if: None,
                            }))
                        }
                        routed => Plan::Analytics {
                            reason: engine_reason(routed),
                            explain: Some(analyze),
                        },
                    },
                    Statement::Update(u) => {
                        write("Update", write::plan_update(&self.catalog, u, sql)?)?
                    }
                    Statement::Delete(d) => {
                        write("Delete", write::plan_delete(&self.catalog, d, sql)?)?
                    }
                    other => {
                        return Err(PlanError::Unsupported {
                            feature: format!(
                                "EXPLAIN of {}",
                                other.to_string().split_whitespace().next().unwrap_or("")
                            ),
                            hint: "EXPLAIN a SELECT".into(),
                        });
                    }
                }
            }
            Statement::CreateTable(ct) if ct.query.is_some() => ddl::create_table_as(ct)?,
            Statement::CreateTable(ct) => {
                let (def, if_not_exists) = ddl::create_table(ct)?;
                Plan::CreateTable { def, if_not_exists }
            }
            Statement::Drop {
                object_type: ast::ObjectType::Table,
                if_exists,
                names,
                ..
            } => Plan::DropTable {
                names: ddl::drop_tables(names)?,
                if_exists: *if_exists,
            },
            Statement::CreateIndex(ci) => ddl::create_index(ci)?,
            Statement::Drop {
                object_type: ast::ObjectType::Index,
                if_exists,
                names,
                ..
            } => Plan::DropIndex {
                names: ddl::drop_tables(names)?,
                if_exists: *if_exists,
            },
            Statement::AlterTable(at) => {
                let (table, column, if_not_exists) = ddl::alter_table(at)?;
                Plan::AddColumn {
                    table,
                    column,
                    if_not_exists,
                }
            }
            Statement::Insert(i) => {
                Plan::Write(Arc::new(write::plan_insert(&self.catalog, i, sql)?))
            }
            Statement::Update(u) => {
                Plan::Write(Arc::new(write::plan_update(&self.catalog, u, sql)?))
            }
            Statement::Delete(d) => {
                Plan::Write(Arc::new(write::plan_delete(&self.catalog, d, sql)?))
            }
            other => Plan::Other(Box::new(other.clone())),
        })
    }

    /// Runs a write: autocommit when `txn` is `None`, else staged in it.
    pub async fn write(
        &self,
        plan: &WritePlan,
        params: &[Option<Value>],
        txn: Option<&mut Transaction>,
        opts: &ExecOptions,
    ) -> Result<WriteOutcome> {
        apply::run(
            &self.store,
            &self.catalog,
            &self.identities,
            plan,
            params,
            txn,
            opts,
        )
        .await
        .map_err(|e| e.with_key_columns(&plan.table))
    }

    /// COMMIT: the transaction's writes as one entity-group transaction.
    pub async fn commit(&self, txn: Transaction, opts: &ExecOptions) -> Result<usize> {
        txn.commit(&self.store, &self.catalog, &opts.retry).await
    }

    /// Runs a DDL plan.
    pub async fn run_ddl(&self, plan: &Plan) -> Result<DdlOutcome> {
        self.run_ddl_reporting(plan, &|_| {}).await
    }

    /// The CREATE INDEX builds running on this gateway, by index name.
    pub fn index_builds(&self) -> Vec<(String, IndexBuild)> {
        self.builds
            .lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Runs a DDL plan; a long one (a CREATE INDEX backfill) tells
    /// `report` how far it is every [`BUILD_REPORT_EVERY`].
    pub async fn run_ddl_reporting(
        &self,
        plan: &Plan,
        report: &(dyn Fn(String) + Send + Sync),
    ) -> Result<DdlOutcome> {
        match plan {
            Plan::CreateTable { def, if_not_exists } => {
                let created = self
                    .catalog
                    .create_table(def.clone(), *if_not_exists)
                    .await?;
                let notice = if created == Created::AlreadyExisted {
                    Some(format!(
                        "relation \"{}\" already exists, skipping",
                        def.name
                    ))
                } else if let Some(c) = def
                    .columns
                    .iter()
                    .find(|c| c.is_identity() && c.name == def.partition_key)
                {
                    Some(format!(
                        "identity column \"{}\" is the PartitionKey of \"{}\": every new row takes the next id, so inserts always land at the end of the key range, the append-only pattern the seeds warn of (one range partition takes every insert). If rows are read by other keys too, key the table by those (a tenant, a date bucket) and keep the id as the RowKey.",
                        c.name, def.name
                    ))
                } else if def.keyless() {
                    Some(format!(
                        "table \"{}\" has no primary key: its rows get hidden keys ({} buckets, one per session, and a time-ordered id), so inserts spread over partitions but every query reads the whole table (a full scan) and no read is a point lookup. Declare PRIMARY KEY (partition_key_column [, row_key_column]) for point and range queries.",
                        def.name,
                        tablegate_catalog::HIDDEN_BUCKETS
                    ))
                } else {
                    None
                };
                Ok(DdlOutcome {
                    tag: "CREATE TABLE",
                    notice,
                })
            }
            Plan::DropTable { names, if_exists } => {
                // PostgreSQL checks every name before dropping any.
                if !*if_exists {
                    for n in names {
                        self.catalog.table(n).map_err(|_| PlanError::UnknownTable {
                            name: n.clone(),
                            position: None,
                        })?;
                    }
                }
                let mut missing = Vec::new();
                for n in names {
                    let identity = self
                        .catalog
                        .table(n)
                        .is_ok_and(|t| t.columns.iter().any(|c| c.is_identity()));
                    if !self.catalog.drop_table(n, *if_exists).await? {
                        missing.push(n.clone());
                    } else if identity {
                        self.identities.drop_table(n).await?;
                    }
                }
                Ok(DdlOutcome {
                    tag: "DROP TABLE",
                    notice: missing
                        .first()
                        .map(|n| format!("table \"{n}\" does not exist, skipping")),
                })
            }
            Plan::AddColumn {
                table,
                column,
                if_not_exists,
            } => {
                let added = self
                    .catalog
                    .add_column(table, column.clone(), *if_not_exists)
                    .await?;
                Ok(DdlOutcome {
                    tag: "ALTER TABLE",
                    notice: (!added).then(|| {
                        format!(
                            "column \"{}\" of relation \"{table}\" already exists, skipping",
                            column.name
                        )
                    }),
                })
            }
            Plan::CreateIndex {
                table,
                name,
                spec,
                if_not_exists,
            } => {
                self.create_index(table, name, spec, *if_not_exists, report)
                    .await
            }
            Plan::DropIndex { names, if_exists } => {
                if !*if_exists {
                    for n in names {
                        if self.catalog.index_table(n).is_none() {
                            return Err(CatalogError::UnknownIndex { name: n.clone() }.into());
                        }
                    }
                }
                let mut missing = Vec::new();
                for n in names {
                    match self.catalog.drop_index(n, None).await {
                        Ok(table) => {
                            // Writes that still know the index finish (here
                            // and, over a shared catalog, on other gateways)
                            // before its entries go.
                            self.settle_writes().await;
                            if let Some(def) = table.index(n) {
                                self.drop_index_data(&table, def).await?;
                            }
                        }
                        Err(CatalogError::UnknownIndex { .. }) => missing.push(n.clone()),
                        Err(e) => return Err(e.into()),
                    }
                }
                Ok(DdlOutcome {
                    tag: "DROP INDEX",
                    notice: missing
                        .first()
                        .map(|n| format!("index \"{n}\" does not exist, skipping")),
                })
            }
            _ => Err(PlanError::Unsupported {
                feature: "this statement as DDL".into(),
                hint: String::new(),
            }),
        }
    }

    /// Deletes what an index dropped from `table` left in the store: a
    /// local index's entries; a global index's table (its queue entries go
    /// to the maintainer).
    async fn drop_index_data(&self, table: &TableDef, def: &catalog::IndexDef) -> Result<()> {
        let retry = RetryPolicy::default();
        if !def.global {
            index::drop_entries(&self.store, &table.name, &def.all_entries(), &retry).await?;
            return Ok(());
        }
        match self.store.drop_table(&def.global_table(&table.name)).await {
            Ok(()) | Err(tablegate_store::StoreError::TableNotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        // The queue entries left go the maintainer's way: it deletes
        // them, or applies them if a global index was created meanwhile.
        let pks = global::queued_partitions(&self.store, &table.name, &retry).await?;
        self.maintainer
            .enqueue(&table.name, &pks.into_iter().collect::<Vec<_>>());
        Ok(())
    }

    /// CREATE INDEX: records the index (writes maintain it from then on),
    /// then writes the entries of the rows already there (a global
    /// index's: queues every row and waits for the maintainer). A build
    /// that fails (a UNIQUE index over duplicates) removes the index again.
    async fn create_index(
        &self,
        table: &str,
        name: &str,
        spec: &catalog::IndexSpec,
        if_not_exists: bool,
        report: &(dyn Fn(String) + Send + Sync),
    ) -> Result<DdlOutcome> {
        let Some(def) = self
            .catalog
            .create_index(table, name, spec, if_not_exists)
            .await?
        else {
            return Ok(DdlOutcome {
                tag: "CREATE INDEX",
                notice: Some(format!("relation \"{name}\" already exists, skipping")),
            });
        };
        let at = def.indexes.len() - 1;
        self.settle_writes().await;
        let id = def.indexes[at].id;
        self.builds.lock().insert(
            name.to_owned(),
            IndexBuild {
                table: def.name.clone(),
                id,
                rows_read: 0,
                entries_written: 0,
                started: std::time::SystemTime::now(),
            },
        );
        // Removed however the build ends, a cancelled statement included.
        let _registered = Unregister(&self.builds, name, id);
        let last_report = parking_lot::Mutex::new(std::time::Instant::now());
        let progress = |read: u64, written: u64| {
            tracing::debug!(index = name, read, written, "index build");
            if let Some(b) = self.builds.lock().get_mut(name).filter(|b| b.id == id) {
                b.rows_read = read;
                b.entries_written = written;
            }
            let mut last = last_report.lock();
            if last.elapsed() >= BUILD_REPORT_EVERY {
                *last = std::time::Instant::now();
                report(format!(
                    "building index \"{name}\": {read} rows of \"{table}\" read, {written} entries written"
                ));
            }
        };
        let retry = RetryPolicy::default();
        let global = spec.global;
        let backfilled = if global {
            self.build_global(&def, at, &retry, &progress).await
        } else {
            index::backfill(&self.store, &def, at, &retry, &progress).await
        };
        // Index-only reads trust INCLUDE values without reading the row, so
        // an entry the build wrote from a row read just before another
        // write changed it must not stay: with this gateway's writes held,
        // every partition's entries are checked against its rows and fixed.
        let backfilled = match backfilled {
            Ok(written) if !global && !def.indexes[at].include.is_empty() => {
                let _held = self.catalog.hold_writes().await;
                let now = self.catalog.table(&def.name)?;
                index::verify(&self.store, &now, true, &retry, &|_| {})
                    .await
                    .map(|_| written)
            }
            other => other,
        };
        let built = match backfilled {
            Ok(written) => self
                .catalog
                .index_ready(name, def.indexes[at].id)
                .await
                .map(|()| written)
                .map_err(Into::into),
            Err(e) => Err(e),
        };
        match built {
            Ok(written) if global => Ok(DdlOutcome {
                tag: "CREATE INDEX",
                notice: Some(format!(
                    "global index \"{name}\" built: {written} rows indexed. Every write to \"{table}\" now adds one queue entry to its entity-group transaction; this gateway applies it to the index table after the write returns, and lookups wait for the changes acknowledged before they began (see tablegate.indexes for the lag).",
                )),
            }),
            Ok(written) => Ok(DdlOutcome {
                tag: "CREATE INDEX",
                notice: Some(format!(
                    "index \"{name}\" built: {written} entries. Every insert into \"{table}\" now writes {} operations to its entity-group transaction (the row and one entry per index), an update that changes an indexed value up to {}: one transaction holds at most {} such rows.",
                    index::ops_per_row(&def, false),
                    index::ops_per_row(&def, true),
                    index::rows_per_group(&def, true),
                )),
            }),
            Err(e) => {
                // Undone: the definition first (so writes stop adding
                // entries), then what was built.
                if self
                    .catalog
                    .drop_index(name, Some(def.indexes[at].id))
                    .await
                    .is_ok()
                {
                    self.settle_writes().await;
                    if let Err(d) = self.drop_index_data(&def, &def.indexes[at]).await {
                        tracing::warn!(index = name, error = %d, "entries of a failed index build left behind; `tablegate index verify` finds them");
                    }
                }
                Err(match e {
                    PlanError::UniqueViolation { index, key, .. } => {
                        PlanError::UniqueIndexBuild { index, key }
                    }
                    e => e,
                })
            }
        }
    }

    /// A global index's build: its table created, every row queued, then
    /// the maintainer's work waited for. Returns the rows indexed.
    async fn build_global(
        &self,
        def: &TableDef,
        at: usize,
        retry: &RetryPolicy,
        progress: &(dyn Fn(u64, u64) + Send + Sync),
    ) -> Result<u64> {
        let ix = &def.indexes[at];
        let hidden = ix.global_table(&def.name);
        match self.store.create_table(&hidden).await {
            Ok(_) => {}
            // Left by a build that did not finish: start clean.
            Err(tablegate_store::StoreError::TableExists { .. }) => {
                self.store.drop_table(&hidden).await?;
                self.store.create_table(&hidden).await?;
            }
            Err(e) => return Err(e.into()),
        }
        let queued = global::enqueue_all(&self.store, &self.catalog, def, ix, retry, &|read| {
            progress(read, 0)
        })
        .await?;
        let applied_before = self.maintainer.lag(&def.name).applied;
        while !self
            .maintainer
            .caught_up(&def.name, std::time::Duration::from_millis(500))
            .await
        {
            let done = self.maintainer.lag(&def.name).applied - applied_before;
            progress(queued, done.min(queued));
        }
        progress(queued, queued);
        Ok(queued)
    }

    /// The maintainer of this gateway's global indexes.
    pub fn maintainer(&self) -> &global::Maintainer {
        &self.maintainer
    }

    /// Waits until no write that read a table's definition before the
    /// last index change is still under way: on this gateway, and over a
    /// shared catalog on the others too (they re-read definitions every
    /// [`REFRESH_EVERY`]).
    async fn settle_writes(&self) {
        if self.catalog.is_shared() {
            tokio::time::sleep(2 * REFRESH_EVERY).await;
        }
        self.catalog.drain_writes().await;
    }

    /// Binds and starts a SELECT on the native path.
    pub fn execute(
        &self,
        select: &Arc<SelectPlan>,
        params: &[Option<Value>],
        opts: &ExecOptions,
    ) -> Result<RowStream> {
        exec::execute_indexed(
            &self.store,
            Some(&self.maintainer),
            select.bind(params)?,
            opts,
        )
    }

    /// `EXPLAIN (KEYS (pk [, rk])) SELECT …`: the SELECT bound against
    /// its table keyed that way, in a catalog that lives only for this plan.
    fn plan_what_if(
        &self,
        statement: &Statement,
        sql: &str,
        keys: &[String],
        analyze: bool,
        json: bool,
    ) -> Result<Plan> {
        let unsupported = |hint: &str| PlanError::Unsupported {
            feature: "this form of EXPLAIN (KEYS …)".into(),
            hint: hint.into(),
        };
        let Statement::Query(q) = statement else {
            return Err(unsupported("a what-if plan is for a SELECT"));
        };
        if analyze {
            return Err(PlanError::Unsupported {
                feature: "EXPLAIN (ANALYZE, KEYS …)".into(),
                hint: "the table is not keyed that way, so the query cannot run as planned: EXPLAIN (KEYS …) estimates it; EXPLAIN ANALYZE without KEYS measures the real design".into(),
            });
        }
        let real = self.catalog.table(&whatif::single_table(q)?)?;
        let def = real.rekeyed(keys)?;
        let shadow = self.catalog.what_if(def);
        match plan::plan_query(&shadow, q, sql)? {
            plan::Routed::Bound(s) if s.route == Route::Native => {
                Ok(Plan::Explain(Arc::new(ExplainPlan {
                    analyze,
                    json,
                    select: Arc::new(s),
                    write: None,
                    what_if: Some(real),
                })))
            }
            routed => Err(PlanError::Unsupported {
                feature: format!(
                    "EXPLAIN (KEYS …) of a query for the analytics engine ({})",
                    engine_reason(routed)
                ),
                hint: "a what-if plan estimates the store access of a SELECT the gateway runs natively; EXPLAIN its WHERE clause alone".into(),
            }),
        }
    }

    /// An EXPLAIN plan: with KEYS (…), the plan under hypothetical keys, estimated on a
    /// model of the table's data ([`whatif::KeyModel`]).
    pub async fn explain_plan(
        &self,
        e: &ExplainPlan,
        params: &[Option<Value>],
        opts: &ExecOptions,
    ) -> Result<Vec<String>> {
        let Some(real) = &e.what_if else {
            return self
                .explain(&e.select, params, e.analyze, e.json, e.write, opts)
                .await;
        };
        let bound = e.select.bind(params)?;
        let sample = whatif::sample(&self.store, &real.name, whatif::SAMPLE).await?;
        let ranges = self.store.layout(&real.name)?.len();
        let servers = self.store.partitioned().map_or(1, |p| p.config().servers);
        let (real, def, page) = (real.clone(), e.select.table.clone(), opts.page_size);
        let b = bound.clone();
        let (model, est) = tokio::task::spawn_blocking(move || {
            let model = whatif::KeyModel::build(&real, def, &sample, ranges, servers);
            let est = model.estimate(&b, page);
            (model, est)
        })
        .await
        .map_err(|e| PlanError::Store(tablegate_store::StoreError::Engine(e.to_string())))?;
        Ok(if e.json {
            let mut doc = explain::render_json(&bound, &est, None, explain::IndexUse::Ignored);
            let (partitions, largest) = model.partitions();
            let what_if = serde_json::json!({
                "Partition Key": model.def.partition_key,
                "Row Key": model.def.row_key,
                "Entities": model.total,
                "Sampled": model.sampled(),
                "Partition Keys": partitions,
                "Largest Partition": largest,
                "Range Partitions": model.range_partitions(),
                "Warnings": model.warnings(),
            });
            // Beside "Plan", as PostgreSQL puts "Planning Time".
            if let Some(top) = doc.get_mut(0).and_then(|d| d.as_object_mut()) {
                top.insert("What If".into(), what_if);
            }
            vec![serde_json::to_string_pretty(&doc).unwrap_or_default()]
        } else {
            let mut lines = model.describe();
            lines.extend(explain::render_text(
                &bound,
                &est,
                None,
                explain::IndexUse::Ignored,
            ));
            lines
        })
    }

    /// EXPLAIN [ANALYZE]: the plan as text lines or one JSON document.
    /// `write` names the write (`Update`, `Delete`) whose scan this is.
    pub async fn explain(
        &self,
        select: &Arc<SelectPlan>,
        params: &[Option<Value>],
        analyze: bool,
        json: bool,
        write: Option<&str>,
        opts: &ExecOptions,
    ) -> Result<Vec<String>> {
        let bound = select.bind(params)?;
        let mut est = {
            let (store, b, page) = (self.store.clone(), bound.clone(), opts.page_size);
            tokio::task::spawn_blocking(move || explain::estimate(&store, &b, page))
                .await
                .map_err(|e| {
                    PlanError::Store(tablegate_store::StoreError::Engine(e.to_string()))
                })??
        };
        if write.is_some() {
            est.index = est.index.map(explain::IndexCost::with_row_lookups);
        }
        let actual = if analyze {
            let (_, actuals) =
                exec::execute_indexed(&self.store, Some(&self.maintainer), bound.clone(), opts)?
                    .collect()
                    .await?;
            Some(actuals)
        } else {
            None
        };
        let indexes = explain::IndexUse::decide(opts, &bound, &est);
        Ok(if json {
            let scan = explain::render_json(&bound, &est, actual.as_ref(), indexes);
            let doc = match write {
                None => scan,
                Some(op) => serde_json::json!({
                    "Node Type": "ModifyTable",
                    "Operation": op,
                    "Relation Name": select.table.name,
                    "Writes": "each matched entity with If-Match of the ETag it was read with, one entity-group transaction per PartitionKey (at most 100 operations)",
                    "Index Write Cost": index::write_cost(&select.table),
                    "Plans": [scan],
                }),
            };
            vec![serde_json::to_string_pretty(&doc).unwrap_or_default()]
        } else {
            let lines = explain::render_text(&bound, &est, actual.as_ref(), indexes);
            match write {
                None => lines,
                Some(op) => {
                    let mut out = vec![
                        format!("{op} on {}", select.table.name),
                        "  Writes: each matched entity with If-Match of its ETag; one entity-group transaction per PartitionKey (at most 100 operations)".to_owned(),
                    ];
                    out.extend(index::write_cost(&select.table).map(|w| format!("  {w}")));
                    for (i, l) in lines.into_iter().enumerate() {
                        out.push(if i == 0 {
                            format!("  ->  {l}")
                        } else {
                            format!("      {l}")
                        });
                    }
                    out
                }
            }
        })
    }
}

pub use budget::{MAX_DEPTH, MAX_NODES, MAX_PARAMETER, MAX_STATEMENT_BYTES};

/// A sqlparser error as the planner's: a syntax error with its position,
/// or nesting beyond the parser's recursion limit (54001).
fn syntax_error(sql: &str, e: sqlparser::parser::ParserError) -> PlanError {
    if matches!(e, sqlparser::parser::ParserError::RecursionLimitExceeded) {
        return PlanError::TooComplex {
            message: "statement nests parentheses, subqueries or prefix operators too deeply"
                .into(),
            too_long: false,
        };
    }
    let message = e.to_string();
    let position = parse_position(sql, &message);
    let message = message
        .trim_start_matches("sql parser error: ")
        .split(" at Line: ")
        .next()
        .unwrap_or_default()
        .to_owned();
    PlanError::Syntax { message, position }
}

/// The 1-based character position in `sql` of a sqlparser error message's
/// `Line: l, Column: c`.
fn parse_position(sql: &str, message: &str) -> Option<usize> {
    let rest = message.split("Line: ").nth(1)?;
    let mut it = rest.split(", Column: ");
    let line: u64 = it.next()?.trim().parse().ok()?;
    let column: u64 = it
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()?;
    expr::char_position(sql, sqlparser::tokenizer::Location { line, column })
}

/// The columns of an EXPLAIN's `KEYS (pk [, rk])` option (what-if
/// planning), `None` without it.
pub fn explain_keys(stmt: &Statement) -> Result<Option<Vec<String>>> {
    let Statement::Explain { options, .. } = stmt else {
        return Ok(None);
    };
    let Some(o) = options
        .iter()
        .flatten()
        .find(|o| o.name.value.eq_ignore_ascii_case("keys"))
    else {
        return Ok(None);
    };
    let column = |e: &ast::Expr| match e {
        ast::Expr::Identifier(i) => Some(expr::fold(i)),
        ast::Expr::Nested(inner) => match &**inner {
            ast::Expr::Identifier(i) => Some(expr::fold(i)),
            _ => None,
        },
        _ => None,
    };
    let keys: Option<Vec<String>> = match &o.arg {
        Some(ast::Expr::Tuple(items)) => items.iter().map(column).collect(),
        Some(e) => column(e).map(|c| vec![c]),
        None => None,
    };
    match keys {
        Some(k) if (1..=2).contains(&k.len()) => Ok(Some(k)),
        _ => Err(PlanError::Syntax {
            message: format!(
                "EXPLAIN option KEYS takes one or two column names, not {}",
                o.arg
                    .as_ref()
                    .map_or("nothing".to_owned(), |a| a.to_string())
            ),
            position: None,
        }),
    }
}

/// An EXPLAIN's `ANALYZE` and `FORMAT JSON` flags, from either syntax
/// (`EXPLAIN ANALYZE ...` or `EXPLAIN (ANALYZE, FORMAT JSON) ...`); false
/// for any other statement.
pub fn explain_flags(stmt: &Statement) -> Result<(bool, bool)> {
    let Statement::Explain {
        analyze,
        format,
        options,
        ..
    } = stmt
    else {
        return Ok((false, false));
    };
    let mut analyze = *analyze;
    let mut json = matches!(
        format,
        Some(ast::AnalyzeFormatKind::Keyword(ast::AnalyzeFormat::JSON))
            | Some(ast::AnalyzeFormatKind::Assignment(ast::AnalyzeFormat::JSON))
    );
    for o in options.iter().flatten() {
        let name = o.name.value.to_ascii_lowercase();
        let arg = o.arg.as_ref().map(|a| a.to_string().to_ascii_lowercase());
        match (name.as_str(), arg.as_deref()) {
            ("analyze", None | Some("true" | "on" | "1")) => analyze = true,
            ("analyze", Some(_)) => analyze = false,
            ("format", Some("json")) => json = true,
            ("format", Some("text")) => json = false,
            ("format", Some(f)) => {
                return Err(PlanError::Unsupported {
                    feature: format!("EXPLAIN format {f}"),
                    hint: "use FORMAT TEXT or FORMAT JSON".into(),
                });
            }
            _ => {}
        }
    }
    Ok((analyze, json))
}
