//! The `tablegate` binary:
//!
//! - `serve` — a data directory over the PostgreSQL wire protocol
//!   ([`config`] merges the TOML file, environment and flags; [`serve`]
//!   runs it, with the Prometheus endpoint);
//! - `demo` — the seeds' race registrations, loaded on first use, served
//!   ([`demo`], [`race`]);
//! - `stress` — the seeds' partition stress test ([`stress`]);
//! - `import` — CSV, Parquet or JSON lines into a table ([`import`]);
//! - `split` — pre-split a table into range partitions ([`split`]);
//! - `index verify|repair` — find and fix drift between rows and their
//!   local index entries ([`index`]);
//! - `user set` — SCRAM users.

mod advise;
mod config;
mod demo;
mod import;
mod index;
mod pgenv;
mod race;
mod serve;
mod split;
mod stress;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tablegate_gateway::UserStore;
use tablegate_store::{LocalStore, StoreOptions};

use config::ServeArgs;

/// mimalloc, not the system allocator: the serving path allocates small
/// objects on every request from many threads, where glibc's malloc spent a
/// third of a 100-row range query's CPU (bench/README.md). Built without
/// transparent huge pages (the `no_thp` feature; Cargo.toml says why).
/// The `system-alloc` feature builds with the system allocator instead, for
/// heap profilers that intercept `malloc` (heaptrack): never for serving.
#[cfg(not(feature = "system-alloc"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    /// Serve a data directory over the PostgreSQL wire protocol.
    Serve(ServeArgs),
    /// Load the seeds' race registrations (on first use) and serve them.
    Demo {
        #[command(flatten)]
        serve: ServeArgs,
        /// Runners per event and distance (each is two entities).
        #[arg(long, default_value_t = 2_000)]
        runners: u32,
        /// Print EXPLAIN ANALYZE of the example queries and exit instead
        /// of serving.
        #[arg(long)]
        explain_only: bool,
    },
    /// The seeds' partition stress test: drive one PartitionKey at peak and
    /// report what it admits against its target.
    Stress(stress::StressArgs),
    /// Import a CSV, Parquet or JSON-lines file into a table.
    Import(import::ImportArgs),
    /// Pre-split a table into range partitions spread over the partition
    /// servers (on a stopped server's data directory).
    Split(split::SplitArgs),
    /// Check a table's index entries against its rows (`verify`), or fix
    /// them (`repair`), on a stopped server's data directory or an Azure
    /// storage account.
    Index(index::IndexArgs),
    /// Rank PartitionKey/RowKey designs for a table from its data and a
    /// workload (the statement log, or a SQL file).
    Advise(advise::AdviseArgs),
    /// Manage the users of SCRAM authentication.
    User {
        #[command(subcommand)]
        action: UserAction,
    },
}

#[derive(Debug, Subcommand)]
enum UserAction {
    /// Create a user or change its password. The password is read from
    /// TABLEGATE_PASSWORD or, if unset, from the terminal without echo (or
    /// the first line of standard input when it is not a terminal); only
    /// its SCRAM verifier is stored.
    Set {
        /// User name.
        name: String,
        /// Data directory.
        #[arg(long, default_value = "tablegate-data", env = "TABLEGATE_DATA")]
        data: PathBuf,
    },
}

fn main() -> ExitCode {
    init_logging();
    // Each connection holds descriptors; the soft limit (often 1,024) is
    // raised to the hard one, as PostgreSQL's max_files_per_process
    // assumes. The server budgets connections against what it gets.
    if let Err(e) = rlimit::increase_nofile_limit(u64::MAX) {
        tracing::warn!("cannot raise the open-file limit: {e}");
    }
    // Bigger thread stacks than tokio's 2 MiB default: planning recurses
    // over statement trees (their depth is bounded by the planner's
    // operator limit, this is margin).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(8 << 20)
        .build()
        .expect("tokio runtime");
    let code = runtime.block_on(run());
    // Work still running after the server stopped (a scan on the blocking
    // pool) must not hold the process: stop within a bounded time.
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    code
}

