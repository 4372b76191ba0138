//! Corrections to datafusion-pg-catalog's `pg_catalog` that only the
//! store's catalog can make. The crate derives `pg_attribute` from Arrow
//! types, and a uuid column is Arrow `FixedSizeBinary(16)`, which it reports
//! as bytea: psql's `\d`, JDBC `getColumns` and SQLAlchemy reflection then
//! show the wrong type. [`PgCatalogFix`] wraps the crate's schema and hands
//! out a `pg_attribute` whose uuid columns say uuid (OID 2950, length 16),
//! a `pg_constraint` with each table's primary key (the crate's is
//! empty), which SQLAlchemy's and JDBC's primary-key reflection read, and
//! a `pg_index` whose `indkey` is an array, as SQLAlchemy's index
//! reflection unnests it (the crate keeps `int2vector`s as text; so is
//! `pg_statistic_ext.stxkind`, which psql's `\dX` searches), and the
//! empty `pg_user_mappings` the crate lacks. Indexes (in `pg_class`,
//! `pg_index` and `pg_indexes`) are [`super::pg_indexes`]'s.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int16Array, Int32Array, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Field, Int16Type, Int32Type, SchemaRef};
use datafusion::catalog::{SchemaProvider, Session, TableProvider};
use datafusion::common::{DataFusionError, Result, ScalarValue};
use datafusion::datasource::{MemTable, TableType};
use datafusion::logical_expr::Expr;
use datafusion::physical_plan::{ExecutionPlan, collect};
use tablegate_catalog::SqlType;
use tablegate_planner::Planner;

use super::pg_indexes;

/// PostgreSQL's uuid type.
const UUID_OID: i32 = 2950;
/// What the crate reports for a uuid column.
const BYTEA_OID: i32 = 17;

/// The `pg_catalog` schema, with `pg_attribute`, `pg_constraint` and
/// `pg_index` corrected.
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

impl PgCatalogFix {
    async fn table_required(&self, name: &str) -> Result<Arc<dyn TableProvider>> {
        self.table(name)
            .await?
            .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog has no {name}")))
    }

    /// The crate's table, uncorrected (its `pg_class` has the tables
    /// only, not the index rows [`pg_indexes::Classes`] adds).
    async fn crate_table(&self, name: &str) -> Result<Arc<dyn TableProvider>> {
        self.inner
            .table(name)
            .await?
            .ok_or_else(|| DataFusionError::Internal(format!("pg_catalog has no {name}")))
    }
}

#[async_trait]
impl SchemaProvider for PgCatalogFix {
    fn table_names(&self) -> Vec<String> {
        let mut names = self.inner.table_names();
        for extra in ["pg_user_mappings", "pg_indexes"] {
            if !names.iter().any(|n| n == extra) {
                names.push(extra.into());
            }
        }
        names
    }

    async fn table(&self, name: &str) -> Result<Option<Arc<dyn TableProvider>>> {
        let table = self.inner.table(name).await?;
        match (name, table) {
            ("pg_attribute", Some(attributes)) => {
                let classes = self.inner.table("pg_class").await?.ok_or_else(|| {
                    DataFusionError::Internal("pg_catalog has no pg_class".into())
                })?;
                Ok(Some(Arc::new(Catalog(Attributes {
                    attributes,
                    classes,
                    planner: self.planner.clone(),
                }))))
            }
            ("pg_constraint", Some(constraints)) => Ok(Some(Arc::new(Catalog(Constraints {
                schema: with_arrays(
                    &constraints.schema(),
                    &[("conkey", DataType::Int16), ("confkey", DataType::Int16)],
                ),
                classes: self.crate_table("pg_class").await?,
                namespaces: self.crate_table("pg_namespace").await?,
                attributes: self.table_required("pg_attribute").await?,
                planner: self.planner.clone(),
            })))),
            ("pg_class", Some(classes)) => Ok(Some(Arc::new(Catalog(pg_indexes::Classes {
                inner: classes,
                namespaces: self.crate_table("pg_namespace").await?,
                planner: self.planner.clone(),
            })))),
            // indoption stays text: SQLAlchemy splits it as int2vector's
            // text form; indkey it unnests.
            ("pg_index", Some(indexes)) => Ok(Some(Arc::new(Catalog(pg_indexes::Index {
                inner: Arc::new(Catalog(ArrayColumns::new(
                    indexes,
                    vec![("indkey", DataType::Int16)],
                ))),
                classes: self.crate_table("pg_class").await?,
                namespaces: self.crate_table("pg_namespace").await?,
                attributes: self.table_required("pg_attribute").await?,
                planner: self.planner.clone(),
            })))),
            ("pg_indexes", None) => Ok(Some(Arc::new(Catalog(pg_indexes::IndexesView {
                classes: self.crate_table("pg_class").await?,
                namespaces: self.crate_table("pg_namespace").await?,
                planner: self.planner.clone(),
            })))),
            ("pg_statistic_ext", Some(statistics)) => Ok(Some(Arc::new(Catalog(
                ArrayColumns::new(statistics, vec![("stxkind", DataType::Utf8)]),
            )))),
            ("pg_user_mappings", None) => Ok(Some(Arc::new(MemTable::try_new(
                user_mappings(),
                vec![vec![]],
            )?))),
            (_, table) => Ok(table),
        }
    }

