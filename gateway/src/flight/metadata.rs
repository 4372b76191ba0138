//! Flight SQL's metadata commands from the catalog: one catalog
//! (`tablegate`) with one schema (`public`) holding the user tables,
//! their primary keys (PartitionKey, then RowKey), what the server
//! supports (GetSqlInfo) and its column types (GetXdbcTypeInfo).

use std::sync::{Arc, LazyLock};

use arrow_array::builder::{Int32Builder, StringBuilder};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_flight::sql::metadata::{
    SqlInfoData, SqlInfoDataBuilder, XdbcTypeInfo, XdbcTypeInfoData, XdbcTypeInfoDataBuilder,
};
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetTableTypes,
    CommandGetTables, Nullable, Searchable, SqlInfo, SqlSupportedTransaction, XdbcDataType,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use tablegate_catalog::{SqlType, TableDef};
use tablegate_planner::Planner;
use tonic::Status;

/// The catalog and schema every table is in.
pub const CATALOG: &str = "tablegate";
pub const SCHEMA: &str = "public";

fn arrow_err(e: impl std::fmt::Display) -> Status {
    Status::internal(e.to_string())
}

/// Whether a Flight SQL catalog / schema filter lets ours through.
fn ours(catalog: Option<&str>, schema: Option<&str>) -> bool {
    catalog.is_none_or(|c| c.is_empty() || c == CATALOG)
        && schema.is_none_or(|s| s.is_empty() || s == SCHEMA)
}

pub fn catalogs(q: CommandGetCatalogs) -> Result<RecordBatch, Status> {
    let mut b = q.into_builder();
    b.append(CATALOG);
    b.build().map_err(arrow_err)
}

pub fn schemas(q: CommandGetDbSchemas) -> Result<RecordBatch, Status> {
    let mut b = q.into_builder();
    b.append(CATALOG, SCHEMA);
    b.build().map_err(arrow_err)
}

pub fn table_types(q: CommandGetTableTypes) -> Result<RecordBatch, Status> {
    let mut b = q.into_builder();
    b.append("TABLE");
    b.build().map_err(arrow_err)
}

/// The user tables, with the columns of `SELECT *` as their schema.
pub fn tables(planner: &Planner, q: CommandGetTables) -> Result<RecordBatch, Status> {
    let mut b = q.into_builder();
    for t in planner.catalog().tables() {
        let schema = TableDef::arrow_schema(&t.star());
        b.append(CATALOG, SCHEMA, &t.name, "TABLE", &schema)
            .map_err(arrow_err)?;
    }
    b.build().map_err(arrow_err)
}

/// The schema of GetPrimaryKeys' result (Flight SQL's).
pub fn primary_keys_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ]))
}

/// A table's primary key: the PartitionKey column (1), then the RowKey
/// column (2); none for a table declared without one.
pub fn primary_keys(planner: &Planner, q: &CommandGetPrimaryKeys) -> Result<RecordBatch, Status> {
    let mut catalog = StringBuilder::new();
    let mut schema = StringBuilder::new();
    let mut table = StringBuilder::new();
    let mut column = StringBuilder::new();
    let mut key = StringBuilder::new();
    let mut seq = Int32Builder::new();
    if ours(q.catalog.as_deref(), q.db_schema.as_deref())
        && let Ok(t) = planner.catalog().table(&q.table)
        && !t.keyless()
    {
        let keys = std::iter::once(t.partition_key.clone()).chain(t.row_key.clone());
        for (i, name) in keys.enumerate() {
            catalog.append_value(CATALOG);
            schema.append_value(SCHEMA);
            table.append_value(&t.name);
            column.append_value(name);
            key.append_value(format!("{}_pkey", t.name));
            seq.append_value(i as i32 + 1);
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(catalog.finish()),
        Arc::new(schema.finish()),
        Arc::new(table.finish()),
        Arc::new(column.finish()),
        Arc::new(key.finish()),
        Arc::new(seq.finish()),
    ];
    RecordBatch::try_new(primary_keys_schema(), columns).map_err(arrow_err)
}

/// What the server says about itself.
pub static SQL_INFO: LazyLock<SqlInfoData> = LazyLock::new(|| {
    let mut b = SqlInfoDataBuilder::new();
    b.append(SqlInfo::FlightSqlServerName, "tablegate");
    b.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    b.append(SqlInfo::FlightSqlServerArrowVersion, "1.3");
    b.append(SqlInfo::FlightSqlServerReadOnly, false);
    b.append(SqlInfo::FlightSqlServerSql, true);
    b.append(SqlInfo::FlightSqlServerSubstrait, false);
    b.append(
        SqlInfo::FlightSqlServerTransaction,
        SqlSupportedTransaction::Transaction as i32,
    );
    b.append(SqlInfo::FlightSqlServerCancel, false);
    b.append(SqlInfo::FlightSqlServerBulkIngestion, true);
    b.append(SqlInfo::FlightSqlServerIngestTransactionsSupported, true);
    b.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    b.append(SqlInfo::SqlDdlCatalog, false);
    b.append(SqlInfo::SqlDdlSchema, false);
    b.append(SqlInfo::SqlDdlTable, true);
    b.build().expect("static SqlInfo")
});

/// The column types, as GetXdbcTypeInfo lists them.
pub static XDBC_TYPES: LazyLock<XdbcTypeInfoData> = LazyLock::new(|| {
    let mut b = XdbcTypeInfoDataBuilder::new();
    let all = [
        (SqlType::Text, XdbcDataType::XdbcVarchar),
        (SqlType::Int2, XdbcDataType::XdbcSmallint),
        (SqlType::Int4, XdbcDataType::XdbcInteger),
        (SqlType::Int8, XdbcDataType::XdbcBigint),
        (SqlType::Float8, XdbcDataType::XdbcDouble),
        (SqlType::Bool, XdbcDataType::XdbcBit),
        (SqlType::Timestamptz, XdbcDataType::XdbcTimestamp),
        (SqlType::Timestamp, XdbcDataType::XdbcTimestamp),
        (SqlType::Date, XdbcDataType::XdbcDate),
        (SqlType::Uuid, XdbcDataType::XdbcBinary),
        (SqlType::Bytea, XdbcDataType::XdbcVarbinary),
    ];
    for (ty, xdbc) in all {
        let quoted = matches!(
            ty,
            SqlType::Text
                | SqlType::Timestamptz
                | SqlType::Timestamp
                | SqlType::Date
                | SqlType::Uuid
                | SqlType::Bytea
        );
        b.append(XdbcTypeInfo {
            type_name: ty.pg_name().into(),
            data_type: xdbc,
            column_size: None,
            literal_prefix: quoted.then(|| "'".into()),
            literal_suffix: quoted.then(|| "'".into()),
            create_params: None,
            nullable: Nullable::NullabilityNullable,
            case_sensitive: ty == SqlType::Text,
            searchable: Searchable::Full,
            unsigned_attribute: Some(false),
            fixed_prec_scale: false,
            auto_increment: Some(false),
            local_type_name: Some(ty.pg_name().into()),
            minimum_scale: None,
            maximum_scale: None,
            sql_data_type: xdbc,
            datetime_subcode: None,
            num_prec_radix: None,
            interval_precision: None,
        });
    }
    b.build().expect("static type info")
});
