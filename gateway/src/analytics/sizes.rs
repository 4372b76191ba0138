//! PostgreSQL's object-size functions (`pg_relation_size`, `pg_table_size`,
//! `pg_indexes_size`, `pg_total_relation_size`, `pg_database_size`),
//! answered from the store's byte statistics: the bytes of a table's
//! entities, keys and values as the engine encodes them. psql's `\dt+`,
//! `\d+` and `\l+` and monitoring queries read them.
//!
//! A relation is named by oid (`c.oid` from `pg_class`, numbered per
//! session) or by text (`'orders'`, `'public."Orders"'`, as a `regclass`
//! cast reads it). A table's primary key is the clustered key itself and
//! its index entries are entities among its rows (the store counts them
//! in the table's bytes), so the index size is 0 and a table's total size
//! is its table size. Views (the `pg_catalog`,
//! `information_schema` and `tablegate` relations) take no storage: 0.
//! NULL where the backend keeps no byte count (Azure).

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Int64Array};
use datafusion::arrow::datatypes::{DataType, Int64Type};
use datafusion::common::{DataFusionError, Result, ScalarValue, exec_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};
use datafusion::prelude::SessionContext;
use datafusion_pg_catalog::RelationOids;
use tablegate_planner::Planner;
use tablegate_store::StoreError;

use crate::sqlstate::PgError;

/// The schema user tables live in.
const TABLES_SCHEMA: &str = "public";
/// Schemas of relations that take no storage of their own.
const VIEW_SCHEMAS: [&str; 3] = ["pg_catalog", "information_schema", super::system::SCHEMA];

/// Which size a function reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Measure {
    /// The table's entities (`pg_relation_size`, `pg_table_size`,
    /// `pg_total_relation_size`).
    Table,
    /// Indexes apart from the table: none (entries live among its rows).
    Indexes,
    /// Every table of the database (`pg_database_size`).
    Database,
}

/// Registers the size functions on `ctx`, over the functions
/// datafusion-pg-catalog registered under the same names.
pub fn register(ctx: &SessionContext, planner: Planner, oids: RelationOids, database: &str) {
    for (name, measure) in [
        ("pg_relation_size", Measure::Table),
        ("pg_table_size", Measure::Table),
        ("pg_total_relation_size", Measure::Table),
        ("pg_indexes_size", Measure::Indexes),
        ("pg_database_size", Measure::Database),
    ] {
        ctx.register_udf(ScalarUDF::from(Size {
            name,
            measure,
            sizes: Sizes {
                planner: planner.clone(),
                oids: oids.clone(),
                database: database.to_owned(),
            },
            signature: Signature::user_defined(Volatility::Volatile),
        }));
    }
}

/// What the functions look sizes up in.
#[derive(Debug, Clone)]
struct Sizes {
    planner: Planner,
    oids: RelationOids,
    database: String,
}

impl Sizes {
    /// Bytes of the store table `name` (case-insensitive); `Ok(None)` when
    /// the backend does not count them, an error when there is no such
    /// table.
    fn table(&self, name: &str) -> Result<Option<i64>> {
        let def = self.planner.catalog().table(name).map_err(|_| {
            DataFusionError::External(Box::new(StoreError::TableNotFound {
                name: name.to_owned(),
            }))
        })?;
        let Some(store) = self.planner.store().partitioned() else {
            return Ok(None);
        };
        let stats = store
            .table_stats_blocking(&def.name)
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        Ok(stats.bytes.map(|b| i64::try_from(b).unwrap_or(i64::MAX)))
    }

    /// Bytes of every table.
    fn database(&self) -> Result<Option<i64>> {
        let mut total = 0i64;
        for def in self.planner.catalog().tables() {
            match self.table(&def.name) {
                Ok(Some(b)) => total = total.saturating_add(b),
                Ok(None) => return Ok(None),
                // Dropped since the list was read.
                Err(_) => {}
            }
        }
        Ok(Some(total))
    }

    /// The size of the relation `schema.name` (`schema` `None` when the
    /// name was not qualified).
    fn relation(&self, measure: Measure, schema: Option<&str>, name: &str) -> Result<Option<i64>> {
        match schema {
            None | Some(TABLES_SCHEMA) => {
                let bytes = self.table(name)?;
                Ok(match measure {
                    Measure::Indexes => bytes.map(|_| 0),
                    _ => bytes,
                })
            }
            Some(s) if VIEW_SCHEMAS.contains(&s) => Ok(Some(0)),
            Some(s) => Err(DataFusionError::External(Box::new(PgError::new(
                "3F000",
                format!("schema \"{s}\" does not exist"),
            )))),
        }
    }

    /// The size of relation number `oid`; NULL when no relation has it,
    /// as PostgreSQL answers.
    fn relation_by_oid(&self, measure: Measure, oid: i64) -> Result<Option<i64>> {
        let Some((schema, name)) = u32::try_from(oid).ok().and_then(|o| self.oids.relation(o))
        else {
            return Ok(None);
        };
        match self.relation(measure, Some(&schema), &name) {
            // Dropped since pg_class numbered it.
            Err(_) => Ok(None),
            found => found,
        }
    }

    /// `pg_database_size(name)`. `pg_database` also lists `postgres`, for
    /// tools that expect it; it holds nothing of its own.
    fn database_named(&self, name: &str) -> Result<Option<i64>> {
        if name == "postgres" && self.database != "postgres" {
            return Ok(Some(0));
        }
        if name != self.database {
            return Err(DataFusionError::External(Box::new(PgError::new(
                "3D000",
                format!("database \"{name}\" does not exist"),
            ))));
        }
        self.database()
    }
}

/// One size function.
#[derive(Debug)]
struct Size {
    name: &'static str,
    measure: Measure,
    sizes: Sizes,
    signature: Signature,
}