    fn table_exist(&self, name: &str) -> bool {
        name == "pg_user_mappings" || name == "pg_indexes" || self.inner.table_exist(name)
    }
}

/// `pg_user_mappings` (psql's `\deu`), which the crate lacks: empty, as
/// there are no foreign servers.
fn user_mappings() -> SchemaRef {
    use datafusion::arrow::datatypes::Schema;
    Arc::new(Schema::new(vec![
        Field::new("srvid", DataType::Int32, true),
        Field::new("srvname", DataType::Utf8, true),
        Field::new("umid", DataType::Int32, true),
        Field::new("umuser", DataType::Int32, true),
        Field::new("usename", DataType::Utf8, true),
        Field::new("umoptions", DataType::Utf8, true),
    ]))
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
    async fn corrected_rows(&self, state: &dyn Session) -> Result<Vec<RecordBatch>> {
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
        let batches = all_rows(&self.attributes, state).await?;
        if uuid_columns.is_empty() {
            return Ok(batches);
        }
        let relname: HashMap<i32, String> = classes(&self.classes, state)
            .await?
            .into_iter()
            .map(|c| (c.oid, c.name))
            .collect();
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
    let lens = b.column(len).as_primitive::<Int16Type>();
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

/// A catalog schema with the named columns as the arrays they are in
/// PostgreSQL (the crate keeps them as text), so that `unnest(conkey)`,
/// `generate_subscripts(indkey, 1)` and `'d' = any(stxkind)` work.
fn with_arrays(schema: &SchemaRef, columns: &[(&str, DataType)]) -> SchemaRef {
    use datafusion::arrow::datatypes::Schema;
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| match columns.iter().find(|(c, _)| c == f.name()) {
            Some((_, item)) => Field::new(f.name(), list_of(item), true),
            None => f.as_ref().clone(),
        })
        .collect();
    Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()))
}

fn list_of(item: &DataType) -> DataType {
    DataType::List(Arc::new(Field::new("item", item.clone(), true)))
}

