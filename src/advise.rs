//! `tablegate advise TABLE`: the key-design advisor from the command line.
//! It runs `SELECT * FROM tablegate.advise(…)` on a running server
//! (`--connect`) or on a data directory served in this process, and prints
//! the ranked designs as a table or (`--format json`) as JSON. `--apply`
//! creates a table keyed by the recommended design (or `--rank N`) and
//! copies the rows into it through the throttled write path, leaving the
//! table untouched.

use std::path::PathBuf;

use crate::serve::Embedded;
use clap::Args;

/// `tablegate advise` arguments.
#[derive(Debug, Args)]
pub struct AdviseArgs {
    /// The table to advise on.
    pub table: String,
    /// A workload file: SQL statements ending in `;`, each optionally after
    /// a `-- weight: N` (relative) or `-- rate: N` (calls per second) line;
    /// `BEGIN; …; COMMIT;` groups writes that must be atomic. Without it,
    /// the server's statement log (the statements that name the table,
    /// weighted by their calls).
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
    /// Create `<table>_by_<partition key>` keyed by the recommended design
    /// and copy the rows into it (the table itself is left as it is).
    #[arg(long)]
    pub apply: bool,
    /// With --apply: the design of this rank instead of the first.
    #[arg(long, default_value_t = 1, requires = "apply")]
    pub rank: i64,
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
    .map_err(crate::pgenv::db_error)?;
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
                "apply_sql": r.get::<_, Option<String>>("apply_sql"),
            })
        })
        .collect();
    if args.apply {
        return apply(args, conn, &client, &designs).await;
    }
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
        let design = design_name(d);
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

/// `--apply`: runs the chosen design's SQL (CREATE TABLE, then INSERT …
/// SELECT), printing the rows copied every second.
async fn apply(
    args: &AdviseArgs,
    conn: &tokio_postgres::Config,
    client: &tokio_postgres::Client,
    designs: &[serde_json::Value],
) -> Result<(), String> {
    let design = designs
        .iter()
        .find(|d| d["rank"].as_i64() == Some(args.rank))
        .ok_or_else(|| format!("no usable design of rank {}", args.rank))?;
    let keys = design_name(design);
    let sql = design["apply_sql"].as_str().ok_or_else(|| {
        format!("the design {keys} has a key with no SQL expression yet (a hash bucket, an inverted value, or a timestamp or uuid part); apply another rank")
    })?;
    let (create, insert) = sql.split_once(";\n").ok_or("malformed apply SQL")?;
    let new = create
        .strip_prefix("CREATE TABLE ")
        .and_then(|r| r.split(' ').next())
        .unwrap_or_default()
        .to_owned();
    let total: i64 = client
        .query_one(&format!("SELECT count(*) FROM {}", args.table), &[])
        .await
        .map_err(crate::pgenv::db_error)?
        .get(0);
    eprintln!("{create}");
    client
        .batch_execute(create)
        .await
        .map_err(crate::pgenv::db_error)?;
    eprintln!("{insert}");
    let copy = client.execute(insert, &[]);
    tokio::pin!(copy);
    let started = std::time::Instant::now();
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    tick.tick().await;
    // A second session follows the new table's size while the first copies.
    let watcher = crate::pgenv::connect(conn).await.ok();
    let copied = loop {
        tokio::select! {
            r = &mut copy => break r.map_err(crate::pgenv::db_error)?,
            _ = tick.tick() => {
                // The table statistics, not a count: a scan would spend
                // the throttling budget the copy runs under.
                let done = match &watcher {
                    Some(w) => w
                        .query_one(
                            "SELECT entities FROM tablegate.tables WHERE table_name = $1",
                            &[&new],
                        )
                        .await
                        .ok()
                        .and_then(|r| r.get::<_, Option<i64>>(0))
                        .map_or_else(|| "…".to_owned(), |n| n.to_string()),
                    None => "…".to_owned(),
                };
                eprintln!(
                    "copying: {done} of {total} rows, {:.0} s",
                    started.elapsed().as_secs_f64()
                );
            }
        }
    };
    println!(
        "created {new} keyed by {keys} and copied {copied} of {total} rows in {:.1} s; {} is unchanged",
        started.elapsed().as_secs_f64(),
        args.table
    );
    Ok(())
}

/// `(partition key, row key)` of a report row.
fn design_name(d: &serde_json::Value) -> String {
    let pk = d["partition_key"].as_str().unwrap_or("");
    match d["row_key"].as_str() {
        Some(rk) => format!("({pk}, {rk})"),
        None => format!("({pk})"),
    }
}
