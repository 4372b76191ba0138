//! `tablegate index verify|repair TABLE`: checks that every partition's
//! local index entries are exactly those its rows call for, and repairs
//! drift (missing entries written, stale ones deleted), one partition at a
//! time, on the data directory of a stopped server or on an Azure storage
//! account (`--azure-connection-string`). Global indexes: the
//! changes still queued are applied first (as a server's start would),
//! then each index table is compared with its rows. Writes keep entries
//! in the rows' own entity-group transactions, so drift means a bug or a
//! store changed by another client; Cassandra's materialized views showed
//! what an index without a way to find and fix drift costs its users.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tablegate_planner::Planner;
use tablegate_planner::global;
use tablegate_planner::index::{self, Check};
use tablegate_store::{Backend, PartitionConfig, RetryPolicy};

/// What to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Action {
    /// Report drift; exit status 1 when there is any.
    Verify,
    /// Report drift and fix it.
    Repair,
}

/// `tablegate index` arguments.
#[derive(Debug, Args)]
pub struct IndexArgs {
    /// verify or repair.
    action: Action,
    /// The table whose indexes to check.
    table: String,
    /// Data directory (of a stopped server).
    #[arg(long, default_value = "tablegate-data", env = "TABLEGATE_DATA")]
    data: PathBuf,
    /// Check the table in this Azure storage account instead (a
    /// connection string; `UseDevelopmentStorage=true` for Azurite).
    /// Gateways may go on serving while it verifies; repair while writes
    /// to the table are quiet (a row changed during its repair may need
    /// another).
    #[arg(long, hide_env_values = true)]
    azure_connection_string: Option<String>,
}

/// Runs `tablegate index`.
pub async fn run(args: IndexArgs) -> Result<(), String> {
    let store: Backend = match &args.azure_connection_string {
        Some(conn) => {
            let store = tablegate_azure::AzureStore::connect(conn, None)
                .await
                .map_err(|e| format!("cannot reach the Azure Table service: {e}"))?;
            Backend::Remote(std::sync::Arc::new(store))
        }
        None => {
            let data = args.data.clone();
            tokio::task::spawn_blocking(move || {
                crate::split::open_stopped(&data, PartitionConfig::default().servers)
            })
            .await
            .map_err(|e| e.to_string())??
            .into()
        }
    };
    let planner = Planner::open(store).await.map_err(|e| e.to_string())?;
    let table = planner
        .catalog()
        .table(&args.table)
        .map_err(|e| e.to_string())?;
    if table.indexes.is_empty() {
        return Err(format!("table {} has no indexes", table.name));
    }
    let repair = args.action == Action::Repair;
    let progress = |c: &Check| {
        eprintln!(
            "  {} partitions, {} rows, {} entries read; {} missing, {} stale",
            c.partitions, c.rows, c.entries, c.missing, c.stale
        );
    };
    let retry = RetryPolicy::default();
    let mut c = index::verify(planner.store(), &table, repair, &retry, &progress)
        .await
        .map_err(|e| e.to_string())?;
    if table.indexes.iter().any(|i| i.global) {
        eprintln!("  applying the global indexes' queued changes");
        while !planner
            .maintainer()
            .caught_up(&table.name, std::time::Duration::from_secs(2))
            .await
        {
            let lag = planner.maintainer().lag(&table.name);
            eprintln!(
                "  {} partitions with queued changes left, {} rows applied",
                lag.partitions, lag.applied
            );
        }
    }
    for ix in table.indexes.iter().filter(|i| i.global) {
        let g = global::verify(planner.store(), &table, ix, repair, &retry)
            .await
            .map_err(|e| e.to_string())?;
        c.entries += g.entries;
        c.missing += g.missing;
        c.stale += g.stale;
        c.repaired += g.repaired;
        c.examples.extend(g.examples);
    }
    for e in &c.examples {
        println!("{e}");
    }
    println!(
        "{}: {} partitions, {} rows, {} index entries ({}): {} missing, {} stale, {} duplicate UNIQUE values{}",
        table.name,
        c.partitions,
        c.rows,
        c.entries,
        table
            .indexes
            .iter()
            .map(|i| format!("{}{}", i.name, if i.building { " (building)" } else { "" }))
            .collect::<Vec<_>>()
            .join(", "),
        c.missing,
        c.stale,
        c.duplicates,
        if repair {
            format!(", {} repaired", c.repaired)
        } else {
            String::new()
        }
    );
    if c.duplicates > 0 {
        return Err(
            "rows share values of a UNIQUE index: change or delete all but one of each, then repair"
                .into(),
        );
    }
    if repair {
        // A build a crash interrupted is complete once repaired.
        for ix in table.indexes.iter().filter(|i| i.building) {
            planner
                .catalog()
                .index_ready(&ix.name, ix.id)
                .await
                .map_err(|e| e.to_string())?;
            println!("index {} built: lookups use it from now on", ix.name);
        }
    } else if c.missing + c.stale > 0 {
        return Err("the index entries do not match the rows: run `tablegate index repair`".into());
    }
    Ok(())
}