impl PartialEq for Size {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Size {}

impl std::hash::Hash for Size {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl ScalarUDFImpl for Size {
    fn name(&self) -> &str {
        self.name
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    /// An oid (any integer) or a name (text); `pg_relation_size` also
    /// takes a fork name.
    fn coerce_types(&self, types: &[DataType]) -> Result<Vec<DataType>> {
        let max = if self.name == "pg_relation_size" {
            2
        } else {
            1
        };
        if types.is_empty() || types.len() > max {
            return exec_err!("{} takes 1 to {max} arguments", self.name);
        }
        types
            .iter()
            .enumerate()
            .map(|(i, t)| match t {
                t if t.is_integer() && i == 0 => Ok(DataType::Int64),
                DataType::Null if i == 0 => Ok(DataType::Int64),
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null => {
                    Ok(DataType::Utf8)
                }
                t => exec_err!("{} does not take an argument of type {t}", self.name),
            })
            .collect()
    }
    fn return_type(&self, _: &[DataType]) -> Result<DataType> {
        Ok(DataType::Int64)
    }
    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let scalar = args
            .args
            .iter()
            .all(|a| matches!(a, ColumnarValue::Scalar(_)));
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let forks = arrays.get(1).map(|f| f.as_string::<i32>());
        let rows = arrays[0].len();
        let mut out = Vec::with_capacity(rows);
        for i in 0..rows {
            if arrays[0].is_null(i) || forks.is_some_and(|f| f.is_null(i)) {
                out.push(None);
                continue;
            }
            // Only the main fork holds data.
            if let Some(f) = forks
                && !main_fork(f.value(i))?
            {
                out.push(Some(0));
                continue;
            }
            out.push(self.size_of(&arrays[0], i)?);
        }
        let out: ArrayRef = Arc::new(Int64Array::from(out));
        Ok(match scalar {
            true => ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?),
            false => ColumnarValue::Array(out),
        })
    }
}

impl Size {
    /// The size for row `i` of the first argument.
    fn size_of(&self, arg: &ArrayRef, i: usize) -> Result<Option<i64>> {
        let s = &self.sizes;
        match (arg.data_type(), self.measure) {
            (DataType::Int64, Measure::Database) => {
                let oid = arg.as_primitive::<Int64Type>().value(i);
                match u32::try_from(oid).ok().and_then(|o| s.oids.database(o)) {
                    Some(name) => s.database_named(&name),
                    None => Ok(None),
                }
            }
            (DataType::Int64, m) => s.relation_by_oid(m, arg.as_primitive::<Int64Type>().value(i)),
            (_, Measure::Database) => s.database_named(arg.as_string::<i32>().value(i)),
            (_, m) => {
                let text = arg.as_string::<i32>().value(i);
                let (schema, name) = parse_relation(text).ok_or_else(|| {
                    DataFusionError::External(Box::new(PgError::new(
                        "42602",
                        format!("invalid name syntax: \"{text}\""),
                    )))
                })?;
                s.relation(m, schema.as_deref(), &name)
            }
        }
    }
}

/// True for the `main` fork; false for the other forks PostgreSQL names;
/// an error for any other name, in PostgreSQL's words.
fn main_fork(name: &str) -> Result<bool> {
    match name {
        "main" => Ok(true),
        "fsm" | "vm" | "init" => Ok(false),
        _ => Err(DataFusionError::External(Box::new(
            PgError::new("22023", "invalid fork name")
                .hint("Valid fork names are \"main\", \"fsm\", \"vm\", and \"init\"."),
        ))),
    }
}

/// A relation name as a `regclass` cast reads it: `name` or
/// `schema.name`, each part folded to lower case unless double-quoted
/// (`""` inside quotes is one `"`). `None` when it does not parse.
fn parse_relation(text: &str) -> Option<(Option<String>, String)> {
    let mut parts = Vec::new();
    let mut chars = text.trim().chars().peekable();
    loop {
        let mut part = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '"' if chars.peek() == Some(&'"') => {
                        chars.next();
                        part.push('"');
                    }
                    '"' => break,
                    c => part.push(c),
                }
            }
            if part.is_empty() {
                return None;
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c == '.' {
                    break;
                }
                part.push(c.to_ascii_lowercase());
                chars.next();
            }
            part = part.trim().to_owned();
            if part.is_empty() || part.contains(char::is_whitespace) {
                return None;
            }
        }
        parts.push(part);
        match chars.next() {
            None => break,
            Some('.') => continue,
            Some(_) => return None,
        }
    }
    match <[String; 2]>::try_from(parts) {
        Ok([schema, name]) => Some((Some(schema), name)),
        Err(mut parts) if parts.len() == 1 => Some((None, parts.pop()?)),
        Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relation_names_read_as_regclass_does() {
        let p = |t: &str| parse_relation(t);
        assert_eq!(p("orders"), Some((None, "orders".into())));
        assert_eq!(p("Orders"), Some((None, "orders".into())));
        assert_eq!(p("\"Orders\""), Some((None, "Orders".into())));
        assert_eq!(
            p("public.Orders"),
            Some((Some("public".into()), "orders".into()))
        );
        assert_eq!(
            p("\"my schema\".\"a.b\"\"c\""),
            Some((Some("my schema".into()), "a.b\"c".into()))
        );
        assert_eq!(p(""), None);
        assert_eq!(p("a.b.c"), None);
        assert_eq!(p("a b"), None);
        assert_eq!(p("\"unterminated"), None);
        assert_eq!(p("a."), None);
    }

    #[test]
    fn only_postgresql_fork_names_are_accepted() {
        assert!(main_fork("main").unwrap());
        assert!(!main_fork("vm").unwrap());
        assert!(main_fork("heap").is_err());
    }
}
