//! The settings a session can SET and SHOW, and the version it answers as.
//!
//! Defaults are what PostgreSQL reports; drivers set a handful at connect
//! time (client_encoding, DateStyle, TimeZone, extra_float_digits,
//! application_name). tablegate's own settings live under `tablegate.`.
//! Deliberately limited: timestamps are always rendered in UTC whatever
//! TimeZone says, and DateStyle output is always ISO.

use std::collections::BTreeMap;
use std::time::Duration;

use tablegate_planner::{ExecOptions, IndexMode};
use tablegate_store::RetryPolicy;

use crate::sqlstate::PgError;

/// The PostgreSQL version tablegate answers as: `server_version` at
/// startup and in SHOW, and the start of `version()`.
pub const SERVER_VERSION: &str = "15.0";

/// `server_version_num` of [`SERVER_VERSION`].
const SERVER_VERSION_NUM: &str = "150000";

/// The version string `version()` returns.
pub fn version_string() -> String {
    format!(
        "PostgreSQL {SERVER_VERSION} (tablegate {}) on a partitioned table store with Azure Table semantics",
        env!("CARGO_PKG_VERSION")
    )
}

const DEFAULTS: &[(&str, &str)] = &[
    ("application_name", ""),
    ("client_encoding", "UTF8"),
    ("datestyle", "ISO, MDY"),
    ("default_transaction_read_only", "off"),
    ("extra_float_digits", "1"),
    ("integer_datetimes", "on"),
    ("intervalstyle", "postgres"),
    ("search_path", "public"),
    ("server_encoding", "UTF8"),
    ("server_version", SERVER_VERSION),
    ("server_version_num", SERVER_VERSION_NUM),
    ("standard_conforming_strings", "on"),
    ("statement_timeout", "0"),
    ("timezone", "UTC"),
    ("transaction_isolation", "serializable"),
    ("tablegate.allow_full_scan", "on"),
    ("tablegate.page_size", "1000"),
    ("tablegate.retry_policy", "exponential"),
    ("tablegate.retry_max", "5"),
    ("tablegate.scan_parallelism", "4"),
    ("tablegate.use_indexes", "on"),
];

/// Settings PostgreSQL reports but does not let a session change.
const READ_ONLY: &[&str] = &[
    "server_version",
    "server_version_num",
    "server_encoding",
    "integer_datetimes",
];

/// A session's settings.
#[derive(Debug, Clone)]
pub struct Settings {
    settings: BTreeMap<String, String>,
    /// What RESET returns to: the built-in defaults with the server's
    /// configured ones over them.
    defaults: BTreeMap<String, String>,
    /// What every statement reads from the settings, parsed when they
    /// change rather than looked up and parsed per statement.
    derived: Derived,
}

/// The settings a statement runs by, parsed.
#[derive(Debug, Clone)]
struct Derived {
    exec: ExecOptions,
    timeout: Option<Duration>,
}

impl Default for Settings {
    fn default() -> Self {
        let settings: BTreeMap<_, _> = DEFAULTS
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let derived = derive(&settings);
        Settings {
            defaults: settings.clone(),
            settings,
            derived,
        }
    }
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" | "t" => Some(true),
        "off" | "false" | "no" | "0" | "f" => Some(false),
        _ => None,
    }
}

/// `statement_timeout` values: an integer of milliseconds or with a unit.
fn parse_millis(v: &str) -> Option<u64> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(split);
    let n: u64 = n.parse().ok()?;
    Some(match unit.trim() {
        "" | "ms" => n,
        "s" => n * 1000,
        "min" => n * 60_000,
        "h" => n * 3_600_000,
        _ => return None,
    })
}

impl Settings {
    /// A session whose defaults are the server's configured settings
    /// (`tablegate serve` config: page size, retry policy, ...), each
    /// validated as a SET would be.
    pub fn with_defaults(defaults: &[(String, String)]) -> Result<Settings, PgError> {
        let mut s = Settings::default();
        for (k, v) in defaults {
            s.set(k, v)?;
        }
        s.defaults = s.settings.clone();
        Ok(s)
    }

    /// The value of a setting (names are case-insensitive).
    pub fn get(&self, name: &str) -> Result<String, PgError> {
        let key = name.to_ascii_lowercase();
        self.settings.get(&key).cloned().ok_or_else(|| {
            PgError::undefined_object(format!("unrecognized configuration parameter \"{name}\""))
        })
    }

