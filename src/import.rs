//! `tablegate import FILE --table t`: CSV, Parquet or JSON lines into a
//! table.
//!
//! DataFusion reads the file (its CSV, Parquet and NDJSON readers, with
//! schema inference) and streams record batches; each batch is written as
//! CSV into one `COPY t FROM STDIN` on a server connection. The server's
//! COPY groups rows into entity-group transactions per PartitionKey (at
//! most 100 operations each) and honours throttling with the session's
//! retry policy, as for any client. When the table does not exist it is
//! created from the file's schema, keyed by `--partition-key` and
//! `--row-key` (key columns become TEXT: Azure keys are strings).
//!
//! Deliberately limited: an empty string in a text column arrives as
//! NULL (CSV cannot tell them apart once written unquoted), and nested
//! values (lists, structs) are refused.

use std::path::PathBuf;
use std::time::Instant;

use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::prelude::{CsvReadOptions, JsonReadOptions, ParquetReadOptions, SessionContext};
use futures::{SinkExt, StreamExt};

use crate::serve::Embedded;

/// `tablegate import` flags.
#[derive(Debug, Clone, clap::Args)]
pub struct ImportArgs {
    /// The file: .csv, .parquet, .json / .jsonl / .ndjson (JSON lines).
    pub file: PathBuf,
    /// Target table (created if missing).
    #[arg(long)]
    pub table: String,
    /// csv, parquet or json [default: from the file's extension].
    #[arg(long, value_parser = ["csv", "parquet", "json"])]
    pub format: Option<String>,
    /// The column that becomes the PartitionKey (when creating the table).
    #[arg(long)]
    pub partition_key: Option<String>,
    /// The column that becomes the RowKey (when creating the table).
    #[arg(long)]
    pub row_key: Option<String>,
    /// CSV field delimiter.
    #[arg(long, default_value = ",")]
    pub delimiter: char,
    /// A running server: a connection string ("host=… port=…"), whose
    /// gaps PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE
    /// fill ('' for the environment alone). Without it, `--data` is
    /// opened and served in this process during the import.
    #[arg(long, conflicts_with = "data")]
    pub connect: Option<String>,
    /// Data directory to import into (the server must not be running on
    /// it) [default: tablegate-data].
    #[arg(long, env = "TABLEGATE_DATA")]
    pub data: Option<PathBuf>,
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The file's format: the flag, else its extension.
fn format_of(args: &ImportArgs) -> Result<String, String> {
    if let Some(f) = &args.format {
        return Ok(f.clone());
    }
    let ext = args
        .file
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    match ext.as_str() {
        "csv" | "tsv" | "txt" => Ok("csv".into()),
        "parquet" | "pq" => Ok("parquet".into()),
        "json" | "jsonl" | "ndjson" => Ok("json".into()),
        _ => Err(format!(
            "cannot tell the format of {} from its extension: pass --format csv|parquet|json",
            args.file.display()
        )),
    }
}

/// The SQL type a column of the file is created with.
fn sql_type(t: &DataType, key: bool) -> Result<&'static str, String> {
    if key {
        return Ok("TEXT");
    }
    Ok(match t {
        DataType::Boolean => "BOOLEAN",
        DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::UInt8 | DataType::UInt16 => {
            "INTEGER"
        }
        DataType::Int64 | DataType::UInt32 | DataType::UInt64 => "BIGINT",
        DataType::Float16
        | DataType::Float32
        | DataType::Float64
        | DataType::Decimal32(..)
        | DataType::Decimal64(..)
        | DataType::Decimal128(..)
        | DataType::Decimal256(..) => "DOUBLE PRECISION",
        DataType::Timestamp(_, Some(_)) => "TIMESTAMPTZ",
        DataType::Timestamp(_, None) | DataType::Date32 | DataType::Date64 => "TIMESTAMP",
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "TEXT",
        DataType::Null => "TEXT",
        other => {
            return Err(format!(
                "a column of type {other} cannot be imported (nested and binary values are not supported)"
            ));
        }
    })
}

fn quote(ident: &str) -> String {
    format!("\"{}\"", ident.replace('"', "\"\""))
}

