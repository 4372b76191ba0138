//! `tablegate split`: pre-splits a table's key space into range
//! partitions spread over the partition servers, on the data directory of
//! a stopped server — what the balancer would reach after a long busy
//! period, ready before a load (as HBase's pre-split regions or TiDB's
//! `SPLIT TABLE … REGIONS n`). Boundaries are the table's own
//! PartitionKeys, so the ranges hold about equally many keys.

use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use tablegate_store::{LocalStore, PartitionConfig, PartitionedStore, StoreOptions};

/// `tablegate split` arguments.
#[derive(Debug, Args)]
pub struct SplitArgs {
    /// The table.
    table: String,
    /// Range partitions wanted (at most one per PartitionKey).
    #[arg(long)]
    ranges: usize,
    /// Partition servers to spread them over (the server's
    /// `partitions.servers`).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    servers: u64,
    /// Data directory (of a stopped server).
    #[arg(long, default_value = "tablegate-data", env = "TABLEGATE_DATA")]
    data: PathBuf,
}

/// Runs `tablegate split`.
pub async fn run(args: SplitArgs) -> Result<(), String> {
    tokio::task::spawn_blocking(move || split(&args))
        .await
        .map_err(|e| e.to_string())?
}

/// The partition layer over a stopped server's data directory, unthrottled
/// and with instant range moves (for offline tools: `split`, `index`).
/// Blocking.
pub fn open_stopped(data: &Path, servers: usize) -> Result<PartitionedStore, String> {
    let local = LocalStore::open(data, StoreOptions::default()).map_err(|e| {
        format!(
            "cannot open data directory {} (a server running on it holds it: stop it first): {e}",
            data.display()
        )
    })?;
    PartitionedStore::new(
        local,
        PartitionConfig {
            servers,
            targets: None,
            move_offline: Duration::ZERO,
            ..Default::default()
        },
    )
    .map_err(|e| e.to_string())
}

fn split(args: &SplitArgs) -> Result<(), String> {
    let store = open_stopped(&args.data, args.servers as usize)?;
    let keys = store
        .partition_stats_blocking(&args.table, Bound::Unbounded, Bound::Unbounded, usize::MAX)
        .map_err(|e| format!("table {}: {e}", args.table))?;
    if keys.is_empty() {
        return Err(format!(
            "table {} has no rows: its PartitionKeys are the boundaries, load some first",
            args.table
        ));
    }
    let wanted = args.ranges.clamp(1, keys.len());
    let n = keys.len();
    eprintln!(
        "splitting {} ({n} PartitionKeys) into {wanted} range partitions over {} servers ...",
        args.table, args.servers
    );
    // Range i starts at key ⌊i·n/wanted⌋ and goes to server i mod
    // servers; the first range starts at "".
    store
        .move_range_blocking(&args.table, "", 0)
        .map_err(|e| e.to_string())?;
    for i in 1..wanted {
        let at = &keys[i * n / wanted].partition_key;
        store
            .split_blocking(&args.table, at)
            .map_err(|e| e.to_string())?;
        store
            .move_range_blocking(&args.table, at, i % args.servers as usize)
            .map_err(|e| e.to_string())?;
        if i % 1000 == 0 {
            eprintln!("  {i} of {wanted}");
        }
    }
    let ranges = store.ranges(&args.table).map_err(|e| e.to_string())?;
    println!(
        "{}: {} range partitions over {} servers",
        args.table,
        ranges.len(),
        args.servers
    );
    Ok(())
}
