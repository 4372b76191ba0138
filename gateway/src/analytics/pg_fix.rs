//! Corrections to datafusion-pg-catalog's `pg_catalog` that only the
//! store's catalog can make. The crate derives `pg_attribute` from Arrow
//! types, and a uuid column is Arrow `FixedSizeBinary(16)`, which it reports
//! as bytea: psql's `\d`, JDBC `getColumns` and SQLAlchemy reflection then
//! show the wrong type. [`PgCatalogFix`] wraps the crate's schema and hands
//! out a `pg_attribute` whose uuid columns say uuid (OID 2950, length 16).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, AsArray, Int16Array, Int32Array, RecordBatch};
use datafusion::arrow::datatypes::{Int32Type, SchemaRef};
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::{DataFusionError, Result};
use datafusion::datasource::{MemTable, TableType};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::{ExecutionPlan, collect};
use tablegate_catalog::SqlType;
use tablegate_planner::Planner;

/// PostgreSQL's uuid type.
const UUID_OID: i32 = 2950;
/// What the crate reports for a uuid column.
const BYTEA_OID: i32 = 17;

/// The `pg_catalog` schema, with `pg_attribute` corrected.
#[derive(Debug)]
pub struct PgCatalogFix {
    inner: Arc<dyn SchemaProvider>,
    planner: Planner,
}

impl PgCatalogFix {
    /// Wraps the crate's `pg_catalog` schema.
    pub fn new(inner: Arc<dyn SchemaProvider>, planner: Planner) -> Self {
        PgCatalogFix { inner, planner }
    }
}

#[async_trait]
impl SchemaProvider for PgCatalogFix {
    fn table_names(&self) -> Vec<String> {
        self.inner.table_names()
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let table = self.inner.table(name).await?;
        match (name, table) {
            ("pg_attribute", Some(attributes)) => {
                let classes = self.inner.table("pg_class").await?.ok_or_else(|| {
                    DataFusionError::Internal("pg_catalog has no pg_class".into())
                })?;
                Ok(Some(Arc::new(Attributes {
                    attributes,
                    classes,
                    planner: self.planner.clone(),
                })))
            }
            (_, table) => Ok(table),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        self.inner.table_exist(name)
    }
}

/// `pg_attribute` with the store's uuid columns typed uuid.
#[derive(Debug)]
struct Attributes {
    attributes: Arc<dyn TableProvider>,
    classes: Arc<dyn TableProvider>,
    planner: Planner,
}

impl Attributes {
    /// The crate's rows, uuid columns corrected.
    async fn rows(&self, state: &dyn Session) -> Result<Vec<RecordBatch>> {
        let all = |t: &Arc<dyn TableProvider>| {
            let t = t.clone();
            async move {
                let plan: Arc<dyn ExecutionPlan> = t.scan(state, None, &[], None).await?;
                collect(plan, state.task_ctx()).await
            }
        };
        let uuid_columns: HashSet<(String, String)> = self
            .planner
            .catalog()
            .tables()
            .iter()
            .flat_map(|t| {
                t.columns
                    .iter()
                    .filter(|c| c.ty == SqlType::Uuid)
                    .map(|c| (t.name.clone(), c.name.clone()))
            })
            .collect();
        let batches = all(&self.attributes).await?;
        if uuid_columns.is_empty() {
            return Ok(batches);
        }
        let mut relname: HashMap<i32, String> = HashMap::new();
        for b in all(&self.classes).await? {
            let (Some(oid), Some(name)) = (b.column_by_name("oid"), b.column_by_name("relname"))
            else {
                continue;
            };
            let (oid, name) = (oid.as_primitive::<Int32Type>(), name.as_string::<i32>());
            for i in 0..b.num_rows() {
                relname.insert(oid.value(i), name.value(i).to_owned());
            }
        }
        batches
            .into_iter()
            .map(|b| fix_uuid_columns(b, &relname, &uuid_columns))
            .collect()
    }
}

fn fix_uuid_columns(
    b: RecordBatch,
    relname: &HashMap<i32, String>,
    uuid_columns: &HashSet<(String, String)>,
) -> Result<RecordBatch> {
    let schema = b.schema();
    let index = |name: &str| {
        schema
            .index_of(name)
            .map_err(|e| DataFusionError::ArrowError(Box::new(e), None))
    };
    let (rel, att, typ, len) = (
        index("attrelid")?,
        index("attname")?,
        index("atttypid")?,
        index("attlen")?,
    );
    let rels = b.column(rel).as_primitive::<Int32Type>();
    let names = b.column(att).as_string::<i32>();
    let types = b.column(typ).as_primitive::<Int32Type>();
    let lens = b
        .column(len)
        .as_primitive::<datafusion::arrow::datatypes::Int16Type>();
    let is_uuid = |i: usize| {
        types.value(i) == BYTEA_OID
            && relname
                .get(&rels.value(i))
                .is_some_and(|t| uuid_columns.contains(&(t.clone(), names.value(i).to_owned())))
    };
    let mut fixed_types = Vec::with_capacity(b.num_rows());
    let mut fixed_lens = Vec::with_capacity(b.num_rows());
    for i in 0..b.num_rows() {
        let uuid = is_uuid(i);
        fixed_types.push((!types.is_null(i)).then(|| if uuid { UUID_OID } else { types.value(i) }));
        fixed_lens.push((!lens.is_null(i)).then(|| if uuid { 16 } else { lens.value(i) }));
    }
    let mut columns = b.columns().to_vec();
    columns[typ] = Arc::new(Int32Array::from(fixed_types));
    columns[len] = Arc::new(Int16Array::from(fixed_lens));
    Ok(RecordBatch::try_new(schema, columns)?)
}

#[async_trait]
impl TableProvider for Attributes {
    fn schema(&self) -> SchemaRef {
        self.attributes.schema()
    }

    fn table_type(&self) -> TableType {
        self.attributes.table_type()
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let rows = self.rows(state).await?;
        MemTable::try_new(self.schema(), vec![rows])?
            .scan(state, projection, filters, limit)
            .await
    }
}
