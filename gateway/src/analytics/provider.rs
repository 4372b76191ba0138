//! The store as DataFusion tables: a schema provider over the catalog, a
//! `TableProvider` per table, and the scan node that reads the store.
//!
//! **Pushdown.** DataFusion offers each WHERE conjunct to
//! [`StoreTable::supports_filters_pushdown`]; a conjunct that converts to the
//! planner's bound expression and that the store evaluates exactly (key
//! spans, residual filters) is `Exact`, everything else `Unsupported` (then
//! DataFusion filters above the scan). [`StoreTable::scan`] hands the pushed
//! conjuncts to the same classifier as the native path
//! ([`tablegate_planner::keys::Access`]), so a DataFusion query gets the
//! same key spans, residual filter and estimates.
//!
//! **Parallelism.** The scan has one DataFusion partition per partition
//! server its key spans touch; each partition runs the native scan of its
//! servers' segments (throttling and retries as on the native path).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::{DataFusionError, ScalarValue};
use datafusion::datasource::TableType;
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, Operator, TableProviderFilterPushDown};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties,
    SendableRecordBatchStream,
};
use parking_lot::Mutex;
use tablegate_catalog::types::MICROS_PER_DAY;
use tablegate_catalog::{ColumnRef, SqlType, TableDef};
use tablegate_planner::expr::{BExpr, Count, flip};
use tablegate_planner::keys::render_spans;
use tablegate_planner::plan::{OutputColumn, Route};
use tablegate_planner::{Actuals, BoundSelect, Estimate, ExecOptions, Planner, SelectPlan};
use tablegate_store::{CmpOp, Value};

/// The session options a scan runs with (the statement's settings, and the
/// open transaction's overlay), shared by the engine and its tables.
pub type SharedOptions = Arc<Mutex<ExecOptions>>;

/// The `public` schema: every catalog table, as of now.
#[derive(Debug)]
pub struct StoreSchema {
    planner: Planner,
    opts: SharedOptions,
}

impl StoreSchema {
    /// A schema over `planner`'s catalog.
    pub fn new(planner: Planner, opts: SharedOptions) -> Self {
        StoreSchema { planner, opts }
    }
}

#[async_trait]
impl SchemaProvider for StoreSchema {
    fn table_names(&self) -> Vec<String> {
        self.planner
            .catalog()
            .tables()
            .iter()
            .map(|t| t.name.clone())
            .collect()
    }

    async fn table(
        &self,
        name: &str,
    ) -> datafusion::common::Result<Option<Arc<dyn TableProvider>>> {
        Ok(self.planner.catalog().table(name).ok().map(|def| {
            Arc::new(StoreTable {
                schema: TableDef::arrow_schema(&def.star()),
                def,
                planner: self.planner.clone(),
                opts: self.opts.clone(),
            }) as Arc<dyn TableProvider>
        }))
    }

    fn table_exist(&self, name: &str) -> bool {
        self.planner.catalog().table(name).is_ok()
    }
}

/// One store table for DataFusion.
#[derive(Debug)]
pub struct StoreTable {
    def: Arc<TableDef>,
    schema: SchemaRef,
    planner: Planner,
    opts: SharedOptions,
}

