//! One place that talks HTTP: builds URLs, signs (SharedKey) or appends
//! the SAS token, sends, and turns the service's error responses into
//! meaning-based [`StoreError`]s ([`service_error`]).

use std::sync::Arc;
use std::time::Duration;

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::{Method, StatusCode};
use serde_json::Value as Json;
use tablegate_store::StoreError;

use crate::conn::{Account, Credential};
use crate::error::AzureError;
use crate::sign::{ToSign, http_date};

/// The Table service REST version sent with every request (the newest the
/// Table service defines; Azure's own SDKs send it too).
pub const SERVICE_VERSION: &str = "2019-02-02";
/// JSON with the type annotations the service cannot infer.
pub const ACCEPT_JSON: &str = "application/json;odata=minimalmetadata";

/// Everything but RFC 3986 unreserved characters is escaped in keys,
/// table names and query values.
const ESCAPE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes a path segment or query value.
pub fn enc(s: &str) -> String {
    utf8_percent_encode(s, ESCAPE).to_string()
}

/// An OData string literal's content: single quotes doubled.
pub fn quote(s: &str) -> String {
    s.replace('\'', "''")
}

/// The path of one entity, e.g. `/t(PartitionKey='a',RowKey='b')`.
pub fn entity_path(table: &str, pk: &str, rk: &str) -> String {
    format!(
        "/{table}(PartitionKey='{}',RowKey='{}')",
        enc(&quote(pk)),
        enc(&quote(rk))
    )
}

/// A request before it is signed.
#[derive(Debug)]
pub struct Request {
    /// Verb.
    pub method: Method,
    /// Path after the endpoint, percent-encoded, starting with `/`.
    pub path: String,
    /// Query parameters (names and values are encoded here).
    pub query: Vec<(&'static str, String)>,
    /// Extra headers.
    pub headers: Vec<(&'static str, String)>,
    /// Body and its content type.
    pub body: Option<(String, Vec<u8>)>,
}

impl Request {
    /// A request without body or parameters.
    pub fn new(method: Method, path: String) -> Self {
        Request {
            method,
            path,
            query: Vec::new(),
            headers: Vec::new(),
            body: None,
        }
    }

    /// With a JSON body.
    pub fn json(mut self, body: &Json) -> Self {
        self.body = Some(("application/json".into(), body.to_string().into_bytes()));
        self
    }

    /// With a header.
    pub fn header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// With a query parameter.
    pub fn param(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.query.push((name, value.into()));
        self
    }
}

/// A response: status, headers, body.
#[derive(Debug)]
pub struct Response {
    /// Status code.
    pub status: StatusCode,
    /// Headers.
    pub headers: reqwest::header::HeaderMap,
    /// Body bytes.
    pub body: Vec<u8>,
}

impl Response {
    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body as JSON.
    pub fn json(&self) -> Result<Json, AzureError> {
        serde_json::from_slice(&self.body).map_err(|e| {
            AzureError::BadResponse(format!(
                "{e}: {}",
                String::from_utf8_lossy(&self.body[..self.body.len().min(200)])
            ))
        })
    }
}

/// The runtime of a client's HTTP exchanges; stopped without waiting when
/// the last client goes (which may be inside another runtime, where a
/// blocking shutdown would panic).
#[derive(Debug)]
struct IoRuntime(Option<tokio::runtime::Runtime>);

impl IoRuntime {
    fn handle(&self) -> &tokio::runtime::Handle {
        self.0.as_ref().expect("runtime until drop").handle()
    }
}

impl Drop for IoRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// The account's HTTP client.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    /// The runtime every request runs on (see [`Client::new`]).
    io: Arc<IoRuntime>,
    /// The account.
    pub account: Account,
}

impl Client {
    /// A client with connection pooling and timeouts (the service's own
    /// limit is 30 s per request; a hung connection must not hang a query).
    /// Idle connections are dropped before Azurite's 5 s keep-alive closes
    /// them, so a request rarely meets a connection closed under it.
    ///
    /// Requests run on a runtime of the client's own, not on the caller's:
    /// a pooled connection's I/O lives on the runtime that opened it, and a
    /// session's runtime stops while its thread waits for its client, so a
    /// connection used there and reused by another session hung until the
    /// request timeout.
    pub fn new(account: Account) -> Result<Client, AzureError> {
        let io = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("tablegate-azure-io")
            .enable_all()
            .build()
            .map_err(|e| AzureError::Unreachable {
                endpoint: account.endpoint.clone(),
                reason: format!("no runtime for the HTTP client: {e}"),
            })?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .pool_idle_timeout(Duration::from_secs(4))
            .build()
            .map_err(|e| AzureError::Unreachable {
                endpoint: account.endpoint.clone(),
                reason: e.to_string(),
            })?;
        Ok(Client {
            http,
            io: Arc::new(IoRuntime(Some(io))),
            account,
        })
    }