    /// Every setting, by name (SHOW ALL).
    pub fn all(&self) -> impl Iterator<Item = (&String, &String)> {
        self.settings.iter()
    }

    /// SET name = value, validated.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), PgError> {
        let key = name.to_ascii_lowercase();
        let bad = |hint: &str| {
            PgError::invalid_parameter_value(format!(
                "invalid value for parameter \"{name}\": \"{value}\""
            ))
            .hint(hint.to_owned())
        };
        if READ_ONLY.contains(&key.as_str()) {
            return Err(PgError::cant_change_runtime_param(format!(
                "parameter \"{name}\" cannot be changed"
            )));
        }
        let value = match key.as_str() {
            "client_encoding" => match value.to_ascii_uppercase().replace('-', "").as_str() {
                "UTF8" | "UNICODE" => "UTF8".to_owned(),
                _ => return Err(bad("tablegate speaks UTF8 only")),
            },
            "statement_timeout" => parse_millis(value)
                .map(|ms| ms.to_string())
                .ok_or_else(|| bad("a number of milliseconds, or with a unit: 500ms, 5s, 1min"))?,
            "extra_float_digits" => match value.parse::<i32>() {
                Ok(n) if (-15..=3).contains(&n) => n.to_string(),
                _ => return Err(bad("an integer from -15 to 3")),
            },
            "tablegate.use_indexes" if value.eq_ignore_ascii_case("force") => "force".to_owned(),
            "tablegate.use_indexes" => match parse_bool(value) {
                Some(b) => if b { "on" } else { "off" }.to_owned(),
                None => return Err(bad("on (when cheaper than the scan), off or force")),
            },
            "tablegate.allow_full_scan" | "default_transaction_read_only" => {
                match parse_bool(value) {
                    Some(b) => if b { "on" } else { "off" }.to_owned(),
                    None => return Err(bad("on or off")),
                }
            }
            "tablegate.page_size" => match value.parse::<usize>() {
                Ok(n) if (1..=1000).contains(&n) => n.to_string(),
                _ => return Err(bad("an integer from 1 to 1000 (entities per store page)")),
            },
            "tablegate.retry_policy" => match value.to_ascii_lowercase().as_str() {
                p @ ("none" | "fixed" | "exponential") => p.to_owned(),
                _ => return Err(bad("none, fixed or exponential")),
            },
            "tablegate.scan_parallelism" => match value.parse::<usize>() {
                Ok(n) if (1..=64).contains(&n) => n.to_string(),
                _ => return Err(bad("an integer from 1 to 64 (scan segments read at once)")),
            },
            "tablegate.retry_max" => match value.parse::<u32>() {
                Ok(n) if n <= 20 => n.to_string(),
                _ => return Err(bad("an integer from 0 to 20")),
            },
            _ if self.settings.contains_key(&key) => value.to_owned(),
            // Custom settings with a dot are allowed, as in PostgreSQL, up
            // to a bound on how many and how long.
            _ if key.contains('.') && !key.starts_with("tablegate.") => {
                if self.settings.len() >= MAX_SETTINGS {
                    return Err(PgError::program_limit_exceeded(format!(
                        "too many settings: a session holds at most {MAX_SETTINGS}"
                    ))
                    .hint("RESET or reuse custom settings"));
                }
                value.to_owned()
            }
            _ => {
                return Err(PgError::undefined_object(format!(
                    "unrecognized configuration parameter \"{name}\""
                )));
            }
        };
        let others: usize = self
            .settings
            .iter()
            .filter(|(k, _)| **k != key)
            .map(|(k, v)| k.len() + v.len())
            .sum();
        if key.len() + value.len() > MAX_SETTING_BYTES
            || others + key.len() + value.len() > MAX_SETTINGS_BYTES
        {
            return Err(PgError::program_limit_exceeded(format!(
                "setting \"{name}\" is too long: one setting holds at most {MAX_SETTING_BYTES} bytes, a session's settings {MAX_SETTINGS_BYTES}"
            )));
        }
        self.settings.insert(key, value);
        self.derived = derive(&self.settings);
        Ok(())
    }

    /// RESET name (back to the default).
    pub fn reset(&mut self, name: &str) -> Result<(), PgError> {
        let key = name.to_ascii_lowercase();
        match self.defaults.get(&key) {
            Some(v) => {
                self.settings.insert(key, v.clone());
                self.derived = derive(&self.settings);
                Ok(())
            }
            None => Err(PgError::undefined_object(format!(
                "unrecognized configuration parameter \"{name}\""
            ))),
        }
    }

    /// default_transaction_read_only.
    pub fn default_read_only(&self) -> bool {
        self.settings
            .get("default_transaction_read_only")
            .map(String::as_str)
            == Some("on")
    }

    /// statement_timeout, if set.
    pub fn statement_timeout(&self) -> Option<Duration> {
        self.derived.timeout
    }

    /// How the native path should run for this session.
    pub fn exec_options(&self) -> ExecOptions {
        self.derived.exec.clone()
    }
}

