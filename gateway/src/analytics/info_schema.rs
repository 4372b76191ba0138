//! `information_schema` as PostgreSQL clients expect it: `tables`,
//! `columns` and `schemata` of the store's tables, with PostgreSQL type
//! names (DataFusion's own information_schema would report Arrow types).
//! Built from the catalog on every query, so it is always current.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::arrow::array::{ArrayRef, Int32Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};
use datafusion::catalog::{SchemaProvider, TableProvider};
use datafusion::datasource::MemTable;
use tablegate_catalog::{ColumnDefault, Role, SqlType};
use tablegate_planner::Planner;

/// The schema provider.
#[derive(Debug)]
pub struct InfoSchema {
    planner: Planner,
    database: String,
}

impl InfoSchema {
    /// Over `planner`'s catalog, reporting `database` as the catalog name.
    pub fn new(planner: Planner, database: &str) -> Self {
        InfoSchema {
            planner,
            database: database.to_owned(),
        }
    }
}

const TABLES: [&str; 3] = ["tables", "columns", "schemata"];

/// PostgreSQL's `data_type` and `udt_name` of a column type.
fn type_names(t: SqlType) -> (&'static str, &'static str) {
    match t {
        SqlType::Text => ("text", "text"),
        SqlType::Int2 => ("smallint", "int2"),
        SqlType::Int4 => ("integer", "int4"),
        SqlType::Int8 => ("bigint", "int8"),
        SqlType::Float8 => ("double precision", "float8"),
        SqlType::Bool => ("boolean", "bool"),
        SqlType::Timestamptz => ("timestamp with time zone", "timestamptz"),
        SqlType::Timestamp => ("timestamp without time zone", "timestamp"),
        SqlType::Date => ("date", "date"),
        SqlType::Uuid => ("uuid", "uuid"),
        SqlType::Bytea => ("bytea", "bytea"),
    }
}

fn text_columns(names: &[&str]) -> Vec<Field> {
    names
        .iter()
        .map(|n| Field::new(*n, DataType::Utf8, true))
        .collect()
}

fn strings(v: Vec<Option<String>>) -> ArrayRef {
    Arc::new(StringArray::from(v))
}

impl InfoSchema {
    fn batch(&self, name: &str) -> datafusion::common::Result<RecordBatch> {
        let tables = self.planner.catalog().tables();
        let db = || Some(self.database.clone());
        match name {
            "schemata" => {
                let schema = Arc::new(Schema::new(text_columns(&[
                    "catalog_name",
                    "schema_name",
                    "schema_owner",
                ])));
                Ok(RecordBatch::try_new(
                    schema,
                    vec![
                        strings(vec![db(), db()]),
                        strings(vec![
                            Some("public".into()),
                            Some("information_schema".into()),
                        ]),
                        strings(vec![Some("tablegate".into()), Some("tablegate".into())]),
                    ],
                )?)
            }
            "tables" => {
                let schema = Arc::new(Schema::new(text_columns(&[
                    "table_catalog",
                    "table_schema",
                    "table_name",
                    "table_type",
                ])));
                let n = tables.len();
                Ok(RecordBatch::try_new(
                    schema,
                    vec![
                        strings(vec![db(); n]),
                        strings(vec![Some("public".into()); n]),
                        strings(tables.iter().map(|t| Some(t.name.clone())).collect()),
                        strings(vec![Some("BASE TABLE".into()); n]),
                    ],
                )?)
            }
            _ => {
                let mut fields =
                    text_columns(&["table_catalog", "table_schema", "table_name", "column_name"]);
                fields.push(Field::new("ordinal_position", DataType::Int32, false));
                fields.extend(text_columns(&[
                    "column_default",
                    "is_nullable",
                    "data_type",
                    "udt_name",
                    "is_updatable",
                ]));
                let mut cols: [Vec<Option<String>>; 9] = Default::default();
                let mut ordinal = Vec::new();
                for t in &tables {
                    for (i, c) in t.star().iter().enumerate() {
                        let def = t.columns.iter().find(|d| d.name == c.name);
                        let (data_type, udt) = type_names(c.ty);
                        let default = def.and_then(|d| d.default.as_ref()).map(|d| match d {
                            ColumnDefault::Constant(v) => format!("'{}'", v.replace('\'', "''")),
                            ColumnDefault::Now => "now()".into(),
                            ColumnDefault::RandomUuid => "gen_random_uuid()".into(),
                            // As PostgreSQL shows a serial column's default.
                            ColumnDefault::Identity { .. } => {
                                format!("nextval('{}_{}_seq'::regclass)", t.name, c.name)
                            }
                            // Hidden keys are not listed (star() leaves them out).
                            ColumnDefault::Bucket | ColumnDefault::RowId => String::new(),
                        });
                        let row = [
                            db(),
                            Some("public".into()),
                            Some(t.name.clone()),
                            Some(c.name.clone()),
                            default,
                            Some(if c.nullable { "YES" } else { "NO" }.into()),
                            Some(data_type.into()),
                            Some(udt.into()),
                            Some(
                                if c.role == Role::Property {
                                    "YES"
                                } else {
                                    "NO"
                                }
                                .into(),
                            ),
                        ];
                        for (k, v) in row.into_iter().enumerate() {
                            cols[k].push(v);
                        }
                        ordinal.push(i as i32 + 1);
                    }
                }
                let [a, b, c, d, e, f, g, h, i] = cols;
                Ok(RecordBatch::try_new(
                    Arc::new(Schema::new(fields)),
                    vec![
                        strings(a),
                        strings(b),
                        strings(c),
                        strings(d),
                        Arc::new(Int32Array::from(ordinal)),
                        strings(e),
                        strings(f),
                        strings(g),
                        strings(h),
                        strings(i),
                    ],
                )?)
            }
        }
    }
}

#[async_trait]
impl SchemaProvider for InfoSchema {
    fn table_names(&self) -> Vec<String> {
        TABLES.iter().map(|s| s.to_string()).collect()
    }

    async fn table(
        &self,
        name: &str,
    ) -> datafusion::common::Result<Option<Arc<dyn TableProvider>>> {
        if !TABLES.contains(&name) {
            return Ok(None);
        }
        let batch = self.batch(name)?;
        Ok(Some(Arc::new(MemTable::try_new(
            batch.schema(),
            vec![vec![batch]],
        )?)))
    }

    fn table_exist(&self, name: &str) -> bool {
        TABLES.contains(&name)
    }
}
