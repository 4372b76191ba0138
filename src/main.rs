//! The `tablegate` binary.
//!
//! Today it has one job, `tablegate demo`: load the seeds' race
//! registrations into a durable embedded store behind the partition layer
//! and show what one access of each class costs. `serve` (the PostgreSQL
//! wire protocol) arrives with the gateway; until then the demo talks to the
//! store API directly.

mod demo;
mod race;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "tablegate",
    version,
    about = "A PostgreSQL-wire SQL gateway over a partitioned table store with Azure Table semantics"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Load the seeds' race-registration data and run one access of each
    /// class (point, row-range, partition-range, full scan), showing what
    /// each costs.
    Demo {
        /// Data directory (created if missing; loaded once).
        #[arg(long, default_value = "tablegate-data")]
        data: PathBuf,
        /// Runners per event and distance (each is two entities).
        #[arg(long, default_value_t = 2_000)]
        runners: u32,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo { data, runners } => demo::run(&data, runners).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tablegate: {e}");
            ExitCode::FAILURE
        }
    }
}