    /// The full URL of a path (for `$batch` parts).
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.account.endpoint, path)
    }

    /// Signs and sends a request; any status comes back as a [`Response`].
    pub async fn send(&self, req: Request) -> Result<Response, AzureError> {
        let mut url = self.url(&req.path);
        let mut sep = '?';
        for (k, v) in &req.query {
            url.push(sep);
            url.push_str(&enc(k));
            url.push('=');
            url.push_str(&enc(v));
            sep = '&';
        }
        if let Credential::Sas(sas) = &self.account.credential {
            url.push(sep);
            url.push_str(sas);
        }
        let date = http_date(chrono::Utc::now());
        let content_type = req.body.as_ref().map_or("", |(t, _)| t.as_str());
        let mut b = self
            .http
            .request(req.method.clone(), &url)
            .header("x-ms-date", &date)
            .header("x-ms-version", SERVICE_VERSION)
            .header("Accept", ACCEPT_JSON)
            .header("DataServiceVersion", "3.0;NetFx")
            .header("MaxDataServiceVersion", "3.0;NetFx");
        if let Credential::SharedKey(key) = &self.account.credential {
            let path = format!("{}{}", self.account.base_path(), req.path);
            let auth = ToSign {
                verb: req.method.as_str(),
                content_md5: "",
                content_type,
                date: &date,
                account: &self.account.name,
                path: &path,
                comp: None,
            }
            .authorization(key);
            b = b.header("Authorization", auth);
        }
        for (k, v) in &req.headers {
            b = b.header(*k, v);
        }
        if let Some((t, body)) = req.body {
            b = b.header("Content-Type", t).body(body);
        }
        // reqwest names the URL in its errors, and a SAS token is in it.
        // A request that never connected did nothing; one that broke after
        // connecting may have been applied (see `AzureError::Interrupted`).
        let transport = |e: reqwest::Error| {
            let endpoint = self.account.endpoint.clone();
            let connect = e.is_connect();
            let e = e.without_url();
            let mut reason = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                reason = format!("{reason}: {s}");
                source = s.source();
            }
            if connect {
                AzureError::Unreachable { endpoint, reason }
            } else {
                AzureError::Interrupted { endpoint, reason }
            }
        };
        let exchange = self.io.handle().spawn(async move {
            let r = b.send().await?;
            let status = r.status();
            let headers = r.headers().clone();
            let body = r.bytes().await?.to_vec();
            Ok::<_, reqwest::Error>(Response {
                status,
                headers,
                body,
            })
        });
        match exchange.await {
            Ok(r) => r.map_err(transport),
            // The runtime shut down under the request.
            Err(e) => Err(AzureError::Interrupted {
                endpoint: self.account.endpoint.clone(),
                reason: e.to_string(),
            }),
        }
    }
}

/// What a failed request was about, for naming things in errors.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    /// A table.
    Table(&'a str),
    /// An entity of a table.
    Entity {
        /// SQL-side table name.
        table: &'a str,
        /// PartitionKey.
        pk: &'a str,
        /// RowKey.
        rk: &'a str,
    },
}

/// The service's error code and message from a failed response.
pub fn error_parts(
    status: StatusCode,
    headers_code: Option<&str>,
    body: &[u8],
) -> (String, String) {
    let parsed: Option<Json> = serde_json::from_slice(body).ok();
    let err = parsed.as_ref().and_then(|j| j.get("odata.error"));
    let code = headers_code
        .map(str::to_owned)
        .or_else(|| err.and_then(|e| e["code"].as_str()).map(str::to_owned))
        .unwrap_or_else(|| status.as_u16().to_string());
    // Some errors (authentication) come as XML whatever Accept says.
    let text = String::from_utf8_lossy(body);
    let xml = |tag: &str| {
        let open = format!("<{tag}>");
        let start = text.find(&open)? + open.len();
        let end = start + text[start..].find(&format!("</{tag}>"))?;
        Some(text[start..end].trim().to_owned())
    };
    let code = if code == status.as_u16().to_string() {
        xml("Code").unwrap_or(code)
    } else {
        code
    };
    let message = err
        .and_then(|e| e["message"]["value"].as_str())
        .map(str::to_owned)
        .or_else(|| xml("Message"))
        .unwrap_or_else(|| {
            let text = String::from_utf8_lossy(body);
            let text = text.trim();
            if text.is_empty() {
                status.to_string()
            } else {
                text.chars().take(300).collect()
            }
        });
    // The first line is the story; the rest is RequestId/Time.
    let message = message.lines().next().unwrap_or_default().to_owned();
    (code, message)
}

