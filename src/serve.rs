//! Running the server: open the store with the settings, bind, serve until
//! Ctrl-C or SIGTERM; the Prometheus endpoint; an in-process server for
//! `stress` and `import` when they are not pointed at a running one.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tablegate_gateway::admission::Limits;
use tablegate_gateway::{AuthMode, Server, ServerConfig, UserStore};
use tablegate_planner::Planner;
use tablegate_store::{Backend, LocalStore, PartitionedStore, StoreOptions};

use crate::config::Settings;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Opens the settings' backend: the data directory with the partition
/// layer, or the Azure storage account.
pub async fn open(settings: &Settings) -> Result<Planner, String> {
    if settings.backend == "azure" {
        let conn = settings
            .azure
            .connection_string
            .as_deref()
            .ok_or("backend azure needs a connection string")?;
        let service = match settings.azure.service.as_deref() {
            Some("storage") => Some(tablegate_azure::Service::Storage),
            Some("cosmos") => Some(tablegate_azure::Service::Cosmos),
            _ => None,
        };
        let store = tablegate_azure::AzureStore::connect(conn, service)
            .await
            .map_err(|e| format!("cannot reach the Azure Table service: {e}"))?;
        return Planner::open(Backend::Remote(Arc::new(store)))
            .await
            .map_err(err);
    }
    let options = StoreOptions {
        // A test hook (`store/src/engine/faults.rs`): never set in production.
        fault_file: std::env::var_os("TABLEGATE_INJECT_FAULTS").map(Into::into),
        cache_bytes: settings.cache_mb << 20,
        memtable_bytes: Some(settings.memtable_mb << 20),
        ..StoreOptions::default()
    };
    let local = LocalStore::open(&settings.data, options).map_err(|e| {
        let todo = match e {
            tablegate_store::StoreError::Corrupt(_) => DAMAGED,
            _ => "",
        };
        format!(
            "cannot open data directory {}: {e}{todo}",
            settings.data.display()
        )
    })?;
    let store = PartitionedStore::new(local, settings.partition_config()).map_err(err)?;
    Planner::open(store).await.map_err(|e| {
        let todo = match &e {
            tablegate_planner::PlanError::Catalog(
                tablegate_planner::catalog::CatalogError::Corrupt(_),
            ) => DAMAGED,
            _ => "",
        };
        format!(
            "cannot open the table catalog in {}: {e}{todo}",
            settings.data.display()
        )
    })
}

/// What to do when the data directory is damaged.
const DAMAGED: &str = "\ntablegate does not start on damaged data: going on would lose \
     acknowledged writes or serve wrong rows. Restore the data directory from a backup, \
     and keep the damaged copy to find out what happened (the disk, a copy made while \
     the server ran, a file edited by hand).";

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

/// How clients authenticate, as the settings say (the config file's users
/// set first).
async fn auth_mode(planner: &Planner, settings: &Settings) -> Result<AuthMode, String> {
    Ok(match settings.auth.mode.as_str() {
        "scram" => {
            let users = UserStore::open(planner.store().system())
                .await
                .map_err(err)?;
            for u in &settings.auth.users {
                users
                    .set_password(&u.name, &u.password)
                    .await
                    .map_err(err)?;
            }
            AuthMode::Scram(Arc::new(users))
        }
        _ => AuthMode::Trust,
    })
}

/// Binds a server over `planner` as the settings say.
pub async fn bind(planner: Planner, settings: &Settings) -> Result<Server, String> {
    let auth = auth_mode(&planner, settings).await?;
    let tls = match &settings.tls {
        Some(t) => Some(tablegate_gateway::tls::acceptor(&t.cert, &t.key)?),
        None => None,
    };
    let l = &settings.limits;
    Server::bind(
        settings.listen,
        planner,
        ServerConfig {
            limits: Limits {
                max_connections: settings.max_connections,
                reserved_connections: l
                    .reserved_connections
                    .min(settings.max_connections.saturating_sub(1)),
                reserved_for: l.reserved_for.clone(),
                max_starting: l.max_starting_connections,
                authentication_timeout: Duration::from_secs(l.authentication_timeout),
                max_message_bytes: l.max_message_mb << 20,
            },
            analytics_running: l.analytics_concurrency,
            analytics_queue_wait: Duration::from_secs(l.analytics_queue_wait),
            engine_memory: settings.engine_memory_mb.saturating_mul(1 << 20),
            auth,
            tls,
            session_defaults: settings.session.settings(),
            ..Default::default()
        },
    )
    .await
    .map_err(|e| format!("cannot listen on {}: {e}", settings.listen))
}

