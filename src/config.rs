//! `tablegate serve` settings: a TOML file, environment variables and
//! flags, in increasing order of precedence (a flag beats its environment
//! variable, which beats the file, which beats the default).
//!
//! Every setting has all three forms; `tablegate serve --print-config`
//! prints the merged result as TOML, which is also a valid config file.
//! The README's configuration reference lists them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Everything `serve` (and `demo`) needs, after merging.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// Where tables live: `embedded` (the data directory) or `azure` (a
    /// storage account, or Azurite, through the Table service REST API).
    pub backend: String,
    /// Data directory (created if missing; the embedded backend only).
    pub data: PathBuf,
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Directory of the Unix-domain socket `.s.PGSQL.<port>` (where psql
    /// looks when given no host); empty for none. A directory that does
    /// not exist means no socket, with a note at start-up.
    pub unix_socket_dir: PathBuf,
    /// Most authenticated sessions; more are refused with SQLSTATE 53300.
    pub max_connections: usize,
    /// Memory the analytics engine may hold, all sessions together, in MiB.
    pub engine_memory_mb: usize,
    /// The storage engine's block cache, in MiB (embedded backend).
    pub cache_mb: u64,
    /// The storage engine's write buffer (memtable) per keyspace, in MiB,
    /// for a data directory it creates (an existing one keeps its own).
    pub memtable_mb: u64,
    /// What one client may hold or make the server wait for.
    pub limits: Limits,
    /// Prometheus endpoint (`http://ADDR/metrics`); none when unset.
    pub metrics_listen: Option<SocketAddr>,
    /// Arrow Flight SQL endpoint; none when unset.
    pub flight_listen: Option<SocketAddr>,
    /// Seconds a Flight SQL bearer token stays valid.
    pub flight_token_seconds: u64,
    /// The web console and its JSON API (`http://ADDR/`); none when unset.
    pub http_listen: Option<SocketAddr>,
    /// Throttling at the scalability targets.
    pub throttle: Throttle,
    /// The partition layer.
    pub partitions: Partitions,
    /// Defaults of every session (each can still SET its own).
    pub session: SessionDefaults,
    /// Client authentication.
    pub auth: Auth,
    /// TLS; required for every connection when set.
    pub tls: Option<Tls>,
    /// The Azure backend.
    pub azure: Azure,
}

/// `[azure]`: the storage account of `backend = "azure"`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Azure {
    /// A storage connection string (`AccountName=...;AccountKey=...;
    /// TableEndpoint=...`, a `SharedAccessSignature=...` one, or
    /// `UseDevelopmentStorage=true` for Azurite).
    pub connection_string: Option<String>,
    /// Which service answers: `storage` (Azure Table Storage, Azurite),
    /// `cosmos` (the Cosmos DB Table API), or `auto` from the endpoint's
    /// host (`*.table.cosmos.azure.com` is Cosmos DB) [default: auto].
    pub service: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            backend: "embedded".to_owned(),
            data: PathBuf::from("tablegate-data"),
            listen: "127.0.0.1:5433".parse().expect("address"),
            unix_socket_dir: PathBuf::from("/var/run/postgresql"),
            max_connections: 100,
            engine_memory_mb: 1024,
            cache_mb: tablegate_store::StoreOptions::DEFAULT_CACHE_BYTES >> 20,
            memtable_mb: tablegate_store::StoreOptions::DEFAULT_MEMTABLE_BYTES >> 20,
            limits: Limits::default(),
            metrics_listen: None,
            flight_listen: None,
            flight_token_seconds: 3600,
            http_listen: None,
            throttle: Throttle::default(),
            partitions: Partitions::default(),
            session: SessionDefaults::default(),
            auth: Auth::default(),
            tls: None,
            azure: Azure::default(),
        }
    }
}

/// `[throttle]`: the seeds' scalability targets, in entities per second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Throttle {
    /// `false` is `--throttle off`: no limits at all.
    pub enabled: bool,
    /// Per PartitionKey (seeds: 2,000/s).
    pub per_partition: u64,
    /// Per partition server.
    pub per_server: u64,
    /// Per account, the whole store (seeds: 20,000/s).
    pub per_account: u64,
    /// Burst allowance, as a fraction of one second of each target.
    pub burst: f64,
}

