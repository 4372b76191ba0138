//! Connection strings: the standard `Key=Value;...` form of Azure Storage
//! (and the Cosmos DB Table API), reduced to an endpoint and a credential.
//!
//! Accepted keys (case-insensitive): `AccountName`, `AccountKey`,
//! `SharedAccessSignature`, `TableEndpoint`, `DefaultEndpointsProtocol`,
//! `EndpointSuffix`, and `UseDevelopmentStorage=true` (Azurite: the
//! well-known development account on `127.0.0.1:10002`, optionally with
//! `DevelopmentStorageProxyUri`). Other keys of a full storage connection
//! string (`BlobEndpoint`, ...) are ignored.

use std::collections::HashMap;

use base64::Engine as _;

use crate::error::{AzureError, Result};

/// Azurite's development account and its published key.
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
/// The development account's key, as published with the emulator.
pub const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// How requests are authorized.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// SharedKey: every request signed with the account key (decoded).
    SharedKey(Vec<u8>),
    /// A SAS token appended to every URL (without the leading `?`).
    Sas(String),
}

impl std::fmt::Debug for Credential {
    // Never print secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::SharedKey(_) => f.write_str("SharedKey(..)"),
            Credential::Sas(_) => f.write_str("Sas(..)"),
        }
    }
}

/// A storage account's table endpoint and credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    /// Which service answers at the endpoint.
    pub service: Service,
    /// Account name (signs requests).
    pub name: String,
    /// Table endpoint without a trailing `/`, e.g.
    /// `https://acct.table.core.windows.net` or (path style, Azurite)
    /// `http://127.0.0.1:10002/devstoreaccount1`.
    pub endpoint: String,
    /// How requests are authorized.
    pub credential: Credential,
}

/// The two services that speak the Table protocol. They differ where a
/// client notices (see `docs/deploy.md`): Cosmos DB returns query results
/// unsorted, throttles with 429, answers no `Timestamp` filter, and holds
/// RowKeys of at most 255 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    /// Azure Table Storage (and Azurite).
    Storage,
    /// The Azure Cosmos DB Table API.
    Cosmos,
}

impl Service {
    /// The service an endpoint's host names (Cosmos DB's are
    /// `*.table.cosmos.azure.com`, formerly `*.table.cosmosdb.azure.com`).
    pub fn of(endpoint: &str) -> Service {
        let host = endpoint
            .split_once("://")
            .map_or(endpoint, |(_, r)| r)
            .split(['/', ':'])
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        if host.ends_with(".cosmos.azure.com") || host.ends_with(".cosmosdb.azure.com") {
            Service::Cosmos
        } else {
            Service::Storage
        }
    }

    /// What EXPLAIN calls it.
    pub fn name(self) -> &'static str {
        match self {
            Service::Storage => "Azure Table Storage",
            Service::Cosmos => "Cosmos DB Table API",
        }
    }
}

impl Account {
    /// Parses a connection string.
    pub fn parse(conn: &str) -> Result<Account> {
        let bad = |reason: String| AzureError::ConnectionString { reason };
        let mut kv: HashMap<String, String> = HashMap::new();
        for part in conn.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            // Values (keys, SAS tokens) contain '='; split at the first.
            let Some((k, v)) = part.split_once('=') else {
                return Err(bad(format!("{part:?} is not Key=Value")));
            };
            kv.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
        let get = |k: &str| kv.get(k).map(String::as_str);
        if get("usedevelopmentstorage").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            let host = get("developmentstorageproxyuri")
                .map_or("http://127.0.0.1".to_owned(), |u| {
                    u.trim_end_matches('/').to_owned()
                });
            let endpoint = match get("tableendpoint") {
                Some(e) => e.trim_end_matches('/').to_owned(),
                None => format!("{host}:10002/{DEV_ACCOUNT}"),
            };
            return Ok(Account {
                service: Service::of(&endpoint),
                name: DEV_ACCOUNT.to_owned(),
                endpoint,
                credential: Credential::SharedKey(decode_key(DEV_KEY)?),
            });
        }
        let name = get("accountname").map(str::to_owned);
        let credential = match (get("accountkey"), get("sharedaccesssignature")) {
            (Some(key), _) => Credential::SharedKey(decode_key(key)?),
            (None, Some(sas)) => Credential::Sas(sas.trim_start_matches('?').to_owned()),
            (None, None) => {
                return Err(bad(
                    "it needs AccountKey or SharedAccessSignature (or UseDevelopmentStorage=true)"
                        .into(),
                ));
            }
        };
        let endpoint = match (get("tableendpoint"), &name) {
            (Some(e), _) => e.trim_end_matches('/').to_owned(),
            (None, Some(n)) => {
                let proto = get("defaultendpointsprotocol").unwrap_or("https");
                let suffix = get("endpointsuffix").unwrap_or("core.windows.net");
                format!("{proto}://{n}.table.{suffix}")
            }
            (None, None) => return Err(bad("it needs TableEndpoint or AccountName".into())),
        };
        if !(endpoint.starts_with("https://") || endpoint.starts_with("http://")) {
            return Err(bad(format!(
                "TableEndpoint {endpoint:?} is not an http(s) URL"
            )));
        }
        // A SAS token rides in every URL and the data in every body.
        if endpoint.starts_with("http://") && !is_loopback(&endpoint) {
            return Err(bad(format!(
                "TableEndpoint {endpoint:?} is plain http to another machine: use https (plain http is for an emulator: UseDevelopmentStorage=true, or a loopback address)"
            )));
        }
        let name = match name {
            Some(n) => n,
            // A SAS needs no account name to sign; take it from the host.
            None if matches!(credential, Credential::Sas(_)) => host_account(&endpoint),
            None => return Err(bad("AccountKey needs AccountName".into())),
        };
        Ok(Account {
            service: Service::of(&endpoint),
            name,
            endpoint,
            credential,
        })
    }

    /// The endpoint's path (`/devstoreaccount1` in path style, else empty):
    /// part of every request path and of the signed resource.
    pub fn base_path(&self) -> &str {
        let after_scheme = self
            .endpoint
            .split_once("://")
            .map_or(self.endpoint.as_str(), |(_, r)| r);
        after_scheme.find('/').map_or("", |i| &after_scheme[i..])
    }
}