/// Maps a service error to the store's meaning. Throttling (503
/// ServerBusy, 500 OperationTimedOut, Cosmos DB's 429) becomes
/// [`StoreError::ServerBusy`], which the retry policy retries; nothing else
/// is retryable.
pub fn service_error(
    status: StatusCode,
    code: &str,
    message: &str,
    about: Subject<'_>,
) -> StoreError {
    let table = match about {
        Subject::Table(t) | Subject::Entity { table: t, .. } => t,
    };
    let keys = match about {
        Subject::Entity { pk, rk, .. } => Some((pk.to_owned(), rk.to_owned())),
        Subject::Table(_) => None,
    };
    let busy = |what: &str| StoreError::ServerBusy {
        reason: format!("the table service is busy ({code}: {message}); {what}"),
        scope: "the table service".to_owned(),
        target_per_sec: None,
        retry_after: Duration::from_millis(500),
    };
    match (status.as_u16(), code) {
        (429, _) | (503, _) | (_, "ServerBusy") | (500, "OperationTimedOut") => {
            busy("back off and retry")
        }
        (_, "TableBeingDeleted") => busy("the table is still being deleted; retry in a while"),
        (_, "TableAlreadyExists") => StoreError::TableExists {
            name: table.to_owned(),
        },
        (_, "TableNotFound") => StoreError::TableNotFound {
            name: table.to_owned(),
        },
        (404, _) => match keys {
            Some((partition_key, row_key)) => StoreError::EntityNotFound {
                partition_key,
                row_key,
            },
            None => StoreError::TableNotFound {
                name: table.to_owned(),
            },
        },
        (409, _) if keys.is_some() => {
            let (partition_key, row_key) = keys.expect("checked");
            StoreError::EntityAlreadyExists {
                partition_key,
                row_key,
            }
        }
        (412, _) => {
            let (partition_key, row_key) = keys.unwrap_or_default();
            StoreError::ETagMismatch {
                partition_key,
                row_key,
                expected: "the ETag read earlier".to_owned(),
                actual: "a newer version (the service does not say which)".to_owned(),
            }
        }
        (s, _) => StoreError::Remote {
            status: Some(s),
            code: code.to_owned(),
            message: format!("{code} ({s}): {message}"),
        },
    }
}

/// Maps a failed [`Response`] (see [`service_error`]); a throttling
/// answer's own wait (`x-ms-retry-after-ms`, Cosmos DB's, or `Retry-After`
/// in seconds) replaces the default, so the retry policy waits at least that.
pub fn response_error(r: &Response, about: Subject<'_>) -> StoreError {
    let (code, message) = error_parts(r.status, r.header("x-ms-error-code"), &r.body);
    let mut e = service_error(r.status, &code, &message, about);
    if let StoreError::ServerBusy { retry_after, .. } = &mut e {
        let ms = r
            .header("x-ms-retry-after-ms")
            .and_then(|v| v.trim().parse::<u64>().ok());
        let secs = r
            .header("Retry-After")
            .and_then(|v| v.trim().parse::<u64>().ok());
        if let Some(d) = ms
            .map(Duration::from_millis)
            .or(secs.map(Duration::from_secs))
        {
            *retry_after = d;
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn transport_errors_do_not_carry_the_sas_token() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let account = crate::conn::Account::parse(&format!(
            "TableEndpoint=http://127.0.0.1:{port}/acct;SharedAccessSignature=sv=1&sig=TOPSECRET"
        ))
        .unwrap();
        let e = Client::new(account)
            .unwrap()
            .send(Request::new(Method::GET, "/Tables".into()))
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("127.0.0.1"), "{e}");
        assert!(!e.contains("TOPSECRET"), "{e}");
    }

    #[test]
    fn xml_and_json_errors_give_code_and_message() {
        let xml = br#"<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Error>
  <Code>AuthorizationFailure</Code>
  <Message>Server failed to authenticate the request.
RequestId:x</Message>
</Error>"#;
        let (code, message) = error_parts(StatusCode::FORBIDDEN, None, xml);
        assert_eq!(code, "AuthorizationFailure");
        assert_eq!(message, "Server failed to authenticate the request.");
        let e = service_error(StatusCode::FORBIDDEN, &code, &message, Subject::Table("t"));
        assert!(matches!(
            e,
            StoreError::Remote {
                status: Some(403),
                ..
            }
        ));
        assert!(
            e.to_string()
                .contains("AuthorizationFailure (403): Server failed"),
            "{e}"
        );
        let json = br#"{"odata.error":{"code":"InvalidInput","message":{"lang":"en-US","value":"Bad.\nRequestId:y"}}}"#;
        assert_eq!(
            error_parts(StatusCode::BAD_REQUEST, None, json),
            ("InvalidInput".to_owned(), "Bad.".to_owned())
        );
    }
}