impl Default for Throttle {
    fn default() -> Self {
        let t = tablegate_store::Targets::default();
        Throttle {
            enabled: true,
            per_partition: t.per_partition,
            per_server: t.per_server,
            per_account: t.per_account,
            burst: t.burst,
        }
    }
}

/// `[limits]`: admission control and the analytics engine's queue.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Slots of `max_connections` kept for `reserved_for` (at most
    /// `max_connections` - 1 take effect).
    pub reserved_connections: usize,
    /// Users who may take a reserved slot.
    pub reserved_for: Vec<String>,
    /// Connections still authenticating at once; a new one evicts the
    /// oldest.
    pub max_starting_connections: usize,
    /// Seconds a client has to authenticate.
    pub authentication_timeout: u64,
    /// Largest message after authentication, in MiB.
    pub max_message_mb: usize,
    /// Analytics statements running at once; more wait.
    pub analytics_concurrency: usize,
    /// Seconds an analytics statement waits for its turn before 53000.
    pub analytics_queue_wait: u64,
}

impl Default for Limits {
    fn default() -> Self {
        let l = tablegate_gateway::admission::Limits::default();
        let s = tablegate_gateway::ServerConfig::default();
        Limits {
            reserved_connections: l.reserved_connections,
            reserved_for: l.reserved_for,
            max_starting_connections: l.max_starting,
            authentication_timeout: l.authentication_timeout.as_secs(),
            max_message_mb: l.max_message_bytes >> 20,
            analytics_concurrency: s.analytics_running,
            analytics_queue_wait: s.analytics_queue_wait.as_secs(),
        }
    }
}

/// `[partitions]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Partitions {
    /// Partition servers range partitions are spread over.
    pub servers: usize,
    /// Seconds per column of the console's key visualizer (it keeps 360).
    pub keyviz_slot_seconds: u64,
}

impl Default for Partitions {
    fn default() -> Self {
        Partitions {
            servers: 4,
            keyviz_slot_seconds: 10,
        }
    }
}

/// `[session]`: what every session starts with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionDefaults {
    /// Entities per store page, 1..=1000 (`tablegate.page_size`).
    pub page_size: usize,
    /// `none`, `fixed` or `exponential` (`tablegate.retry_policy`).
    pub retry_policy: String,
    /// Retries of a throttled request, 0..=20 (`tablegate.retry_max`).
    pub retry_max: u32,
    /// The full-scan guardrail (`tablegate.allow_full_scan`).
    pub allow_full_scan: bool,
    /// `statement_timeout`: `0` (none), `500ms`, `5s`, `1min`.
    pub statement_timeout: String,
}

impl Default for SessionDefaults {
    fn default() -> Self {
        SessionDefaults {
            page_size: 1000,
            retry_policy: "exponential".into(),
            retry_max: 5,
            allow_full_scan: true,
            statement_timeout: "0".into(),
        }
    }
}

impl SessionDefaults {
    /// As session settings (validated when the server binds).
    pub fn settings(&self) -> Vec<(String, String)> {
        vec![
            ("tablegate.page_size".into(), self.page_size.to_string()),
            ("tablegate.retry_policy".into(), self.retry_policy.clone()),
            ("tablegate.retry_max".into(), self.retry_max.to_string()),
            (
                "tablegate.allow_full_scan".into(),
                if self.allow_full_scan { "on" } else { "off" }.into(),
            ),
            ("statement_timeout".into(), self.statement_timeout.clone()),
        ]
    }
}

/// `[auth]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Auth {
    /// `trust` (loopback only) or `scram`.
    pub mode: String,
    /// Users whose SCRAM verifiers are stored at start-up (the password
    /// itself is not kept). `tablegate user set` does the same without a
    /// password in a file.
    pub users: Vec<User>,
}

impl Default for Auth {
    fn default() -> Self {
        Auth {
            mode: "trust".into(),
            users: Vec::new(),
        }
    }
}

/// One `[[auth.users]]` entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct User {
    /// User name.
    pub name: String,
    /// Its password.
    pub password: String,
}

/// `[tls]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    /// Certificate chain (PEM).
    pub cert: PathBuf,
    /// Private key (PEM).
    pub key: PathBuf,
}