/// Converts a DataFusion literal to a value of the column's type, when it
/// is one exactly (no lossy conversions: those stay with DataFusion).
fn literal(v: &ScalarValue, ty: SqlType) -> Option<Value> {
    Some(match (v, ty) {
        (
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)),
            SqlType::Text,
        ) => Value::String(s.clone()),
        (ScalarValue::Int8(Some(i)), SqlType::Int2 | SqlType::Int4) => Value::Int32((*i).into()),
        (ScalarValue::Int16(Some(i)), SqlType::Int2 | SqlType::Int4) => Value::Int32((*i).into()),
        (ScalarValue::Int32(Some(i)), SqlType::Int2) => {
            Value::Int32(i16::try_from(*i).ok()?.into())
        }
        (ScalarValue::Int64(Some(i)), SqlType::Int2) => {
            Value::Int32(i16::try_from(*i).ok()?.into())
        }
        (ScalarValue::Int32(Some(i)), SqlType::Int4) => Value::Int32(*i),
        (ScalarValue::Int64(Some(i)), SqlType::Int4) => Value::Int32(i32::try_from(*i).ok()?),
        (ScalarValue::Int32(Some(i)), SqlType::Int8) => Value::Int64((*i).into()),
        (ScalarValue::Int64(Some(i)), SqlType::Int8) => Value::Int64(*i),
        (ScalarValue::Float64(Some(f)), SqlType::Float8) => Value::Double(*f),
        (ScalarValue::Boolean(Some(b)), SqlType::Bool) => Value::Boolean(*b),
        (
            ScalarValue::TimestampMicrosecond(Some(t), _),
            SqlType::Timestamptz | SqlType::Timestamp,
        ) => Value::DateTime(tablegate_store::DateTime(*t)),
        (
            ScalarValue::TimestampNanosecond(Some(t), _),
            SqlType::Timestamptz | SqlType::Timestamp,
        ) if t % 1000 == 0 => Value::DateTime(tablegate_store::DateTime(t / 1000)),
        (ScalarValue::Date32(Some(d)), SqlType::Date) => {
            Value::DateTime(tablegate_store::DateTime(i64::from(*d) * MICROS_PER_DAY))
        }
        (ScalarValue::FixedSizeBinary(16, Some(b)), SqlType::Uuid) => {
            Value::Guid(b.as_slice().try_into().ok()?)
        }
        (ScalarValue::Binary(Some(b)), SqlType::Bytea) => Value::Binary(b.clone()),
        _ => return None,
    })
}

fn cmp_op(op: Operator) -> Option<CmpOp> {
    Some(match op {
        Operator::Eq => CmpOp::Eq,
        Operator::NotEq => CmpOp::Ne,
        Operator::Lt => CmpOp::Lt,
        Operator::LtEq => CmpOp::Le,
        Operator::Gt => CmpOp::Gt,
        Operator::GtEq => CmpOp::Ge,
        _ => return None,
    })
}

impl StoreTable {
    fn column(&self, e: &Expr) -> Option<ColumnRef> {
        match e {
            Expr::Column(c) => self.def.resolve(&c.name).ok(),
            _ => None,
        }
    }

