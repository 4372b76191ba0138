//! Where the tests find Azurite, and unique table names in it.
//!
//! The emulator is not started here: `.ci/run` starts it and exports
//! `TABLEGATE_AZURITE`. Without it every Azure test fails (never skips),
//! saying how to get one.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

use tablegate_azure::AzureStore;

/// The environment variable holding Azurite's connection string.
pub const ENV: &str = "TABLEGATE_AZURITE";

/// Azurite's connection string, or a panic that says how to get one.
pub fn conn_str() -> String {
    match std::env::var(ENV) {
        Ok(s) if !s.trim().is_empty() => s,
        _ => panic!(
            "{ENV} is not set: these tests need Azurite's table service. Run `.ci/run` \
             (it starts Azurite and exports {ENV}), or start one yourself with \
             `tests/clients/node_modules/.bin/azurite-table --inMemoryPersistence --tablePort N` \
             and `export {ENV}='UseDevelopmentStorage=true;TableEndpoint=http://127.0.0.1:N/devstoreaccount1'`"
        ),
    }
}

/// Azurite's table endpoint (e.g. `http://127.0.0.1:10002/devstoreaccount1`).
pub fn endpoint() -> String {
    tablegate_azure::Account::parse(&conn_str())
        .unwrap_or_else(|e| panic!("{ENV} is not a usable connection string: {e}"))
        .endpoint
}

/// A connected store.
pub async fn store() -> AzureStore {
    let conn = conn_str();
    AzureStore::connect(&conn, None)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to Azurite ({ENV}={conn:?}): {e}"))
}

/// A table name no other test, process or earlier run uses: letters and
/// digits only (Azure's rule), `tg` + `tag` + a per-run id + a counter.
pub fn table_name(tag: &str) -> String {
    static RUN: OnceLock<String> = OnceLock::new();
    static NEXT: AtomicU32 = AtomicU32::new(0);
    assert!(tag.chars().all(|c| c.is_ascii_alphanumeric()), "{tag}");
    let run = RUN.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mixed = (nanos as u64) ^ (u64::from(std::process::id()) << 40);
        base36(mixed % 36u64.pow(8))
    });
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let name = format!("tg{tag}{run}x{n}");
    assert!((3..=63).contains(&name.len()), "{name}");
    name
}

fn base36(mut n: u64) -> String {
    let digits = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(digits[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ascii")
}