/// Serves until Ctrl-C or SIGTERM, printing where and how to connect.
pub async fn serve(planner: Planner, settings: &Settings) -> Result<(), String> {
    let partitioned = planner.store().partitioned().cloned();
    let balancer = partitioned.as_ref().map(|p| p.spawn_balancer());
    if let Some(addr) = settings.metrics_listen {
        start_metrics(addr, partitioned.clone(), planner.clone())?;
        println!("metrics on http://{addr}/metrics");
    }
    let server = bind(planner, settings).await?;
    let addr = server.local_addr().map_err(err)?;
    let flight = match settings.flight_listen {
        Some(at) => Some(start_flight(at, &server, settings).await?),
        None => None,
    };
    let console = match settings.http_listen {
        Some(at) => Some(start_console(at, &server, settings).await?),
        None => None,
    };
    if settings.backend != "azure" {
        // The default (`tablegate-data`) is relative to the working
        // directory: say where the data really is.
        let data = std::path::absolute(&settings.data).unwrap_or_else(|_| settings.data.clone());
        println!("data directory: {}", data.display());
    }
    println!("tablegate listening on {addr}");
    let _socket = unix_socket(&settings.unix_socket_dir, addr).await;
    println!(
        "connect with: psql -h {} -p {} -U tablegate tablegate",
        addr.ip(),
        addr.port()
    );
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
    let served = server.run(shutdown_signal()).await.map_err(err);
    for (stop, task) in [flight, console].into_iter().flatten() {
        let _ = stop.send(());
        let _ = task.await;
    }
    if let Some(balancer) = &balancer {
        // Its tick saves too: the last save is the one below.
        balancer.abort();
    }
    if let Some(p) = partitioned {
        // The key visualizer's filling slot too; finished ones are written
        // as they finish.
        match tokio::task::spawn_blocking(move || p.save_key_visualizer_blocking()).await {
            Ok(Err(e)) => eprintln!("cannot write the key visualizer's history: {e}"),
            Err(e) => eprintln!("cannot write the key visualizer's history: {e}"),
            Ok(Ok(())) => {}
        }
    }
    served?;
    println!("tablegate stopped");
    Ok(())
}

/// A side listener's stop signal and task.
type Stoppable = (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<(), String>>,
);

/// Runs a side listener (`run` given the future that completes when it
/// must stop) until the returned sender says so.
fn until_stopped<F>(run: impl FnOnce(tokio::sync::oneshot::Receiver<()>) -> F) -> Stoppable
where
    F: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    (stop, tokio::spawn(run(stopped)))
}

/// Binds the web console beside `server` (its users, TLS, session settings
/// and analytics pool) and serves it until told to stop.
async fn start_console(
    at: SocketAddr,
    server: &Server,
    settings: &Settings,
) -> Result<Stoppable, String> {
    let tls = match &settings.tls {
        Some(t) => Some(tablegate_gateway::tls::acceptor(&t.cert, &t.key)?),
        None => None,
    };
    let config = tablegate_gateway::console::ConsoleConfig {
        auth: auth_mode(server.planner(), settings).await?,
        tls,
        session_defaults: settings.session.settings(),
        pool: server.analytics_pool(),
        keyviz_buckets: 1000,
    };
    let console =
        tablegate_gateway::console::ConsoleServer::bind(at, server.planner().clone(), config)
            .await
            .map_err(|e| format!("cannot serve the console on {at}: {e}"))?;
    let bound = console.local_addr().map_err(err)?;
    let scheme = if settings.tls.is_some() {
        "https"
    } else {
        "http"
    };
    println!("console on {scheme}://{bound}/");
    Ok(until_stopped(|stopped| {
        console.run(async {
            let _ = stopped.await;
        })
    }))
}