/// Flags (and their environment variables) of `serve` and `demo`; each
/// overrides the config file when given.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// TOML config file (see `--print-config` for every setting).
    #[arg(long, env = "TABLEGATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Print the merged settings as TOML and exit.
    #[arg(long)]
    pub print_config: bool,
    /// Where tables live: embedded (the data directory) or azure (a storage
    /// account or Azurite) [default: embedded].
    #[arg(long, env = "TABLEGATE_BACKEND", value_parser = ["embedded", "azure"])]
    pub backend: Option<String>,
    /// The storage account of `--backend azure`: a connection string
    /// (`UseDevelopmentStorage=true` for Azurite).
    #[arg(long, env = "AZURE_STORAGE_CONNECTION_STRING", hide_env_values = true)]
    pub azure_connection_string: Option<String>,
    /// Which service the Azure connection string reaches: auto (from the
    /// endpoint's host), storage or cosmos [default: auto].
    #[arg(long, env = "TABLEGATE_AZURE_SERVICE", value_parser = ["auto", "storage", "cosmos"])]
    pub azure_service: Option<String>,
    /// Data directory (created if missing) [default: tablegate-data].
    #[arg(long, env = "TABLEGATE_DATA")]
    pub data: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:5433]. Trust
    /// authentication is refused on other than loopback addresses.
    #[arg(long, env = "TABLEGATE_LISTEN")]
    pub listen: Option<SocketAddr>,
    /// Directory of the Unix-domain socket `.s.PGSQL.<port>`, where psql
    /// looks without -h; '' for none [default: /var/run/postgresql].
    #[arg(long, env = "TABLEGATE_UNIX_SOCKET_DIR")]
    pub unix_socket_dir: Option<String>,
    /// Most authenticated sessions; more are refused with 53300 [default: 100].
    #[arg(long, env = "TABLEGATE_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// Slots of --max-connections kept for the users of
    /// `limits.reserved_for` [default: 3].
    #[arg(long, env = "TABLEGATE_RESERVED_CONNECTIONS")]
    pub reserved_connections: Option<usize>,
    /// Connections still authenticating at once; a new one evicts the
    /// oldest [default: 64].
    #[arg(long, env = "TABLEGATE_MAX_STARTING_CONNECTIONS")]
    pub max_starting_connections: Option<usize>,
    /// Seconds a client has to authenticate [default: 60].
    #[arg(long, env = "TABLEGATE_AUTHENTICATION_TIMEOUT")]
    pub authentication_timeout: Option<u64>,
    /// Largest message after authentication, in MiB [default: 64].
    #[arg(long, env = "TABLEGATE_MAX_MESSAGE_MB")]
    pub max_message_mb: Option<usize>,
    /// Analytics statements running at once; more wait their turn
    /// [default: 4].
    #[arg(long, env = "TABLEGATE_ANALYTICS_CONCURRENCY")]
    pub analytics_concurrency: Option<usize>,
    /// Seconds an analytics statement waits for its turn before it is
    /// refused with 53000 [default: 10].
    #[arg(long, env = "TABLEGATE_ANALYTICS_QUEUE_WAIT")]
    pub analytics_queue_wait: Option<u64>,
    /// Memory the analytics engine may hold, all sessions together, in
    /// MiB; sorts and aggregates spill, what cannot spill fails with 53200
    /// [default: 1024].
    #[arg(long, env = "TABLEGATE_ENGINE_MEMORY_MB")]
    pub engine_memory_mb: Option<usize>,
    /// The storage engine's block cache, in MiB [default: 128].
    #[arg(long, env = "TABLEGATE_CACHE_MB")]
    pub cache_mb: Option<u64>,
    /// The storage engine's write buffer per keyspace, in MiB, for a data
    /// directory it creates [default: 16].
    #[arg(long, env = "TABLEGATE_MEMTABLE_MB")]
    pub memtable_mb: Option<u64>,
    /// Serve Prometheus metrics on http://ADDR/metrics.
    #[arg(long, env = "TABLEGATE_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Serve Arrow Flight SQL on ADDR (e.g. 127.0.0.1:50051), beside
    /// pgwire: same users, TLS, tables and errors [default: off].
    #[arg(long, env = "TABLEGATE_FLIGHT_LISTEN")]
    pub flight_listen: Option<SocketAddr>,
    /// Seconds a Flight SQL bearer token (from the handshake) stays valid
    /// [default: 3600].
    #[arg(long, env = "TABLEGATE_FLIGHT_TOKEN_SECONDS")]
    pub flight_token_seconds: Option<u64>,
    /// Serve the web console (key visualizer, partitions, EXPLAIN) and its
    /// JSON API on http://ADDR/ (https with --tls-cert); same users as
    /// pgwire [default: off].
    #[arg(long = "http", env = "TABLEGATE_HTTP_LISTEN")]
    pub http_listen: Option<SocketAddr>,
    /// Seconds per column of the key visualizer's heat map (it keeps 360
    /// columns) [default: 10].
    #[arg(long, env = "TABLEGATE_KEYVIZ_SLOT_SECONDS")]
    pub keyviz_slot_seconds: Option<u64>,
    /// Throttling at the scalability targets: on or off [default: on].
    #[arg(long, env = "TABLEGATE_THROTTLE", value_parser = ["on", "off"])]
    pub throttle: Option<String>,
    /// Per-PartitionKey target, entities/s [default: 2000].
    #[arg(long, env = "TABLEGATE_PARTITION_TARGET")]
    pub partition_target: Option<u64>,
    /// Per-partition-server target, entities/s [default: 10000].
    #[arg(long, env = "TABLEGATE_SERVER_TARGET")]
    pub server_target: Option<u64>,
    /// Account (whole store) target, entities/s [default: 20000].
    #[arg(long, env = "TABLEGATE_ACCOUNT_TARGET")]
    pub account_target: Option<u64>,
    /// Partition servers [default: 4].
    #[arg(long, env = "TABLEGATE_SERVERS")]
    pub servers: Option<usize>,
    /// Default entities per store page, 1..=1000 [default: 1000].
    #[arg(long, env = "TABLEGATE_PAGE_SIZE")]
    pub page_size: Option<usize>,
    /// Default retry policy for throttled requests: none, fixed or
    /// exponential [default: exponential].
    #[arg(long, env = "TABLEGATE_RETRY_POLICY")]
    pub retry_policy: Option<String>,
    /// Default retries of a throttled request, 0..=20 [default: 5].
    #[arg(long, env = "TABLEGATE_RETRY_MAX")]
    pub retry_max: Option<u32>,
    /// Client authentication: trust (loopback only) or scram
    /// (SCRAM-SHA-256 against users set with `tablegate user set` or the
    /// config file) [default: trust].
    #[arg(long, env = "TABLEGATE_AUTH", value_parser = ["trust", "scram"])]
    pub auth: Option<String>,
    /// TLS certificate chain (PEM). With --tls-key, TLS is required for
    /// every connection.
    #[arg(long, requires = "tls_key", env = "TABLEGATE_TLS_CERT")]
    pub tls_cert: Option<PathBuf>,
    /// TLS private key (PEM).
    #[arg(long, requires = "tls_cert", env = "TABLEGATE_TLS_KEY")]
    pub tls_key: Option<PathBuf>,
}