/// A catalog table whose array columns the crate keeps as text
/// (`int2vector`'s `"1 3"`, `char[]`'s `"{d,f}"`) read as arrays:
/// `pg_index`'s `indkey`, `pg_statistic_ext`'s `stxkind`.
#[derive(Debug)]
struct ArrayColumns {
    inner: Arc<dyn TableProvider>,
    schema: SchemaRef,
    columns: Vec<(&'static str, DataType)>,
}

impl ArrayColumns {
    fn new(inner: Arc<dyn TableProvider>, columns: Vec<(&'static str, DataType)>) -> Self {
        let schema = with_arrays(&inner.schema(), &columns);
        ArrayColumns {
            inner,
            schema,
            columns,
        }
    }

    fn retype(&self, b: RecordBatch) -> Result<RecordBatch> {
        use datafusion::arrow::array::{ListArray, StringArray};
        use datafusion::arrow::buffer::OffsetBuffer;
        let mut columns = b.columns().to_vec();
        for (i, f) in b.schema().fields().iter().enumerate() {
            let Some((_, item)) = self.columns.iter().find(|(c, _)| c == f.name()) else {
                continue;
            };
            if f.data_type() == &list_of(item) {
                continue;
            }
            let text = datafusion::arrow::compute::cast(&columns[i], &DataType::Utf8)?;
            let text = text.as_string::<i32>();
            let mut tokens: Vec<&str> = Vec::new();
            let mut lengths = Vec::with_capacity(text.len());
            for v in text.iter() {
                let before = tokens.len();
                if let Some(v) = v {
                    tokens.extend(
                        v.split(|c: char| c.is_whitespace() || matches!(c, ',' | '{' | '}'))
                            .filter(|t| !t.is_empty()),
                    );
                }
                lengths.push(tokens.len() - before);
            }
            let values: ArrayRef = Arc::new(StringArray::from(tokens));
            let values = datafusion::arrow::compute::cast(&values, item)?;
            columns[i] = Arc::new(ListArray::try_new(
                Arc::new(Field::new("item", item.clone(), true)),
                OffsetBuffer::from_lengths(lengths),
                values,
                text.nulls().cloned(),
            )?);
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

/// Reads every row of a catalog table.
pub(super) async fn all_rows(
    t: &Arc<dyn TableProvider>,
    state: &dyn Session,
) -> Result<Vec<RecordBatch>> {
    let plan: Arc<dyn ExecutionPlan> = t.scan(state, None, &[], None).await?;
    collect(plan, state.task_ctx()).await
}

/// A batch's columns by name, or `None` when one is missing.
pub(super) fn named<'a, const N: usize>(
    b: &'a RecordBatch,
    names: [&str; N],
) -> Option<[&'a ArrayRef; N]> {
    let columns: Vec<&ArrayRef> = names
        .iter()
        .map(|n| b.column_by_name(n))
        .collect::<Option<_>>()?;
    columns.try_into().ok()
}

/// One `pg_class` row: what the crate numbered a relation.
struct Class {
    oid: i32,
    name: String,
}

/// The session's `pg_class` rows. The crate numbers tables as its scan
/// meets them, so oids are only comparable within one session.
async fn classes(classes: &Arc<dyn TableProvider>, state: &dyn Session) -> Result<Vec<Class>> {
    let mut out = Vec::new();
    for b in all_rows(classes, state).await? {
        let Some([oid, name]) = named(&b, ["oid", "relname"]) else {
            continue;
        };
        let (oid, name) = (oid.as_primitive::<Int32Type>(), name.as_string::<i32>());
        out.extend((0..b.num_rows()).map(|i| Class {
            oid: oid.value(i),
            name: name.value(i).to_owned(),
        }));
    }
    Ok(out)
}

/// Each column's number in `pg_attribute`, by table oid and name.
pub(super) async fn attribute_numbers(
    attributes: &Arc<dyn TableProvider>,
    state: &dyn Session,
) -> Result<HashMap<(i32, String), i16>> {
    let mut attnums = HashMap::new();
    for b in all_rows(attributes, state).await? {
        let Some([rel, name, num]) = named(&b, ["attrelid", "attname", "attnum"]) else {
            continue;
        };
        let (rel, name, num) = (
            rel.as_primitive::<Int32Type>(),
            name.as_string::<i32>(),
            num.as_primitive::<Int16Type>(),
        );
        for i in 0..b.num_rows() {
            attnums.insert((rel.value(i), name.value(i).to_owned()), num.value(i));
        }
    }
    Ok(attnums)
}

/// `pg_constraint`: one `p` row per table with a declared primary key,
/// `<table>_pkey` as PostgreSQL names it, its `conkey` the key columns'
/// numbers in `pg_attribute`.
#[derive(Debug)]
struct Constraints {
    schema: SchemaRef,
    classes: Arc<dyn TableProvider>,
    namespaces: Arc<dyn TableProvider>,
    attributes: Arc<dyn TableProvider>,
    planner: Planner,
}

/// One primary key: the table's oid and namespace, its name, and its
/// columns' numbers in key order.
struct PrimaryKey {
    rel: i32,
    namespace: i32,
    name: String,
    columns: Vec<i16>,
}

impl Constraints {
    async fn keys(&self, state: &dyn Session) -> Result<Vec<PrimaryKey>> {
        // The crate numbers tables as its pg_class scan meets them; the
        // same session's pg_class gives the same oids. Only public's
        // tables: information_schema's may share a user table's name.
        let user = pg_indexes::user_tables(&self.classes, &self.namespaces, state).await?;
        let tables: HashMap<String, (i32, i32)> = match user.public {
            Some(ns) => user
                .by_name
                .into_iter()
                .map(|(name, (_, oid))| (name, (oid, ns)))
                .collect(),
            None => HashMap::new(),
        };
        let attnums = attribute_numbers(&self.attributes, state).await?;
        let mut keys = Vec::new();
        for t in self.planner.catalog().tables() {
            let Some(&(rel, namespace)) = tables.get(&t.name) else {
                continue;
            };
            let key: Vec<&str> = std::iter::once(t.partition_key.as_str())
                .chain(t.row_key.as_deref())
                .collect();
            // Hidden keys (a table declared without a primary key) are no
            // constraint the user made.
            let hidden = t
                .columns
                .iter()
                .any(|c| c.hidden && key.contains(&c.name.as_str()));
            let columns: Option<Vec<i16>> = key
                .iter()
                .map(|c| attnums.get(&(rel, (*c).to_owned())).copied())
                .collect();
            if let (false, Some(columns)) = (hidden, columns) {
                keys.push(PrimaryKey {
                    rel,
                    namespace,
                    name: format!("{}_pkey", t.name),
                    columns,
                });
            }
        }
        Ok(keys)
    }

    fn batch(&self, keys: &[PrimaryKey]) -> Result<RecordBatch> {
        use datafusion::common::ScalarValue as S;
        let mut columns = Vec::with_capacity(self.schema.fields().len());
        for f in self.schema.fields() {
            let values = keys
                .iter()
                .map(|k| {
                    let v = match f.name().as_str() {
                        // Above the range the crate hands tables.
                        "oid" => S::Int32(Some(k.rel.saturating_add(1 << 24))),
                        "conname" => S::Utf8(Some(k.name.clone())),
                        "connamespace" => S::Int32(Some(k.namespace)),
                        "contype" => S::Utf8(Some("p".into())),
                        "condeferrable" | "condeferred" => S::Boolean(Some(false)),
                        "convalidated" | "conislocal" | "connoinherit" => S::Boolean(Some(true)),
                        "conrelid" => S::Int32(Some(k.rel)),
                        // The primary key's index (`<table>_pkey`).
                        "conindid" => S::Int32(super::pg_indexes::index_oid(k.rel, 0)),
                        "contypid" | "conparentid" | "confrelid" | "coninhcount" => {
                            S::Int32(Some(0))
                        }
                        "conkey" => S::List(S::new_list_nullable(
                            &k.columns
                                .iter()
                                .map(|n| S::Int16(Some(*n)))
                                .collect::<Vec<_>>(),
                            &DataType::Int16,
                        )),
                        // `' '` as PostgreSQL's non-foreign keys have.
                        "confupdtype" | "confdeltype" | "confmatchtype" => {
                            S::Utf8(Some(" ".into()))
                        }
                        _ if f.is_nullable() => S::try_from(f.data_type())?,
                        _ => S::new_default(f.data_type())?,
                    };
                    v.cast_to(f.data_type())
                })
                .collect::<Result<Vec<_>>>()?;
            columns.push(column(f.data_type(), values)?);
        }
        Ok(RecordBatch::try_new(self.schema.clone(), columns)?)
    }
}

/// A column of a computed catalog table from its values (none: empty).
pub(super) fn column(ty: &DataType, values: Vec<ScalarValue>) -> Result<ArrayRef> {
    Ok(if values.is_empty() {
        datafusion::arrow::array::new_empty_array(ty)
    } else {
        ScalarValue::iter_to_array(values)?
    })
}

#[async_trait]
impl Computed for Attributes {
    fn schema(&self) -> SchemaRef {
        self.attributes.schema()
    }

    async fn rows(&self, state: &dyn Session) -> Result<Vec<RecordBatch>> {
        self.corrected_rows(state).await
    }
}

#[async_trait]
impl Computed for ArrayColumns {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn rows(&self, state: &dyn Session) -> Result<Vec<RecordBatch>> {
        all_rows(&self.inner, state)
            .await?
            .into_iter()
            .map(|b| self.retype(b))
            .collect()
    }
}

#[async_trait]
impl Computed for Constraints {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    async fn rows(&self, state: &dyn Session) -> Result<Vec<RecordBatch>> {
        let keys = self.keys(state).await?;
        Ok(vec![self.batch(&keys)?])
    }
}

/// A catalog table whose rows are computed when it is scanned.
#[async_trait]
pub(super) trait Computed: std::fmt::Debug + Send + Sync + 'static {
    fn schema(&self) -> SchemaRef;
    async fn rows(&self, state: &dyn Session) -> Result<Vec<RecordBatch>>;
}

/// A [`Computed`] table as DataFusion scans it.
#[derive(Debug)]
struct Catalog<T>(T);

#[async_trait]
impl<T: Computed> TableProvider for Catalog<T> {
    fn schema(&self) -> SchemaRef {
        self.0.schema()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    async fn scan(
        &self,
        state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let rows = self.0.rows(state).await?;
        MemTable::try_new(self.schema(), vec![rows])?
            .scan(state, projection, filters, limit)
            .await
    }
}