    /// A DataFusion predicate as the planner's bound expression, when it
    /// is one the store evaluates with SQL semantics.
    fn to_bexpr(&self, e: &Expr) -> Option<BExpr> {
        Some(match e {
            Expr::BinaryExpr(b) if b.op == Operator::And || b.op == Operator::Or => {
                let (l, r) = (self.to_bexpr(&b.left)?, self.to_bexpr(&b.right)?);
                if b.op == Operator::And {
                    BExpr::And(vec![l, r])
                } else {
                    BExpr::Or(vec![l, r])
                }
            }
            Expr::BinaryExpr(b) => {
                let op = cmp_op(b.op)?;
                let (col, lit, op) = match (
                    self.column(&b.left),
                    &*b.right,
                    self.column(&b.right),
                    &*b.left,
                ) {
                    (Some(c), Expr::Literal(v, _), _, _) => (c, v, op),
                    (_, _, Some(c), Expr::Literal(v, _)) => (c, v, flip(op)),
                    _ => return None,
                };
                let v = literal(lit, col.ty)?;
                BExpr::Cmp(Box::new(BExpr::Column(col)), op, Box::new(BExpr::Lit(v)))
            }
            Expr::Not(x) => BExpr::Not(Box::new(self.to_bexpr(x)?)),
            Expr::IsNull(x) | Expr::IsNotNull(x) => BExpr::IsNull {
                expr: Box::new(BExpr::Column(self.column(x)?)),
                negated: matches!(e, Expr::IsNotNull(_)),
            },
            Expr::InList(l) => {
                let col = self.column(&l.expr)?;
                let list = l
                    .list
                    .iter()
                    .map(|x| match x {
                        Expr::Literal(v, _) => literal(v, col.ty).map(BExpr::Lit),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()?;
                BExpr::InList {
                    expr: Box::new(BExpr::Column(col)),
                    list,
                    negated: l.negated,
                }
            }
            Expr::Between(b) => {
                let col = self.column(&b.expr)?;
                let bound = |x: &Expr| match x {
                    Expr::Literal(v, _) => literal(v, col.ty).map(|v| Box::new(BExpr::Lit(v))),
                    _ => None,
                };
                BExpr::Between {
                    low: bound(&b.low)?,
                    high: bound(&b.high)?,
                    expr: Box::new(BExpr::Column(col)),
                    negated: b.negated,
                }
            }
            Expr::Like(l) => {
                let col = self.column(&l.expr)?;
                let pattern = match &*l.pattern {
                    Expr::Literal(v, _) if col.ty == SqlType::Text => literal(v, SqlType::Text)?,
                    _ => return None,
                };
                BExpr::Like {
                    expr: Box::new(BExpr::Column(col)),
                    pattern: Box::new(BExpr::Lit(pattern)),
                    escape: l.escape_char.or(Some('\\')),
                    negated: l.negated,
                    case_insensitive: l.case_insensitive,
                }
            }
            Expr::Column(_) => {
                let col = self.column(e)?;
                if col.ty != SqlType::Bool {
                    return None;
                }
                BExpr::Cmp(
                    Box::new(BExpr::Column(col)),
                    CmpOp::Eq,
                    Box::new(BExpr::Lit(Value::Boolean(true))),
                )
            }
            Expr::Literal(ScalarValue::Boolean(Some(b)), _) => BExpr::Bool(*b),
            _ => return None,
        })
    }

    /// True when the store evaluates `e` exactly.
    fn exact(&self, e: &Expr) -> bool {
        self.to_bexpr(e).is_some_and(|b| {
            !tablegate_planner::Access::from_where(Some(&b), self.def.row_key.is_some())
                .residual_needs_engine
        })
    }
}

#[async_trait]
impl TableProvider for StoreTable {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(
        &self,
        filters: &[&Expr],
    ) -> datafusion::common::Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                if self.exact(f) {
                    TableProviderFilterPushDown::Exact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        let star = self.def.star();
        let cols: Vec<ColumnRef> = match projection {
            Some(p) => p.iter().map(|i| star[*i].clone()).collect(),
            None => star,
        };
        let predicates: Vec<BExpr> = filters.iter().filter_map(|f| self.to_bexpr(f)).collect();
        let plan = Arc::new(SelectPlan {
            table: self.def.clone(),
            columns: cols
                .iter()
                .map(|c| OutputColumn {
                    name: c.name.clone(),
                    column: c.clone(),
                })
                .collect(),
            predicate: match predicates.len() {
                0 => None,
                1 => predicates.into_iter().next(),
                _ => Some(BExpr::And(predicates)),
            },
            limit: limit.map_or(Count::All, |l| Count::Value(l as u64)),
            offset: Count::All,
            param_types: Vec::new(),
            route: Route::Native,
            ordered: false,
            schema: Default::default(),
        });
        let bound = plan
            .bind(&[])
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let opts = self.opts.lock().clone();
        let target = state.config().target_partitions();
        let parts = partitions(self.planner.store(), &bound, target);
        let schema = plan.result_schema();
        Ok(Arc::new(StoreScanExec::new(
            self.planner.clone(),
            bound,
            parts,
            opts,
            schema,
        )))
    }
}

/// The access cut into one part per partition server its spans touch, and
/// large parts cut further up to `target` parts (DataFusion's partitions).
fn partitions(
    store: &tablegate_store::Backend,
    b: &BoundSelect,
    target: usize,
) -> Vec<BoundSelect> {
    use tablegate_planner::AccessClass;
    if matches!(
        b.access.class,
        AccessClass::Point | AccessClass::Empty | AccessClass::RowRange
    ) {
        return vec![b.clone()];
    }
    let query = tablegate_store::Query::spans(b.access.spans.clone());
    // A remote service's range partitions are its own: nothing to cut by.
    let Some(Ok(segments)) = store
        .partitioned()
        .map(|p| p.segments(&b.plan.table.name, &query))
    else {
        return vec![b.clone()];
    };
    let mut by_server: BTreeMap<usize, Vec<tablegate_store::KeyBox>> = BTreeMap::new();
    for s in segments {
        by_server.entry(s.server).or_default().extend(s.query.spans);
    }
    // Fewer servers than cores (a bulk-loaded table is one range until
    // load splits it): cut each server's share by partition counts, so a
    // large scan decodes on every core.
    let mut groups: Vec<Vec<tablegate_store::KeyBox>> = by_server.into_values().collect();
    if groups.len() < target
        && let Some(p) = store.partitioned()
    {
        let per_group = target.div_ceil(groups.len());
        groups = groups
            .into_iter()
            .flat_map(|spans| {
                p.split_by_counts(&b.plan.table.name, &spans, per_group, MIN_SPLIT_ENTITIES)
                    .unwrap_or_else(|_| vec![spans])
            })
            .collect();
    }
    if groups.len() <= 1 {
        return vec![b.clone()];
    }
    groups
        .into_iter()
        .map(|spans| {
            let mut part = b.clone();
            part.access.spans = spans;
            part
        })
        .collect()
}

/// Entities below which a server's share of a scan is not cut further:
/// small scans gain nothing from more partitions.
const MIN_SPLIT_ENTITIES: u64 = 50_000;

/// Reads the store for DataFusion: one partition per partition server.
#[derive(Debug)]
pub struct StoreScanExec {
    planner: Planner,
    bound: BoundSelect,
    parts: Vec<BoundSelect>,
    opts: ExecOptions,
    schema: SchemaRef,
    /// Made only when the plan is displayed (EXPLAIN): its probes are not
    /// work every analytics query should pay for.
    estimate: std::sync::OnceLock<Estimate>,
    /// What each partition's scan did (for EXPLAIN ANALYZE).
    actuals: Arc<Mutex<Vec<Actuals>>>,
    props: Arc<PlanProperties>,
}

impl StoreScanExec {
    fn new(
        planner: Planner,
        bound: BoundSelect,
        parts: Vec<BoundSelect>,
        opts: ExecOptions,
        schema: SchemaRef,
    ) -> Self {
        let props = Arc::new(PlanProperties::new(
            EquivalenceProperties::new(schema.clone()),
            Partitioning::UnknownPartitioning(parts.len().max(1)),
            EmissionType::Incremental,
            Boundedness::Bounded,
        ));
        StoreScanExec {
            actuals: Arc::new(Mutex::new(vec![Actuals::default(); parts.len()])),
            planner,
            bound,
            parts,
            opts,
            schema,
            estimate: std::sync::OnceLock::new(),
            props,
        }
    }

    /// The scan's estimates, from the store's statistics and bounded probes.
    fn estimate(&self) -> &Estimate {
        self.estimate.get_or_init(|| {
            tablegate_planner::explain::estimate(
                self.planner.store(),
                &self.bound,
                self.opts.page_size,
            )
            .unwrap_or_default()
        })
    }

    /// What every store scan in `plan` did, summed: the entities an
    /// analytics statement read, for the counters and the statement log.
    pub fn scanned_by(plan: &Arc<dyn ExecutionPlan>) -> Actuals {
        let mut sum = match plan.downcast_ref::<StoreScanExec>() {
            Some(scan) => scan.actuals(),
            None => Actuals::default(),
        };
        for child in plan.children() {
            let a = Self::scanned_by(child);
            sum.scanned += a.scanned;
            sum.retries += a.retries;
            sum.backoff += a.backoff;
        }
        sum
    }

    /// What the scan did, summed over its partitions.
    pub fn actuals(&self) -> Actuals {
        let mut sum = Actuals::default();
        for a in self.actuals.lock().iter() {
            sum.scanned += a.scanned;
            sum.returned += a.returned;
            sum.pages += a.pages;
            sum.lookups += a.lookups;
            sum.tokens_followed += a.tokens_followed;
            sum.retries += a.retries;
            sum.backoff += a.backoff;
            sum.servers.extend(a.servers.iter().copied());
            sum.elapsed = sum.elapsed.max(a.elapsed);
            sum.segments += a.segments;
            sum.probes += a.probes;
        }
        sum
    }
}

impl DisplayAs for StoreScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut fmt::Formatter) -> fmt::Result {
        let a = &self.bound.access;
        write!(
            f,
            "StoreScanExec: table={}, class={}, spans=[{}]",
            self.bound.plan.table.name,
            a.class.name(),
            render_spans(&a.spans, &self.bound.plan.table).join(" OR ")
        )?;
        if let Some(r) = &a.residual {
            write!(f, ", residual=[{r}]")?;
        }
        write!(
            f,
            ", partitions={}, est_scanned={}, est_returned={}, est_requests={}",
            self.parts.len(),
            self.estimate().scanned,
            self.estimate().returned,
            self.estimate().requests
        )?;
        if let Some(l) = self.bound.limit {
            write!(f, ", limit={l}")?;
        }
        let act = self.actuals();
        if act.pages > 0 || act.lookups > 0 {
            write!(
                f,
                ", actual_scanned={}, actual_returned={}, pages={}, tokens_followed={}, servers={}, throttled_retries={}, backoff={:?}",
                act.scanned,
                act.returned,
                act.pages,
                act.tokens_followed,
                act.servers.len(),
                act.retries,
                act.backoff
            )?;
        }
        Ok(())
    }
}