/// Reads a config file.
pub fn load_file(path: &Path) -> Result<Settings, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("config file {}: {e}", path.display()))
}

impl ServeArgs {
    /// The config file (if any) with the flags and environment over it.
    pub fn resolve(&self) -> Result<Settings, String> {
        let mut s = match &self.config {
            Some(path) => load_file(path)?,
            None => Settings::default(),
        };
        macro_rules! over {
            ($flag:expr => $field:expr) => {
                if let Some(v) = &$flag {
                    $field = v.clone();
                }
            };
        }
        over!(self.backend => s.backend);
        if self.azure_service.is_some() {
            s.azure.service = self.azure_service.clone();
        }
        if self.azure_connection_string.is_some() {
            s.azure.connection_string = self.azure_connection_string.clone();
        }
        over!(self.data => s.data);
        over!(self.listen => s.listen);
        if let Some(d) = &self.unix_socket_dir {
            s.unix_socket_dir = PathBuf::from(d);
        }
        over!(self.max_connections => s.max_connections);
        over!(self.reserved_connections => s.limits.reserved_connections);
        over!(self.max_starting_connections => s.limits.max_starting_connections);
        over!(self.authentication_timeout => s.limits.authentication_timeout);
        over!(self.max_message_mb => s.limits.max_message_mb);
        over!(self.analytics_concurrency => s.limits.analytics_concurrency);
        over!(self.analytics_queue_wait => s.limits.analytics_queue_wait);
        over!(self.engine_memory_mb => s.engine_memory_mb);
        over!(self.cache_mb => s.cache_mb);
        over!(self.memtable_mb => s.memtable_mb);
        if self.metrics_listen.is_some() {
            s.metrics_listen = self.metrics_listen;
        }
        if self.flight_listen.is_some() {
            s.flight_listen = self.flight_listen;
        }
        over!(self.flight_token_seconds => s.flight_token_seconds);
        if self.http_listen.is_some() {
            s.http_listen = self.http_listen;
        }
        over!(self.keyviz_slot_seconds => s.partitions.keyviz_slot_seconds);
        if let Some(t) = &self.throttle {
            s.throttle.enabled = t == "on";
        }
        over!(self.partition_target => s.throttle.per_partition);
        over!(self.server_target => s.throttle.per_server);
        over!(self.account_target => s.throttle.per_account);
        over!(self.servers => s.partitions.servers);
        over!(self.page_size => s.session.page_size);
        over!(self.retry_policy => s.session.retry_policy);
        over!(self.retry_max => s.session.retry_max);
        over!(self.auth => s.auth.mode);
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            s.tls = Some(Tls {
                cert: cert.clone(),
                key: key.clone(),
            });
        }
        s.check()?;
        Ok(s)
    }
}

