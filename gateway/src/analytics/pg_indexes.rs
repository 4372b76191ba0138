//! Indexes in `pg_catalog`, as psql's `\di` and `\d`, SQLAlchemy's and
//! JDBC's index reflection and monitoring queries read them: each table's
//! primary key (its clustered PartitionKey/RowKey index, `<table>_pkey`)
//! and every `CREATE INDEX`, as `pg_class` rows of kind `i`, `pg_index`
//! rows, the `pg_indexes` view and `pg_get_indexdef`.
//!
//! datafusion-pg-catalog numbers tables per session as its `pg_class` scan
//! meets them; an index's oid is derived from its table's
//! ([`index_oid`]), so `pg_get_indexdef(oid)` finds the index again
//! through the same session's numbering.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{
    ArrayRef, AsArray, BooleanArray, Int32Array, RecordBatch, StringArray, UInt32Array,
};
use datafusion::arrow::compute::{concat_batches, take};
use datafusion::arrow::datatypes::{DataType, Field, Int32Type, Schema, SchemaRef};
use datafusion::catalog::{Session, TableProvider};
use datafusion::common::{Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use datafusion::prelude::SessionContext;
use datafusion_pg_catalog::RelationOids;
use tablegate_catalog::TableDef;
use tablegate_planner::Planner;

use super::functions::quote_ident;
use super::pg_fix::{Computed, all_rows, attribute_numbers, column, named};

/// Index oids sit above every oid the crate hands out.
const INDEX_OID_BASE: i64 = 1 << 30;
/// Slots per table: 0 for the primary key, an index's id (never reused,
/// so an oid stays its index's across DROP INDEX) for the rest.
const SLOTS: i64 = 1024;
/// PostgreSQL's btree access method (`pg_am`): the entries are kept in
/// key order, which is what a reader of `relam` needs to know.
const BTREE: i32 = 403;

/// The oid of a table's index: slot 0 is the primary key, slot `id` the
/// index of that id. `None` when the table's oid or the id is too large
/// to fit (an index created after a thousand others on its table is not
/// listed).
pub fn index_oid(table_oid: i32, slot: usize) -> Option<i32> {
    let oid = INDEX_OID_BASE + i64::from(table_oid) * SLOTS + slot as i64;
    i32::try_from(oid).ok().filter(|_| (slot as i64) < SLOTS)
}

/// The oid of the table an index oid belongs to.
fn table_of(oid: i64) -> Option<u32> {
    let rest = oid.checked_sub(INDEX_OID_BASE).filter(|r| *r >= 0)?;
    u32::try_from(rest / SLOTS).ok()
}

/// One index of one table, as pg_catalog shows it.
#[derive(Debug, Clone)]
pub struct IndexRel {
    pub oid: i32,
    pub table_oid: i32,
    pub table: String,
    pub name: String,
    pub columns: Vec<String>,
    pub unique: bool,
    pub primary: bool,
    /// Still being built: `indisvalid` false, as PostgreSQL shows an index
    /// `CREATE INDEX CONCURRENTLY` has not finished.
    pub building: bool,
    /// A global index: shown with its storage parameter, as PostgreSQL
    /// shows an index's reloptions.
    pub global: bool,
    /// INCLUDE columns (non-key attributes, after the key ones).
    pub include: Vec<String>,
}

impl IndexRel {
    /// `CREATE [UNIQUE] INDEX name ON public.table USING btree (cols)`, as
    /// `pg_get_indexdef` and `pg_indexes.indexdef` give it.
    pub fn definition(&self) -> String {
        let columns: Vec<String> = self.columns.iter().map(|c| quote_ident(c)).collect();
        let include: Vec<String> = self.include.iter().map(|c| quote_ident(c)).collect();
        format!(
            "CREATE {}INDEX {} ON public.{} USING btree ({}){}{}",
            if self.unique { "UNIQUE " } else { "" },
            quote_ident(&self.name),
            quote_ident(&self.table),
            columns.join(", "),
            if include.is_empty() {
                String::new()
            } else {
                format!(" INCLUDE ({})", include.join(", "))
            },
            if self.global {
                " WITH (global='true')"
            } else {
                ""
            }
        )
    }
}

/// A table's indexes: the primary key (unless the table was declared
/// without one: its hidden key is no index the user made), then each
/// `CREATE INDEX` in order.
pub fn table_indexes(t: &TableDef, table_oid: i32) -> Vec<IndexRel> {
    let mut out = Vec::new();
    let key: Vec<String> = std::iter::once(t.partition_key.clone())
        .chain(t.row_key.clone())
        .collect();
    let hidden = t.columns.iter().any(|c| c.hidden && key.contains(&c.name));
    if !hidden {
        out.extend(index_oid(table_oid, 0).map(|oid| IndexRel {
            oid,
            table_oid,
            table: t.name.clone(),
            name: format!("{}_pkey", t.name),
            columns: key,
            unique: true,
            primary: true,
            building: false,
            global: false,
            include: Vec::new(),
        }));
    }
    for ix in &t.indexes {
        out.extend(index_oid(table_oid, ix.id as usize).map(|oid| IndexRel {
            oid,
            table_oid,
            table: t.name.clone(),
            name: ix.name.clone(),
            columns: ix.columns.clone(),
            unique: ix.unique,
            primary: false,
            building: ix.building,
            global: ix.global,
            include: ix.include.clone(),
        }));
    }
    out
}

/// The user tables of a `pg_class` scan: name → (row in its batch, oid).
pub(super) struct Tables {
    pub batch: RecordBatch,
    pub by_name: HashMap<String, (usize, i32)>,
    /// The oid of `public`, their namespace.
    pub public: Option<i32>,
}

/// Only `public`'s: `information_schema` and `pg_catalog` hold tables of
/// kind `r` too, whose names a user table may share.
pub(super) async fn user_tables(
    classes: &Arc<dyn TableProvider>,
    namespaces: &Arc<dyn TableProvider>,
    state: &dyn Session,
) -> Result<Tables> {
    let mut public = None;
    for b in all_rows(namespaces, state).await? {
        if let Some([oid, name]) = named(&b, ["oid", "nspname"]) {
            let (oid, name) = (oid.as_primitive::<Int32Type>(), name.as_string::<i32>());
            public = public.or((0..b.num_rows())
                .find(|&i| name.value(i) == "public")
                .map(|i| oid.value(i)));
        }
    }
    let schema = classes.schema();
    let batches = all_rows(classes, state).await?;
    let batch = concat_batches(&schema, &batches)?;
    let mut by_name = HashMap::new();
    if let (Some(public), Some([oid, name, kind, ns])) = (
        public,
        named(&batch, ["oid", "relname", "relkind", "relnamespace"]),
    ) {
        let (oid, name, kind, ns) = (
            oid.as_primitive::<Int32Type>(),
            name.as_string::<i32>(),
            kind.as_string::<i32>(),
            ns.as_primitive::<Int32Type>(),
        );
        for i in 0..batch.num_rows() {
            if kind.value(i) == "r" && ns.value(i) == public {
                by_name.insert(name.value(i).to_owned(), (i, oid.value(i)));
            }
        }
    }
    Ok(Tables {
        batch,
        by_name,
        public,
    })
}

/// Every index of every table the session's `pg_class` numbers, with the
/// row of its table in `pg_class`.
fn indexes(planner: &Planner, tables: &Tables) -> Vec<(usize, IndexRel)> {
    let mut out = Vec::new();
    for t in planner.catalog().tables() {
        if let Some(&(row, oid)) = tables.by_name.get(&t.name) {
            out.extend(table_indexes(&t, oid).into_iter().map(|ix| (row, ix)));
        }
    }
    out
}

/// `pg_class` with a row of kind `i` per index (copied from its table's
/// row: namespace, owner; then made an index's) and `relhasindex` set on
/// the tables that have one.
#[derive(Debug)]
pub struct Classes {
    pub inner: Arc<dyn TableProvider>,
    pub namespaces: Arc<dyn TableProvider>,
    pub planner: Planner,
}

#[async_trait]
impl Computed for Classes {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    async fn rows(&self, state: &dyn Session) -> Result<Vec<RecordBatch>> {
        let tables = user_tables(&self.inner, &self.namespaces, state).await?;
        let ix = indexes(&self.planner, &tables);
        let mut has_index = vec![false; tables.batch.num_rows()];
        for (row, _) in &ix {
            has_index[*row] = true;
        }
        let rows = UInt32Array::from(ix.iter().map(|(r, _)| *r as u32).collect::<Vec<_>>());
        let schema = tables.batch.schema();
        let mut base = Vec::with_capacity(schema.fields().len());
        let mut added = Vec::with_capacity(schema.fields().len());
        for (f, col) in schema.fields().iter().zip(tables.batch.columns()) {
            let copied = take(col.as_ref(), &rows, None)?;
            let int = |v: Vec<i32>| Arc::new(Int32Array::from(v)) as ArrayRef;
            let (b, a): (ArrayRef, ArrayRef) = match f.name().as_str() {
                "relhasindex" => {
                    let old = col.as_boolean();
                    let b: BooleanArray = (0..old.len())
                        .map(|i| Some(old.value(i) || has_index[i]))
                        .collect();
                    (
                        Arc::new(b),
                        Arc::new(BooleanArray::from(vec![false; ix.len()])),
                    )
                }
                "oid" | "relfilenode" => {
                    (col.clone(), int(ix.iter().map(|(_, i)| i.oid).collect()))
                }
                "relname" => (
                    col.clone(),
                    Arc::new(StringArray::from_iter_values(
                        ix.iter().map(|(_, i)| &i.name),
                    )),
                ),
                "relkind" => (
                    col.clone(),
                    Arc::new(StringArray::from(vec!["i"; ix.len()])),
                ),
                "relam" => (col.clone(), int(vec![BTREE; ix.len()])),
                "reltype" | "reltoastrelid" => (col.clone(), int(vec![0; ix.len()])),
                "relnatts" => (
                    col.clone(),
                    Arc::new(datafusion::arrow::array::Int16Array::from_iter_values(
                        ix.iter().map(|(_, i)| i.columns.len() as i16),
                    )),
                ),
                _ => (col.clone(), copied),
            };
            base.push(b);
            added.push(datafusion::arrow::compute::cast(&a, f.data_type())?);
        }
        Ok(vec![
            RecordBatch::try_new(schema.clone(), base)?,
            RecordBatch::try_new(schema, added)?,
        ])
    }
}

/// `pg_index`: the crate's rows (PostgreSQL's own catalogs' indexes) and
/// one per index of a user table.
#[derive(Debug)]
pub struct Index {
    /// The crate's `pg_index`, its array columns already retyped.
    pub inner: Arc<dyn TableProvider>,
    pub classes: Arc<dyn TableProvider>,
    pub namespaces: Arc<dyn TableProvider>,
    pub attributes: Arc<dyn TableProvider>,
    pub planner: Planner,
}

#[async_trait]
impl Computed for Index {
    fn schema(&self) -> SchemaRef {
        self.inner.schema()
    }

    async fn rows(&self, state: &dyn Session) -> Result<Vec<RecordBatch>> {
        use ScalarValue as S;
        let tables = user_tables(&self.classes, &self.namespaces, state).await?;
        let ix = indexes(&self.planner, &tables);
        let attnums = attribute_numbers(&self.attributes, state).await?;
        let schema = self.schema();
        let mut columns = Vec::with_capacity(schema.fields().len());
        for f in schema.fields() {
            let values = ix
                .iter()
                .map(|(_, i)| {
                    let n = i.columns.len() as i16;
                    let list = |v: Vec<i16>| {
                        S::List(S::new_list_nullable(
                            &v.into_iter().map(|x| S::Int16(Some(x))).collect::<Vec<_>>(),
                            &DataType::Int16,
                        ))
                    };
                    let v = match f.name().as_str() {
                        "indexrelid" => S::Int32(Some(i.oid)),
                        "indrelid" => S::Int32(Some(i.table_oid)),
                        "indnatts" => S::Int16(Some(n + i.include.len() as i16)),
                        "indnkeyatts" => S::Int16(Some(n)),
                        "indisunique" => S::Boolean(Some(i.unique)),
                        "indisprimary" => S::Boolean(Some(i.primary)),
                        // The primary key is the store's clustered index:
                        // rows are kept in its order.
                        "indisclustered" => S::Boolean(Some(i.primary)),
                        "indisvalid" => S::Boolean(Some(!i.building)),
                        "indimmediate" | "indisready" | "indislive" => S::Boolean(Some(true)),
                        "indkey" => list(
                            i.columns
                                .iter()
                                .chain(&i.include)
                                .map(|c| {
                                    attnums.get(&(i.table_oid, c.clone())).copied().unwrap_or(0)
                                })
                                .collect(),
                        ),
                        // int2vector / oidvector text: one 0 per column.
                        "indoption" | "indcollation" | "indclass" => {
                            S::Utf8(Some(vec!["0"; i.columns.len()].join(" ")))
                        }
                        _ if f.is_nullable() => S::try_from(f.data_type())?,
                        _ => S::new_default(f.data_type())?,
                    };
                    v.cast_to(f.data_type())
                })
                .collect::<Result<Vec<_>>>()?;
            columns.push(column(f.data_type(), values)?);
        }
        let mut out = all_rows(&self.inner, state).await?;
        out.push(RecordBatch::try_new(schema, columns)?);
        Ok(out)
    }
}

/// The `pg_indexes` view: schema, table, index, tablespace, definition.
#[derive(Debug)]
pub struct IndexesView {
    pub classes: Arc<dyn TableProvider>,
    pub namespaces: Arc<dyn TableProvider>,
    pub planner: Planner,
}

impl IndexesView {
    fn view_schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("schemaname", DataType::Utf8, true),
            Field::new("tablename", DataType::Utf8, true),
            Field::new("indexname", DataType::Utf8, true),
            Field::new("tablespace", DataType::Utf8, true),
            Field::new("indexdef", DataType::Utf8, true),
        ]))
    }
}