fn decode_key(key: &str) -> Result<Vec<u8>> {
    base64::engine::general_purpose::STANDARD
        .decode(key)
        .map_err(|_| AzureError::ConnectionString {
            reason: "AccountKey is not base64".into(),
        })
}

/// True when `endpoint`'s host is this machine (as the HTTP client will
/// read the URL: `http://localhost:1@elsewhere/` is elsewhere).
fn is_loopback(endpoint: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(endpoint) else {
        return false;
    };
    let host = url.host_str().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn host_account(endpoint: &str) -> String {
    let host = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, r)| r)
        .split(['/', ':', '.'])
        .next()
        .unwrap_or_default();
    host.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn development_storage_is_azurite() {
        let a = Account::parse("UseDevelopmentStorage=true").unwrap();
        assert_eq!(a.name, DEV_ACCOUNT);
        assert_eq!(a.endpoint, "http://127.0.0.1:10002/devstoreaccount1");
        assert_eq!(a.base_path(), "/devstoreaccount1");
        let b = Account::parse(
            "UseDevelopmentStorage=true;TableEndpoint=http://127.0.0.1:41234/devstoreaccount1/",
        )
        .unwrap();
        assert_eq!(b.endpoint, "http://127.0.0.1:41234/devstoreaccount1");
        assert!(matches!(b.credential, Credential::SharedKey(ref k) if k.len() == 64));
    }

    #[test]
    fn account_key_and_suffix_make_the_public_endpoint() {
        let a = Account::parse(
            "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=a2V5;EndpointSuffix=core.windows.net",
        )
        .unwrap();
        assert_eq!(a.endpoint, "https://acct.table.core.windows.net");
        assert_eq!(a.base_path(), "");
        assert_eq!(a.credential, Credential::SharedKey(b"key".to_vec()));
        let cosmos = Account::parse(
            "DefaultEndpointsProtocol=https;AccountName=c;AccountKey=a2V5;TableEndpoint=https://c.table.cosmos.azure.com:443/;",
        )
        .unwrap();
        assert_eq!(cosmos.endpoint, "https://c.table.cosmos.azure.com:443");
    }

    #[test]
    fn sas_connection_strings_need_no_key() {
        let a = Account::parse(
            "TableEndpoint=https://acct.table.core.windows.net/;SharedAccessSignature=sv=2019-02-02&sig=a%2Bb%3D",
        )
        .unwrap();
        assert_eq!(a.name, "acct");
        assert_eq!(
            a.credential,
            Credential::Sas("sv=2019-02-02&sig=a%2Bb%3D".into())
        );
        assert!(!format!("{:?}", a.credential).contains("sig"));
    }

    #[test]
    fn plain_http_is_for_loopback_emulators_only() {
        let key = "AccountName=devstoreaccount1;AccountKey=a2V5";
        for ok in [
            "http://127.0.0.1:10002/devstoreaccount1",
            "http://localhost:10002/devstoreaccount1",
            "http://[::1]:10002/devstoreaccount1",
            "https://acct.table.core.windows.net",
        ] {
            Account::parse(&format!("{key};TableEndpoint={ok}")).unwrap();
        }
        for refused in [
            "http://acct.table.core.windows.net",
            "http://10.0.0.5:10002/devstoreaccount1",
            "http://localhost:1@evil.example/devstoreaccount1",
        ] {
            let e = Account::parse(&format!(
                "TableEndpoint={refused};SharedAccessSignature=sv=1&sig=secret"
            ))
            .unwrap_err()
            .to_string();
            assert!(e.contains("use https"), "{e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }

    #[test]
    fn bad_strings_say_why() {
        for (s, why) in [
            ("AccountName=a", "AccountKey or SharedAccessSignature"),
            ("AccountName=a;AccountKey=!!", "not base64"),
            ("AccountKey=a2V5", "AccountName"),
            ("nonsense", "Key=Value"),
            (
                "AccountName=a;AccountKey=a2V5;TableEndpoint=ftp://x",
                "http(s)",
            ),
        ] {
            let e = Account::parse(s).unwrap_err().to_string();
            assert!(e.contains(why), "{s}: {e}");
        }
    }
}