impl Settings {
    /// Refuses settings that cannot work, with the reason.
    pub fn check(&self) -> Result<(), String> {
        match self.backend.as_str() {
            "embedded" => {}
            "azure" if self.azure.connection_string.is_none() => {
                return Err("backend azure needs a connection string: --azure-connection-string, AZURE_STORAGE_CONNECTION_STRING or azure.connection_string (UseDevelopmentStorage=true for Azurite)".into());
            }
            "azure" => {}
            other => {
                return Err(format!("backend must be embedded or azure, not {other:?}"));
            }
        }
        if let Some(svc) = &self.azure.service
            && !matches!(svc.as_str(), "auto" | "storage" | "cosmos")
        {
            return Err(format!(
                "azure.service must be auto, storage or cosmos, not {svc:?}"
            ));
        }
        if !matches!(self.auth.mode.as_str(), "trust" | "scram") {
            return Err(format!(
                "auth.mode must be trust or scram, not {:?}",
                self.auth.mode
            ));
        }
        if self.auth.mode == "trust" && !self.listen.ip().is_loopback() {
            return Err(format!(
                "refusing to listen on {} with trust authentication: trust is allowed on loopback addresses only (use --auth scram)",
                self.listen
            ));
        }
        if self.flight_token_seconds == 0 {
            return Err("flight_token_seconds must be at least 1".into());
        }
        if self.throttle.enabled {
            let t = &self.throttle;
            if t.per_partition == 0 || t.per_server == 0 || t.per_account == 0 {
                return Err("throttle targets must be positive (or throttle off)".into());
            }
            if !(t.burst > 0.0 && t.burst <= 10.0) {
                return Err("throttle.burst must be in (0, 10] seconds".into());
            }
        }
        if !(1..=64).contains(&self.partitions.servers) {
            return Err("partitions.servers must be from 1 to 64".into());
        }
        if !(1..=3600).contains(&self.partitions.keyviz_slot_seconds) {
            return Err("partitions.keyviz_slot_seconds must be from 1 to 3600".into());
        }
        if self.engine_memory_mb == 0 {
            return Err("engine_memory_mb must be positive".into());
        }
        if !(1..=1 << 20).contains(&self.cache_mb) {
            return Err("cache_mb must be from 1 to 1048576".into());
        }
        if !(1..=1024).contains(&self.memtable_mb) {
            return Err("memtable_mb must be from 1 to 1024".into());
        }
        let l = &self.limits;
        if l.max_starting_connections == 0
            || l.authentication_timeout == 0
            || l.max_message_mb == 0
            || l.analytics_concurrency == 0
        {
            return Err("limits.max_starting_connections, authentication_timeout, max_message_mb and analytics_concurrency must be positive".into());
        }
        if l.max_message_mb > 1023 {
            return Err("limits.max_message_mb must be below 1024 (the protocol's 1 GiB)".into());
        }
        // Session settings are checked as SET would check them.
        tablegate_gateway::settings::Settings::with_defaults(&self.session.settings())
            .map_err(|e| format!("session setting: {}", e.message))?;
        Ok(())
    }