#[async_trait]
impl Computed for IndexesView {
    fn schema(&self) -> SchemaRef {
        Self::view_schema()
    }

    async fn rows(&self, state: &dyn Session) -> Result<Vec<RecordBatch>> {
        let tables = user_tables(&self.classes, &self.namespaces, state).await?;
        let ix: Vec<IndexRel> = indexes(&self.planner, &tables)
            .into_iter()
            .map(|(_, i)| i)
            .collect();
        let text = |f: &dyn Fn(&IndexRel) -> Option<String>| {
            Arc::new(ix.iter().map(f).collect::<StringArray>()) as ArrayRef
        };
        Ok(vec![RecordBatch::try_new(
            Self::view_schema(),
            vec![
                text(&|_| Some("public".into())),
                text(&|i| Some(i.table.clone())),
                text(&|i| Some(i.name.clone())),
                text(&|_| None),
                text(&|i| Some(i.definition())),
            ],
        )?])
    }
}

/// Registers `pg_get_indexdef(oid [, column, pretty])` over the crate's.
pub fn register(ctx: &SessionContext, planner: Planner, oids: RelationOids) {
    ctx.register_udf(ScalarUDF::from(GetIndexDef {
        planner,
        oids,
        signature: Signature::one_of(
            vec![TypeSignature::Any(1), TypeSignature::Any(3)],
            Volatility::Stable,
        ),
    }));
}

