//! The `tablegate` binary: `serve` a data directory over the PostgreSQL
//! wire protocol, or run the `demo` (the seeds' race registrations, loaded
//! on first use, then served).

mod demo;
mod race;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tablegate_gateway::{AuthMode, Server, ServerConfig, UserStore};
use tablegate_planner::Planner;
use tablegate_store::{LocalStore, PartitionConfig, PartitionedStore, StoreOptions};

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

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// Data directory (created if missing).
    #[arg(long, default_value = "tablegate-data", env = "TABLEGATE_DATA")]
    data: PathBuf,
    /// Address to listen on (loopback only: authentication is trust).
    #[arg(long, default_value = "127.0.0.1:5433", env = "TABLEGATE_LISTEN")]
    listen: SocketAddr,
    /// Most concurrent connections; more are refused with SQLSTATE 53300.
    #[arg(long, default_value_t = 100)]
    max_connections: usize,
    /// Memory one session's analytics queries may hold, in MiB (sorts and
    /// aggregates spill to disk; what cannot spill fails with 53200).
    #[arg(long, default_value_t = 1024, env = "TABLEGATE_ENGINE_MEMORY_MB")]
    engine_memory_mb: usize,
    /// Throttling at the seeds' scalability targets (on) or none (off).
    #[arg(long, default_value = "on", value_parser = ["on", "off"])]
    throttle: String,
    /// Client authentication: trust (loopback only) or scram (SCRAM-SHA-256
    /// against users set with `tablegate user set`).
    #[arg(long, default_value = "trust", value_parser = ["trust", "scram"], env = "TABLEGATE_AUTH")]
    auth: String,
    /// TLS certificate chain (PEM). With --tls-key, TLS is required for
    /// every connection.
    #[arg(long, requires = "tls_key", env = "TABLEGATE_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, requires = "tls_cert", env = "TABLEGATE_TLS_KEY")]
    tls_key: Option<PathBuf>,
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
    /// Manage the users of SCRAM authentication.
    User {
        #[command(subcommand)]
        action: UserAction,
    },
}

#[derive(Debug, Subcommand)]
enum UserAction {
    /// Create a user or change its password. The password is read from
    /// TABLEGATE_PASSWORD or, if unset, from the first line of standard
    /// input; only its SCRAM verifier is stored.
    Set {
        /// User name.
        name: String,
        /// Data directory.
        #[arg(long, default_value = "tablegate-data", env = "TABLEGATE_DATA")]
        data: PathBuf,
    },
}

async fn open(args: &ServeArgs) -> Result<Planner, String> {
    let local = LocalStore::open(&args.data, StoreOptions::default()).map_err(|e| e.to_string())?;
    let config = PartitionConfig {
        targets: (args.throttle == "on").then(Default::default),
        ..Default::default()
    };
    let store = PartitionedStore::new(local, config).map_err(|e| e.to_string())?;
    Planner::open(store).await.map_err(|e| e.to_string())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

async fn serve(planner: Planner, args: &ServeArgs) -> Result<(), String> {
    let _balancer = planner.store().spawn_balancer();
    let auth = match args.auth.as_str() {
        "scram" => {
            let system = std::sync::Arc::new(planner.store().local().clone());
            AuthMode::Scram(std::sync::Arc::new(
                UserStore::open(system).await.map_err(|e| e.to_string())?,
            ))
        }
        _ => AuthMode::Trust,
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tablegate_gateway::tls::acceptor(cert, key)?),
        _ => None,
    };
    let server = Server::bind(
        args.listen,
        planner,
        ServerConfig {
            max_connections: args.max_connections,
            engine_memory: args.engine_memory_mb.saturating_mul(1 << 20),
            auth,
            tls,
            ..Default::default()
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    let addr = server.local_addr().map_err(|e| e.to_string())?;
    println!("tablegate listening on {addr}");
    println!(
        "connect with: psql -h {} -p {} -U tablegate tablegate",
        addr.ip(),
        addr.port()
    );
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    server
        .run(shutdown_signal())
        .await
        .map_err(|e| e.to_string())?;
    println!("tablegate stopped");
    Ok(())
}

fn main() -> ExitCode {
    // Bigger thread stacks than tokio's 2 MiB default: planning recurses
    // over statement trees (their depth is bounded by the planner's
    // operator limit, this is margin).
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(8 << 20)
        .build()
        .expect("tokio runtime");
    runtime.block_on(run())
}

async fn run() -> ExitCode {
    let cli = Cli::parse();
    let result = async {
        match cli.command {
            Command::Serve(args) => {
                let planner = open(&args).await?;
                serve(planner, &args).await
            }
            Command::User {
                action: UserAction::Set { name, data },
            } => {
                let password = match std::env::var("TABLEGATE_PASSWORD") {
                    Ok(p) => p,
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
                let local =
                    LocalStore::open(&data, StoreOptions::default()).map_err(|e| e.to_string())?;
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
            Command::Demo {
                serve: args,
                runners,
                explain_only,
            } => {
                let planner = demo::open(&args.data, runners).await?;
                if explain_only {
                    return demo::explain_examples(&planner).await;
                }
                // Reopen with the requested throttle setting.
                drop(planner);
                let planner = open(&args).await?;
                demo::describe(&planner)?;
                println!();
                serve(planner, &args).await
            }
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