    /// The partition layer's configuration.
    pub fn partition_config(&self) -> tablegate_store::PartitionConfig {
        tablegate_store::PartitionConfig {
            servers: self.partitions.servers,
            keyviz_slot: std::time::Duration::from_secs(self.partitions.keyviz_slot_seconds),
            targets: self.throttle.enabled.then_some(tablegate_store::Targets {
                per_partition: self.throttle.per_partition,
                per_server: self.throttle.per_server,
                per_account: self.throttle.per_account,
                burst: self.throttle.burst,
            }),
            ..Default::default()
        }
    }

    /// As TOML (`--print-config`).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot print: {e}\n"))
    }

    /// As TOML with secrets replaced by `<redacted>`: user passwords and
    /// the account key and SAS of the Azure connection string
    /// (`--print-config` shows this; a terminal or log is no place for a
    /// key).
    pub fn to_toml_redacted(&self) -> String {
        let mut s = self.clone();
        for u in &mut s.auth.users {
            u.password = REDACTED.to_owned();
        }
        if let Some(c) = &mut s.azure.connection_string {
            *c = redact_connection_string(c);
        }
        s.to_toml()
    }
}

const REDACTED: &str = "<redacted>";

/// A storage connection string without its secrets.
fn redact_connection_string(c: &str) -> String {
    c.split(';')
        .map(|part| match part.split_once('=') {
            Some((k, _))
                if k.trim().eq_ignore_ascii_case("AccountKey")
                    || k.trim().eq_ignore_ascii_case("SharedAccessSignature") =>
            {
                format!("{k}={REDACTED}")
            }
            _ => part.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(";")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(
            &path,
            "data = \"/tmp/x\"\n[throttle]\nper_partition = 500\n[session]\npage_size = 100\n",
        )
        .unwrap();
        let args = ServeArgs {
            config: Some(path),
            page_size: Some(10),
            ..Default::default()
        };
        let s = args.resolve().unwrap();
        assert_eq!(s.data, PathBuf::from("/tmp/x"));
        assert_eq!(s.unix_socket_dir, PathBuf::from("/var/run/postgresql"));
        let off = ServeArgs {
            unix_socket_dir: Some(String::new()),
            ..Default::default()
        };
        assert_eq!(off.resolve().unwrap().unix_socket_dir, PathBuf::new());
        assert_eq!(s.throttle.per_partition, 500);
        assert_eq!(s.throttle.per_server, 10_000);
        assert_eq!(s.session.page_size, 10);
        // The printed config reads back as the same settings.
        assert_eq!(toml::from_str::<Settings>(&s.to_toml()).unwrap(), s);
        let mut secret = s.clone();
        secret.auth.users.push(User {
            name: "alice".into(),
            password: "hunter2".into(),
        });
        secret.azure.connection_string = Some(
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=c2VjcmV0;EndpointSuffix=core.windows.net".into(),
        );
        let shown = secret.to_toml_redacted();
        assert!(
            !shown.contains("hunter2") && !shown.contains("c2VjcmV0"),
            "{shown}"
        );
        assert!(
            shown.contains("AccountName=acct;AccountKey=<redacted>"),
            "{shown}"
        );
    }

    #[test]
    fn bad_settings_are_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(&path, "[throttle]\nper_partion = 5\n").unwrap();
        let e = load_file(&path).unwrap_err();
        assert!(e.contains("per_partion"), "{e}");
        let args = ServeArgs {
            listen: Some("0.0.0.0:5433".parse().unwrap()),
            ..Default::default()
        };
        assert!(args.resolve().unwrap_err().contains("loopback"));
        let args = ServeArgs {
            page_size: Some(5000),
            ..Default::default()
        };
        assert!(args.resolve().unwrap_err().contains("page_size"));
    }
}