/// Most settings one session holds (built-in ones included).
pub const MAX_SETTINGS: usize = 1_000;
/// Longest setting, name and value together.
pub const MAX_SETTING_BYTES: usize = 64 * 1024;
/// Most bytes of all a session's settings together.
pub const MAX_SETTINGS_BYTES: usize = 1 << 20;

/// Parses what statements read from the settings (values are validated by
/// [`Settings::set`]).
fn derive(settings: &BTreeMap<String, String>) -> Derived {
    let timeout = settings
        .get("statement_timeout")
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis);
    Derived {
        exec: exec_options(settings),
        timeout,
    }
}

/// How the native path should run under these settings.
fn exec_options(settings: &BTreeMap<String, String>) -> ExecOptions {
    let get = |k: &str| settings.get(k).map(String::as_str).unwrap_or_default();
    let max_retries: u32 = get("tablegate.retry_max").parse().unwrap_or(5);
    let retry = match get("tablegate.retry_policy") {
        "none" => RetryPolicy::None,
        "fixed" => RetryPolicy::Fixed {
            delay: Duration::from_millis(200),
            max_retries,
        },
        _ => match RetryPolicy::default() {
            RetryPolicy::Exponential { base, min, max, .. } => RetryPolicy::Exponential {
                base,
                min,
                max,
                max_retries,
            },
            other => other,
        },
    };
    ExecOptions {
        page_size: get("tablegate.page_size").parse().unwrap_or(1000),
        retry,
        parallelism: get("tablegate.scan_parallelism").parse().unwrap_or(4),
        allow_full_scan: get("tablegate.allow_full_scan") != "off",
        use_indexes: match get("tablegate.use_indexes") {
            "off" => IndexMode::Off,
            "force" => IndexMode::Force,
            _ => IndexMode::On,
        },
        overlay: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_validate_and_feed_the_planner() {
        let mut s = Settings::default();
        s.set("TimeZone", "Europe/Paris").unwrap();
        assert_eq!(s.get("timezone").unwrap(), "Europe/Paris");
        s.set("statement_timeout", "2s").unwrap();
        assert_eq!(s.statement_timeout(), Some(Duration::from_secs(2)));
        assert!(s.set("client_encoding", "LATIN1").is_err());
        assert_eq!(s.set("nonsense", "1").unwrap_err().code, "42704");
        assert_eq!(s.set("server_version", "1").unwrap_err().code, "55P02");
        s.set("myapp.trace", "x").unwrap();
        s.set("tablegate.allow_full_scan", "off").unwrap();
        assert!(!s.exec_options().allow_full_scan);
        assert!(s.set("tablegate.page_size", "1001").is_err());
        assert!(s.set("tablegate.scan_parallelism", "0").is_err());
        s.set("tablegate.scan_parallelism", "16").unwrap();
        assert_eq!(s.exec_options().parallelism, 16);
        s.set("tablegate.retry_policy", "none").unwrap();
        assert_eq!(s.exec_options().retry, RetryPolicy::None);
        s.reset("tablegate.allow_full_scan").unwrap();
        assert!(s.exec_options().allow_full_scan);
        s.reset("statement_timeout").unwrap();
        assert_eq!(s.statement_timeout(), None);
        s.set("tablegate.page_size", "10").unwrap();
        assert_eq!(s.exec_options().page_size, 10);
        // The server's configured defaults are what a session starts with.
        let d = Settings::with_defaults(&[("tablegate.page_size".into(), "7".into())]).unwrap();
        assert_eq!(d.exec_options().page_size, 7);
        assert_eq!(Settings::default().exec_options().page_size, 1000);
    }
}
