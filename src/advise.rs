//! `tablegate advise TABLE`: the key-design advisor from the command line.
//! It runs `SELECT * FROM tablegate.advise(…)` on a running server
//! (`--connect`) or on a data directory served in this process, and prints
//! the ranked designs as a table or (`--format json`) as JSON.

use std::path::PathBuf;

use crate::serve::Embedded;
use clap::Args;

/// `tablegate advise` arguments.
#[derive(Debug, Args)]
pub struct AdviseArgs {
    /// The table to advise on.
    pub table: String,
    /// A workload file: SQL statements ending in `;`, each optionally after
    /// a `-- weight: N` line. Without it, the server's statement log (the
    /// statements that name the table, weighted by their calls).
    #[arg(long)]
    pub workload: Option<PathBuf>,
    /// text or json.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    pub format: String,
    /// A running server's connection string ("host=… port=…"; PGHOST and
    /// the other PG variables fill its gaps).
    #[arg(long, conflicts_with = "data")]
    pub connect: Option<String>,
    /// Data directory (the server must not be running on it)
    /// [default: tablegate-data].
    #[arg(long, env = "TABLEGATE_DATA")]
    pub data: Option<PathBuf>,
}

/// Runs the advisor and prints its report.
pub async fn run(args: AdviseArgs) -> Result<(), String> {
    let workload = match &args.workload {
        Some(p) => Some(std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?),
        None => None,
    };
    let (conn, embedded) =
        Embedded::or_connect(args.connect.as_deref(), args.data.as_deref()).await?;
    let result = advise(&args, workload.as_deref(), &conn).await;
    if let Some(server) = embedded {
        server.stop().await?;
    }
    result
}

async fn advise(
    args: &AdviseArgs,
    workload: Option<&str>,
    conn: &tokio_postgres::Config,
) -> Result<(), String> {
    let client = crate::pgenv::connect(conn).await?;
    eprintln!(
        "modelling every key design of {} on its rows (this reads the table once) …",
        args.table
    );
    let rows = match workload {
        Some(w) => {
            client
                .query("SELECT * FROM tablegate.advise($1, $2)", &[&args.table, &w])
                .await
        }
        None => {
            client
                .query("SELECT * FROM tablegate.advise($1)", &[&args.table])
                .await
        }
    }
    .map_err(|e| match e.as_db_error() {
        Some(d) => format!("{} ({})", d.message(), d.code().code()),
        None => e.to_string(),
    })?;
    let designs: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "rank": r.get::<_, Option<i64>>("rank"),
                "partition_key": r.get::<_, String>("partition_key"),
                "row_key": r.get::<_, Option<String>>("row_key"),
                "current": r.get::<_, bool>("current"),
                "verdict": r.get::<_, String>("verdict"),
                "entities_per_call": r.get::<_, f64>("entities_per_call"),
                "min_ms_per_call": r.get::<_, f64>("min_ms_per_call"),
                "partitions": r.get::<_, i64>("partitions"),
                "largest_partition": r.get::<_, i64>("largest_partition"),
                "largest_partition_load": r.get::<_, Option<f64>>("largest_partition_load"),
                "reason": r.get::<_, String>("reason"),
            })
        })
        .collect();
    if args.format == "json" {
        let doc = serde_json::json!({ "table": args.table, "designs": designs });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return Ok(());
    }
    println!(
        "{:>4}  {:<34} {:<11} {:>13} {:>10} {:>10} {:>9} {:>9}  reason",
        "rank",
        "design (PartitionKey, RowKey)",
        "verdict",
        "entities/call",
        "min ms",
        "partitions",
        "largest",
        "largest/s"
    );
    for d in &designs {
        let design = match d["row_key"].as_str() {
            Some(rk) => format!("({}, {rk})", d["partition_key"].as_str().unwrap_or("")),
            None => format!("({})", d["partition_key"].as_str().unwrap_or("")),
        };
        let design = if d["current"].as_bool() == Some(true) {
            format!("{design} *")
        } else {
            design
        };
        let num = |k: &str| d[k].to_string();
        println!(
            "{:>4}  {:<34} {:<11} {:>13} {:>10} {:>10} {:>9} {:>9}  {}",
            d["rank"].as_i64().map_or("-".to_owned(), |n| n.to_string()),
            design,
            d["verdict"].as_str().unwrap_or(""),
            num("entities_per_call"),
            num("min_ms_per_call"),
            num("partitions"),
            num("largest_partition"),
            d["largest_partition_load"]
                .as_f64()
                .map_or("-".to_owned(), |l| format!("{l:.0}")),
            d["reason"].as_str().unwrap_or("")
        );
    }
    println!("* the table's design today");
    Ok(())
}