/// `pg_get_indexdef(oid)`: the index's CREATE INDEX statement;
/// `pg_get_indexdef(oid, n, pretty)`: its `n`-th column's name (0: the
/// statement). NULL for an oid that is no index.
#[derive(Debug)]
struct GetIndexDef {
    planner: Planner,
    oids: RelationOids,
    signature: Signature,
}

impl PartialEq for GetIndexDef {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for GetIndexDef {}
impl std::hash::Hash for GetIndexDef {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        "pg_get_indexdef".hash(state);
    }
}

impl GetIndexDef {
    fn lookup(&self, oid: Option<i64>, column: Option<i64>) -> Option<String> {
        let oid = oid?;
        let table_oid = table_of(oid)?;
        let (_, table) = self.oids.relation(table_oid)?;
        let def = self.planner.catalog().table(&table).ok()?;
        let ix = table_indexes(&def, i32::try_from(table_oid).ok()?)
            .into_iter()
            .find(|i| i64::from(i.oid) == oid)?;
        match column? {
            0 => Some(ix.definition()),
            n => usize::try_from(n.checked_sub(1)?)
                .ok()
                .and_then(|k| ix.columns.get(k).cloned()),
        }
    }
}

impl ScalarUDFImpl for GetIndexDef {
    fn name(&self) -> &str {
        "pg_get_indexdef"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let int = |a: &ArrayRef| -> Result<Vec<Option<i64>>> {
            let a = datafusion::arrow::compute::cast(a, &DataType::Int64)?;
            Ok(a.as_primitive::<datafusion::arrow::datatypes::Int64Type>()
                .iter()
                .collect())
        };
        let Some(oids) = arrays.first() else {
            return exec_err!("pg_get_indexdef takes an index oid");
        };
        let oids = int(oids)?;
        let columns = match arrays.get(1) {
            Some(c) => int(c)?,
            None => vec![Some(0); rows],
        };
        let out: StringArray = oids
            .iter()
            .zip(&columns)
            .map(|(o, c)| self.lookup(*o, *c))
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_oids_name_their_table_and_slot() {
        let oid = index_oid(16_390, 3).expect("fits");
        assert!(i64::from(oid) >= INDEX_OID_BASE);
        assert_eq!(table_of(i64::from(oid)), Some(16_390));
        assert_eq!(i64::from(oid) % SLOTS, 3);
        assert_eq!(table_of(16_390), None);
        assert_eq!(index_oid(16_390, 1024), None);
        assert_eq!(index_oid(i32::MAX, 0), None);
    }
}