/// Binds the Arrow Flight SQL endpoint beside `server` (its users, TLS,
/// session settings and analytics pool) and serves it until told to stop.
async fn start_flight(
    at: SocketAddr,
    server: &Server,
    settings: &Settings,
) -> Result<Stoppable, String> {
    let tls = match &settings.tls {
        Some(t) => {
            let read = |p: &std::path::Path| {
                std::fs::read_to_string(p).map_err(|e| format!("TLS {}: {e}", p.display()))
            };
            Some((read(&t.cert)?, read(&t.key)?))
        }
        None => None,
    };
    let config = tablegate_gateway::flight::FlightConfig {
        auth: auth_mode(server.planner(), settings).await?,
        tls,
        session_defaults: settings.session.settings(),
        pool: server.analytics_pool(),
        token_lifetime: Duration::from_secs(settings.flight_token_seconds),
        max_sessions: settings.max_connections,
    };
    let flight =
        tablegate_gateway::flight::FlightServer::bind(at, server.planner().clone(), config)
            .await
            .map_err(|e| format!("cannot serve Flight SQL on {at}: {e}"))?;
    let bound = flight.local_addr().map_err(err)?;
    let scheme = if settings.tls.is_some() {
        "grpc+tls"
    } else {
        "grpc"
    };
    println!("Arrow Flight SQL on {scheme}://{bound}");
    Ok(until_stopped(|stopped| {
        flight.run(async {
            let _ = stopped.await;
        })
    }))
}

/// The Unix-domain socket beside `addr`, when `dir` is set and usable; a
/// note on stdout either way (the server runs without one).
#[cfg(unix)]
async fn unix_socket(
    dir: &std::path::Path,
    addr: SocketAddr,
) -> Option<tablegate_gateway::unix::UnixRelay> {
    if dir.as_os_str().is_empty() {
        return None;
    }
    if !dir.is_dir() {
        println!(
            "no Unix-domain socket: {} does not exist (--unix-socket-dir)",
            dir.display()
        );
        return None;
    }
    match tablegate_gateway::unix::UnixRelay::start(dir, addr).await {
        Ok(relay) => {
            println!(
                "Unix-domain socket: {} (psql -p {} without -h)",
                relay.path().display(),
                addr.port()
            );
            Some(relay)
        }
        Err(e) => {
            println!("no Unix-domain socket in {}: {e}", dir.display());
            None
        }
    }
}

#[cfg(not(unix))]
async fn unix_socket(_: &std::path::Path, _: SocketAddr) -> Option<()> {
    None
}

/// A server running inside this process (for `stress`, `import` and `advise`
/// without `--connect`): real sockets, real protocol.
#[derive(Debug)]
pub struct Embedded {
    /// Where it listens.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), String>>,
}

impl Embedded {
    /// Where a command's statements go: the running server of `connect`
    /// (a connection string), or else `data` (default `tablegate-data`)
    /// served in this process, returned to be stopped when done.
    pub async fn or_connect(
        connect: Option<&str>,
        data: Option<&std::path::Path>,
    ) -> Result<(tokio_postgres::Config, Option<Embedded>), String> {
        if let Some(c) = connect {
            return Ok((crate::pgenv::client_config(c)?, None));
        }
        let settings = Settings {
            data: data.map_or_else(|| "tablegate-data".into(), Into::into),
            ..Default::default()
        };
        let server = Embedded::start(settings).await?;
        Ok((server.config(), Some(server)))
    }