/// Logs and statement spans go to stderr; TABLEGATE_LOG (or RUST_LOG)
/// filters them, e.g. TABLEGATE_LOG=tablegate_gateway=debug shows one line
/// per statement with its class, rows and time. By default, warnings and
/// the progress of the one-time packing of a data directory from before
/// chunks (it can take minutes on a large one). The engine's own log lines
/// (fjall, lsm-tree, DataFusion, reqwest, rustls use the `log` crate) are
/// bridged in, so a failing disk shows there with its cause.
/// TABLEGATE_LOG_FORMAT=json writes one JSON object per line; colours only
/// when stderr is a terminal.
fn init_logging() {
    use std::io::IsTerminal as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("TABLEGATE_LOG")
        .or_else(|_| tracing_subscriber::EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| {
            tracing_subscriber::EnvFilter::new("warn,tablegate_store::engine::packed=info")
        });
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    // `init` also installs the `log` bridge (the `tracing-log` feature).
    if std::env::var("TABLEGATE_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json")) {
        builder.json().init();
    } else {
        builder.with_ansi(std::io::stderr().is_terminal()).init();
    }
}

async fn set_user(name: String, data: PathBuf) -> Result<(), String> {
    use std::io::IsTerminal as _;
    let password = match std::env::var("TABLEGATE_PASSWORD") {
        Ok(p) => p,
        // Typed at a terminal: not echoed, and twice (as createuser -P
        // asks): a typo would lock the user out.
        Err(_) if std::io::stdin().is_terminal() => {
            let first = rpassword::prompt_password(format!("password for {name}: "))
                .map_err(|e| e.to_string())?;
            let again =
                rpassword::prompt_password("enter it again: ").map_err(|e| e.to_string())?;
            if first != again {
                return Err("the passwords do not match; nothing was changed".to_owned());
            }
            first
        }
        Err(_) => {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .map_err(|e| e.to_string())?;
            line.trim_end_matches(['\r', '\n']).to_owned()
        }
    };
    if password.is_empty() {
        return Err("an empty password is not allowed".to_owned());
    }
    let local = LocalStore::open(&data, StoreOptions::default()).map_err(|e| e.to_string())?;
    let users = UserStore::open(std::sync::Arc::new(local))
        .await
        .map_err(|e| e.to_string())?;
    users
        .set_password(&name, &password)
        .await
        .map_err(|e| e.to_string())?;
    println!("user {name} set (SCRAM-SHA-256 verifier stored, not the password)");
    Ok(())
}

async fn run() -> ExitCode {
    let cli = Cli::parse();
    let result = async {
        match cli.command {
            Command::Serve(args) => {
                let settings = args.resolve()?;
                if args.print_config {
                    print!("{}", settings.to_toml_redacted());
                    return Ok(());
                }
                let planner = serve::open(&settings).await?;
                serve::serve(planner, &settings).await
            }
            Command::User {
                action: UserAction::Set { name, data },
            } => set_user(name, data).await,
            Command::Demo {
                serve: args,
                runners,
                explain_only,
            } => {
                let settings = args.resolve()?;
                if args.print_config {
                    print!("{}", settings.to_toml_redacted());
                    return Ok(());
                }
                let planner = demo::open(&settings.data, runners).await?;
                if explain_only {
                    return demo::explain_examples(&planner).await;
                }
                // Reopen with the requested throttle setting.
                drop(planner);
                let planner = serve::open(&settings).await?;
                demo::describe(&planner)?;
                println!();
                serve::serve(planner, &settings).await
            }
            Command::Stress(args) => stress::run(args).await,
            Command::Import(args) => import::run(args).await,
            Command::Advise(args) => advise::run(args).await,
            Command::Split(args) => split::run(args).await,
            Command::Index(args) => index::run(args).await,
        }
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tablegate: {e}");
            ExitCode::FAILURE
        }
    }
}