impl ExecutionPlan for StoreScanExec {
    fn name(&self) -> &'static str {
        "StoreScanExec"
    }

    fn properties(&self) -> &Arc<PlanProperties> {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        vec![]
    }

    fn apply_expressions(
        &self,
        _f: &mut dyn FnMut(
            &Arc<dyn datafusion::physical_expr::PhysicalExpr>,
        ) -> datafusion::common::Result<
            datafusion::common::tree_node::TreeNodeRecursion,
        >,
    ) -> datafusion::common::Result<datafusion::common::tree_node::TreeNodeRecursion> {
        Ok(datafusion::common::tree_node::TreeNodeRecursion::Continue)
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn ExecutionPlan>>,
    ) -> datafusion::common::Result<Arc<dyn ExecutionPlan>> {
        if children.is_empty() {
            Ok(self)
        } else {
            Err(DataFusionError::Internal(
                "StoreScanExec has no children".into(),
            ))
        }
    }

    fn execute(
        &self,
        partition: usize,
        _ctx: Arc<TaskContext>,
    ) -> datafusion::common::Result<SendableRecordBatchStream> {
        let part = self
            .parts
            .get(partition)
            .ok_or_else(|| DataFusionError::Internal(format!("no partition {partition}")))?;
        let rows = tablegate_planner::exec::execute(self.planner.store(), part.clone(), &self.opts)
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        let actuals = self.actuals.clone();
        let stream = futures::stream::unfold(Some(rows), move |rows| {
            let actuals = actuals.clone();
            async move {
                let mut rows = rows?;
                let next = rows.next().await;
                actuals.lock()[partition] = rows.actuals();
                match next {
                    None => None,
                    Some(Ok(b)) => Some((Ok(b), Some(rows))),
                    Some(Err(e)) => Some((Err(DataFusionError::External(Box::new(e))), None)),
                }
            }
        });
        Ok(Box::pin(RecordBatchStreamAdapter::new(
            self.schema.clone(),
            stream,
        )))
    }
}