    /// Opens `settings.data` and serves it on a free loopback port.
    pub async fn start(mut settings: Settings) -> Result<Embedded, String> {
        settings.listen = "127.0.0.1:0".parse().expect("address");
        settings.auth.mode = "trust".into();
        settings.tls = None;
        let planner = open(&settings).await?;
        let server = bind(planner, &settings).await?;
        let addr = server.local_addr().map_err(err)?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server
                .run(async {
                    let _ = rx.await;
                })
                .await
                .map_err(err)
        });
        Ok(Embedded {
            addr,
            stop: Some(tx),
            task,
        })
    }

    /// Where to connect to it.
    pub fn config(&self) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        c.host(self.addr.ip().to_string())
            .port(self.addr.port())
            .user("tablegate")
            .dbname("tablegate");
        c
    }

    /// Stops it; the store closes (and syncs) when the server is gone.
    pub async fn stop(mut self) -> Result<(), String> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        (&mut self.task).await.map_err(err)?
    }
}

/// Installs the Prometheus recorder with its HTTP listener, and a task
/// that publishes the partition layer's state (throttle counters, server
/// load, hot partitions) and the global indexes' lag every second.
/// Statement metrics come from the gateway's telemetry.
fn start_metrics(
    addr: SocketAddr,
    store: Option<PartitionedStore>,
    planner: Planner,
) -> Result<(), String> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full("tablegate_query_duration_seconds".into()),
            &[
                0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                10.0,
            ],
        )
        .map_err(err)?
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full("tablegate_backoff_seconds".into()),
            &[
                0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ],
        )
        .map_err(err)?
        // A PartitionKey that cooled down leaves the hot-partition gauges.
        .idle_timeout(
            metrics_util::MetricKindMask::GAUGE,
            Some(Duration::from_secs(30)),
        )
        .install()
        .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
    describe_metrics();
    tablegate_gateway::telemetry::bind_metrics();
    let build_info = metrics::gauge!(
        "tablegate_build_info",
        "version" => env!("CARGO_PKG_VERSION"),
        "postgres_version" => tablegate_gateway::settings::SERVER_VERSION
    );
    build_info.set(1.0);
    // A remote service's partition layer publishes nothing to us.
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            // Re-set every second: the idle timeout drops gauges that
            // were not touched for 30 s.
            build_info.set(1.0);
            if let Some(store) = &store {
                publish_store_metrics(store);
            }
            publish_index_metrics(&planner);
        }
    });
    Ok(())
}

fn describe_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!(
        "tablegate_queries_total",
        "Statements finished, by query class"
    );
    describe_counter!(
        "tablegate_query_errors_total",
        "Statements failed, by query class"
    );
    describe_histogram!(
        "tablegate_query_duration_seconds",
        metrics::Unit::Seconds,
        "Statement latency, first message to last row, by query class"
    );
    describe_counter!(
        "tablegate_entities_scanned_total",
        "Entities the store read, by query class"
    );
    describe_counter!("tablegate_rows_returned_total", "Rows returned or written");
    describe_counter!(
        "tablegate_throttled_retries_total",
        "Retries after ServerBusy, by query class"
    );
    describe_histogram!(
        "tablegate_backoff_seconds",
        metrics::Unit::Seconds,
        "Time a statement waited out throttling before its retries, for statements that backed off, by query class"
    );
    describe_gauge!(
        "tablegate_build_info",
        "Always 1; the labels say which tablegate, and which PostgreSQL version it reports"
    );
    describe_gauge!(
        "tablegate_connections",
        "Client connections: open (sockets with a thread), session (authenticated), starting (authenticating)"
    );
    describe_counter!(
        "tablegate_connections_refused_total",
        "Connections refused with FATAL 53300 or not accepted, by reason: file_handles (the open-file limit), threads, max_connections (no session slot), accept_failed"
    );
    describe_counter!(
        "tablegate_throttled_requests_total",
        "Store requests refused by a scalability target, by scope"
    );
    describe_gauge!(
        "tablegate_server_load_entities_per_second",
        "Entities/s served by each partition server over the load window"
    );
    describe_gauge!(
        "tablegate_server_capacity_entities_per_second",
        "Each partition server's target"
    );
    describe_gauge!(
        "tablegate_hot_partitions",
        "PartitionKeys at or over the warm (50%) or hot (90%) share of their target"
    );
    describe_gauge!(
        "tablegate_partition_load_entities_per_second",
        "Load of the hottest PartitionKeys (at most 20)"
    );
    describe_gauge!(
        "tablegate_engine_accepts_writes",
        "1 while the storage engine takes writes; 0 once a write could not be made durable (disk full, failed fsync) until restart"
    );
    describe_gauge!(
        "tablegate_engine_disk_full",
        "1 when the storage engine stopped taking writes because its disk is full"
    );
    describe_counter!(
        "tablegate_engine_errors_total",
        "Storage engine errors, by operation (read, write)"
    );
    describe_gauge!(
        "tablegate_global_index_pending_partitions",
        "Partitions of a table whose changes this gateway has queued for its GLOBAL indexes and not yet applied"
    );
    describe_gauge!(
        "tablegate_global_index_lag_seconds",
        metrics::Unit::Seconds,
        "How long the oldest queued change of a table's GLOBAL indexes has waited on this gateway (0 when none waits)"
    );
    describe_counter!(
        "tablegate_global_index_rows_applied_total",
        "Rows whose queued changes this gateway applied to a table's GLOBAL indexes"
    );
}