/// `CREATE TABLE` for the file's schema.
fn create_table(table: &str, schema: &Schema, pk: &str, rk: &str) -> Result<String, String> {
    for key in [pk, rk] {
        if schema.field_with_name(key).is_err() {
            return Err(format!(
                "the file has no column {key:?}; its columns are: {}",
                schema
                    .fields()
                    .iter()
                    .map(|f| f.name().as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    let mut cols = Vec::new();
    for f in schema.fields() {
        let key = f.name() == pk || f.name() == rk;
        cols.push(format!(
            "{} {}",
            quote(f.name()),
            sql_type(f.data_type(), key).map_err(|e| format!("column {}: {e}", f.name()))?
        ));
    }
    Ok(format!(
        "CREATE TABLE {} ({}, PRIMARY KEY ({}, {}))",
        quote(table),
        cols.join(", "),
        quote(pk),
        quote(rk)
    ))
}

/// Runs the import and prints its summary.
pub async fn run(args: ImportArgs) -> Result<(), String> {
    let format = format_of(&args)?;
    if !args.file.is_file() {
        return Err(format!("{}: no such file", args.file.display()));
    }
    let (conn, embedded) =
        Embedded::or_connect(args.connect.as_deref(), args.data.as_deref()).await?;
    let result = import(&args, &format, &conn).await;
    if let Some(server) = embedded {
        server.stop().await?;
    }
    result
}

async fn import(
    args: &ImportArgs,
    format: &str,
    conn: &tokio_postgres::Config,
) -> Result<(), String> {
    let started = Instant::now();
    let ctx = SessionContext::new();
    let path = args.file.to_string_lossy().into_owned();
    // DataFusion filters listed files by extension: give it the file's own.
    let ext = args
        .file
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let df = match format {
        "csv" => {
            let delimiter = u8::try_from(args.delimiter)
                .map_err(|_| "--delimiter must be one ASCII character".to_owned())?;
            ctx.read_csv(
                path,
                CsvReadOptions::new()
                    .has_header(true)
                    .delimiter(delimiter)
                    .file_extension(&ext),
            )
            .await
        }
        "parquet" => {
            ctx.read_parquet(path, ParquetReadOptions::default().file_extension(&ext))
                .await
        }
        _ => {
            ctx.read_json(path, JsonReadOptions::default().file_extension(&ext))
                .await
        }
    }
    .map_err(|e| format!("{}: {e}", args.file.display()))?;
    let schema: Schema = df.schema().as_arrow().clone();

    let client = crate::pgenv::connect(conn).await?;
    // Imports are long: let the server retry throttled EGTs patiently.
    client
        .batch_execute("SET tablegate.retry_max = 20")
        .await
        .map_err(crate::pgenv::db_error)?;

    match (&args.partition_key, &args.row_key) {
        (Some(pk), Some(rk)) => {
            let sql = create_table(&args.table, &schema, pk, rk)?;
            match client.batch_execute(&sql).await {
                Ok(()) => eprintln!("created table {}: {sql}", args.table),
                Err(e) if e.code().is_some_and(|c| c.code() == "42P07") => {
                    eprintln!("table {} exists: importing into it", args.table);
                }
                Err(e) => return Err(crate::pgenv::db_error(e)),
            }
        }
        (None, None) => {}
        _ => return Err("give both --partition-key and --row-key".into()),
    }

    let columns: Vec<String> = schema.fields().iter().map(|f| quote(f.name())).collect();
    let copy = format!(
        "COPY {} ({}) FROM STDIN WITH (FORMAT csv)",
        quote(&args.table),
        columns.join(", ")
    );
    let sink = client.copy_in(&copy).await.map_err(|e| {
        let m = crate::pgenv::db_error(e);
        if m.contains("42P01") {
            format!("{m}\nhint: create the table with --partition-key COLUMN --row-key COLUMN")
        } else {
            m
        }
    })?;
    let mut sink = Box::pin(sink);

    let bar = indicatif::ProgressBar::new_spinner().with_style(
        indicatif::ProgressStyle::with_template("{spinner} importing: {pos} rows ({per_sec})")
            .map_err(err)?,
    );
    bar.enable_steady_tick(std::time::Duration::from_millis(200));
    let mut stream = df
        .execute_stream()
        .await
        .map_err(|e| format!("{}: {e}", args.file.display()))?;
    let mut rows = 0u64;
    while let Some(batch) = stream.next().await {
        let batch = batch.map_err(|e| format!("{}: {e}", args.file.display()))?;
        let mut buf = Vec::with_capacity(batch.num_rows() * 64);
        {
            let mut w = datafusion::arrow::csv::WriterBuilder::new()
                .with_header(false)
                .build(&mut buf);
            w.write(&batch).map_err(|e| format!("encoding rows: {e}"))?;
        }
        sink.send(bytes::Bytes::from(buf))
            .await
            .map_err(crate::pgenv::db_error)?;
        rows += batch.num_rows() as u64;
        bar.set_position(rows);
    }
    let written = sink
        .as_mut()
        .finish()
        .await
        .map_err(crate::pgenv::db_error)?;
    bar.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    println!(
        "imported {written} rows from {} into {} in {secs:.1} s ({:.0} rows/s)",
        args.file.display(),
        args.table,
        written as f64 / secs.max(0.001)
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::Field;

    #[test]
    fn create_table_keys_are_text_and_columns_quoted() {
        let schema = Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("city", DataType::Utf8, true),
            Field::new("Temp", DataType::Float64, true),
        ]);
        assert_eq!(
            create_table("w", &schema, "city", "id").unwrap(),
            "CREATE TABLE \"w\" (\"id\" TEXT, \"city\" TEXT, \"Temp\" DOUBLE PRECISION, PRIMARY KEY (\"city\", \"id\"))"
        );
        let e = create_table("w", &schema, "town", "id").unwrap_err();
        assert!(
            e.contains("no column \"town\"") && e.contains("id, city, Temp"),
            "{e}"
        );
    }
}