/// The lag of this gateway's global index maintainer, per table with a
/// GLOBAL index (the same figures as `tablegate.indexes`). A dropped
/// table's series leave with the gauges' idle timeout.
fn publish_index_metrics(planner: &Planner) {
    for def in planner.catalog().tables() {
        if !def.indexes.iter().any(|i| i.global) {
            continue;
        }
        let lag = planner.maintainer().lag(&def.name);
        metrics::gauge!("tablegate_global_index_pending_partitions", "table" => def.name.clone())
            .set(lag.partitions as f64);
        metrics::gauge!("tablegate_global_index_lag_seconds", "table" => def.name.clone())
            .set(lag.oldest.map_or(0.0, |d| d.as_secs_f64()));
        metrics::counter!("tablegate_global_index_rows_applied_total", "table" => def.name.clone())
            .absolute(lag.applied);
    }
}

fn publish_store_metrics(store: &PartitionedStore) {
    let health = store.local().health();
    let failure = health.failure.as_ref();
    metrics::gauge!("tablegate_engine_accepts_writes").set(f64::from(u8::from(failure.is_none())));
    metrics::gauge!("tablegate_engine_disk_full")
        .set(f64::from(u8::from(failure.is_some_and(|f| f.disk_full))));
    metrics::counter!("tablegate_engine_errors_total", "op" => "read").absolute(health.read_errors);
    metrics::counter!("tablegate_engine_errors_total", "op" => "write")
        .absolute(health.write_errors);
    let t = store.throttle_counts();
    for (scope, n) in [
        ("partition", t.partition),
        ("server", t.server),
        ("account", t.account),
    ] {
        metrics::counter!("tablegate_throttled_requests_total", "scope" => scope).absolute(n);
    }
    for s in store.servers() {
        let server = s.server.to_string();
        metrics::gauge!("tablegate_server_load_entities_per_second", "server" => server.clone())
            .set(s.load_per_sec);
        if let Some(c) = s.capacity_per_sec {
            metrics::gauge!("tablegate_server_capacity_entities_per_second", "server" => server)
                .set(c as f64);
        }
    }
    let hot = store.hot_partitions(20);
    for level in [
        tablegate_store::partition::HotLevel::Warm,
        tablegate_store::partition::HotLevel::Hot,
    ] {
        let n = hot.iter().filter(|h| h.level == level).count();
        let label = match level {
            tablegate_store::partition::HotLevel::Warm => "warm",
            tablegate_store::partition::HotLevel::Hot => "hot",
        };
        metrics::gauge!("tablegate_hot_partitions", "level" => label).set(n as f64);
    }
    for h in hot {
        metrics::gauge!(
            "tablegate_partition_load_entities_per_second",
            "table" => h.table,
            "partition_key" => h.partition_key
        )
        .set(h.load_per_sec);
    }
}
