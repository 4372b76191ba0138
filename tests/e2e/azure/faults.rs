//! The Table service misbehaving: a fault-injecting HTTP proxy between
//! tablegate and Azurite answers chosen requests with 503 ServerBusy, 500
//! OperationTimedOut or 429 with `x-ms-retry-after-ms`, breaks connections
//! before or after forwarding, or slows them down. The tests assert what a
//! user sees: retries absorbed and counted by EXPLAIN ANALYZE, the service's
//! wait honoured, writes applied exactly once, and 53000 with the service's
//! words when retries run out.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::super::server::psql;
use super::{Azure, DropTable, azurite, plan, rows, serve_on, table_endpoint, with_table};

/// What the proxy does to a request a rule matches.
#[derive(Debug, Clone, Copy)]
pub(super) enum Fault {
    /// Answers with this status and error code (and the service's wait).
    Status {
        status: u16,
        code: &'static str,
        retry_after_ms: Option<u64>,
    },
    /// Closes the connection without forwarding: nothing was applied.
    CloseBeforeForward,
    /// Forwards, then closes without answering: applied, and the client
    /// cannot know it.
    CloseAfterForward,
    /// Forwards after waiting.
    Delay(Duration),
}

/// Faults for the next `times` requests with `method` whose path holds
/// `path`.
struct Rule {
    method: &'static str,
    path: String,
    fault: Fault,
    times: usize,
}

/// One request the proxy saw, and whether it reached Azurite.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    method: String,
    path: String,
    forwarded: bool,
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    seen: Vec<Seen>,
    /// Answers as the Cosmos DB Table API does ([`Proxy::imitate_cosmos`]).
    cosmos: bool,
}

/// The proxy: one thread accepting, one per connection, one request per
/// connection (every answer says `Connection: close`).
pub(super) struct Proxy {
    port: u16,
    state: Arc<Mutex<State>>,
}

impl Proxy {
    fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State::default()));
        let upstream = upstream.to_owned();
        let shared = state.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().flatten() {
                let (state, upstream) = (shared.clone(), upstream.clone());
                std::thread::spawn(move || {
                    let _ = handle(conn, &upstream, &state);
                });
            }
        });
        Proxy { port, state }
    }

    pub(super) fn fail(&self, method: &'static str, path: &str, fault: Fault, times: usize) {
        self.state.lock().unwrap().rules.push(Rule {
            method,
            path: path.to_owned(),
            fault,
            times,
        });
    }

    /// From now on, answers queries as the Cosmos DB Table API does where
    /// it differs from Azure Table Storage: entities of a page in no key
    /// order (here: reversed), and no entity for a `$filter` on Timestamp.
    pub(super) fn imitate_cosmos(&self) {
        self.state.lock().unwrap().cosmos = true;
    }

    /// Forgets the rules left and the requests seen.
    fn reset(&self) {
        *self.state.lock().unwrap() = State::default();
    }

    /// The requests seen since the last reset with `method` and a path
    /// holding `path`.
    pub(super) fn seen(&self, method: &str, path: &str) -> Vec<Seen> {
        let state = self.state.lock().unwrap();
        state
            .seen
            .iter()
            .filter(|s| s.method == method && s.path.contains(path))
            .cloned()
            .collect()
    }
}

fn handle(mut client: TcpStream, upstream: &str, state: &Mutex<State>) -> std::io::Result<()> {
    let mut reader = BufReader::new(client.try_clone()?);
    let mut head = Vec::new();
    let mut content_length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                content_length = value.trim().parse().unwrap_or(0);
            }
            // The proxy answers one request per connection.
            if name.eq_ignore_ascii_case("connection") {
                continue;
            }
        }
        head.push(line);
    }
    let mut body = vec![0; content_length];
    reader.read_exact(&mut body)?;
    let mut words = head[0].split_whitespace();
    let method = words.next().unwrap_or_default().to_owned();
    let path = words.next().unwrap_or_default().to_owned();
    let fault = {
        let mut s = state.lock().unwrap();
        let rule = s
            .rules
            .iter_mut()
            .find(|r| r.times > 0 && r.method == method && path.contains(&r.path));
        rule.map(|r| {
            r.times -= 1;
            r.fault
        })
    };
    let forwarded = !matches!(
        fault,
        Some(Fault::Status { .. } | Fault::CloseBeforeForward)
    );
    let cosmos = state.lock().unwrap().cosmos && method == "GET";
    let filter = path
        .split_once('?')
        .map_or("", |(_, q)| q)
        .split('&')
        .find_map(|p| p.strip_prefix("$filter=").or(p.strip_prefix("%24filter=")))
        .unwrap_or_default();
    if cosmos && filter.contains("Timestamp") {
        let body = "{\"value\":[]}";
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: application/json;odata=nometadata\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        return client.write_all(answer.as_bytes());
    }
    state.lock().unwrap().seen.push(Seen {
        method,
        path,
        forwarded,
    });
    match fault {
        Some(Fault::Status {
            status,
            code,
            retry_after_ms,
        }) => {
            let body = format!(
                "{{\"odata.error\":{{\"code\":\"{code}\",\"message\":{{\"lang\":\"en-US\",\
                 \"value\":\"injected by the test proxy: {code}\"}}}}}}"
            );
            let mut answer = format!(
                "HTTP/1.1 {status} Injected\r\nContent-Type: application/json\r\n\
                 x-ms-error-code: {code}\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            if let Some(ms) = retry_after_ms {
                answer.push_str(&format!("x-ms-retry-after-ms: {ms}\r\n"));
            }
            answer.push_str("\r\n");
            answer.push_str(&body);
            client.write_all(answer.as_bytes())
        }
        Some(Fault::CloseBeforeForward) => Ok(()),
        Some(Fault::CloseAfterForward) => forward(upstream, &head, &body).map(|_| ()),
        Some(Fault::Delay(d)) => {
            std::thread::sleep(d);
            client.write_all(&forward(upstream, &head, &body)?)
        }
        None if cosmos => client.write_all(&unordered(forward(upstream, &head, &body)?)),
        None => client.write_all(&forward(upstream, &head, &body)?),
    }
}

/// An answer with its `value` array (a query page) reversed, sent with a
/// Content-Length (Azurite's is chunked).
fn unordered(answer: Vec<u8>) -> Vec<u8> {
    let Some(at) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return answer;
    };
    let head = String::from_utf8_lossy(&answer[..at]).into_owned();
    let mut body = answer[at + 4..].to_vec();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut plain = Vec::new();
        let mut rest = &body[..];
        while let Some(eol) = rest.windows(2).position(|w| w == b"\r\n") {
            let size = usize::from_str_radix(String::from_utf8_lossy(&rest[..eol]).trim(), 16)
                .unwrap_or(0);
            if size == 0 {
                break;
            }
            plain.extend_from_slice(&rest[eol + 2..eol + 2 + size]);
            rest = &rest[eol + 2 + size + 2..];
        }
        body = plain;
    }
    if let Ok(mut json) = serde_json::from_slice::<serde_json::Value>(&body)
        && let Some(values) = json.get_mut("value").and_then(|v| v.as_array_mut())
    {
        values.reverse();
        body = serde_json::to_vec(&json).unwrap();
    }
    let mut out: String = head
        .split("\r\n")
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            !l.starts_with("transfer-encoding") && !l.starts_with("content-length")
        })
        .map(|l| format!("{l}\r\n"))
        .collect();
    out.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut out = out.into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Sends the request to Azurite on a new connection and returns its whole
/// answer (Azurite closes after it, as asked).
fn forward(upstream: &str, head: &[String], body: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut up = TcpStream::connect(upstream)?;
    let mut request = head.concat();
    request.push_str("Connection: close\r\n\r\n");
    up.write_all(request.as_bytes())?;
    up.write_all(body)?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer)?;
    Ok(answer)
}

/// A server on Azurite through a new proxy, with a new table of `columns`.
pub(super) fn serve_through_proxy(
    prefix: &str,
    columns: &str,
) -> (Proxy, Azure, String, DropTable) {
    serve_through_proxy_with(prefix, columns, &[])
}

/// [`serve_through_proxy`] with more `tablegate serve` arguments.
pub(super) fn serve_through_proxy_with(
    prefix: &str,
    columns: &str,
    args: &[&str],
) -> (Proxy, Azure, String, DropTable) {
    let conn = azurite();
    let endpoint = table_endpoint(&conn);
    let rest = endpoint.strip_prefix("http://").expect("Azurite over http");
    let (host, account) = rest.split_once('/').expect("an account in the path");
    let proxy = Proxy::start(host);
    let conn = format!(
        "UseDevelopmentStorage=true;TableEndpoint=http://127.0.0.1:{}/{account}",
        proxy.port
    );
    let (a, t, drop) = with_table(serve_on(&conn, args), prefix, columns);
    (proxy, a, t, drop)
}

/// The `Actual:` line's retry count and backing-off time in milliseconds.
fn retries(plan: &[String]) -> (u32, u64) {
    let line = plan
        .iter()
        .find(|l| l.starts_with("Actual: throttled retries"))
        .unwrap_or_else(|| panic!("no Actual line: {plan:#?}"));
    // "N (X.XX ms backing off), elapsed …", in µs, ms or s.
    let mut words = line["Actual: throttled retries ".len()..].split_whitespace();
    let n = words.next().unwrap().parse().unwrap();
    let amount: f64 = words
        .next()
        .unwrap()
        .trim_start_matches('(')
        .parse()
        .unwrap();
    let ms = match words.next().unwrap() {
        "µs" => amount / 1000.0,
        "ms" => amount,
        "s" => amount * 1000.0,
        unit => panic!("unexpected unit {unit:?} in {line}"),
    };
    (n, ms as u64)
}

const ENTITY: &str = "PartitionKey='a',RowKey='r1'";

/// The service's "may or may not have succeeded" answer.
const TIMED_OUT: Fault = Fault::Status {
    status: 500,
    code: "OperationTimedOut",
    retry_after_ms: None,
};

/// Throttling answers are retried, counted by EXPLAIN ANALYZE, and the
/// service's own wait is honoured; a slow answer is waited for; when the
/// retries run out the client gets 53000 with the service's words.
#[test]
fn azure_throttling_is_retried_counted_and_reported() {
    let (proxy, a, t, _drop) =
        serve_through_proxy("busy", "pk text, rk text, v int, PRIMARY KEY (pk, rk)");
    let s = &a.s;
    let (_, err, ok) = psql(s, &[&format!("INSERT INTO {t} VALUES ('a', 'r1', 1)")]);
    assert!(ok, "{err}");
    let point = format!("SELECT v FROM {t} WHERE pk = 'a' AND rk = 'r1'");

    proxy.reset();
    let busy = Fault::Status {
        status: 503,
        code: "ServerBusy",
        retry_after_ms: None,
    };
    proxy.fail("GET", ENTITY, busy, 2);
    let p = plan(s, "EXPLAIN ANALYZE", &point);
    assert_eq!(retries(&p).0, 2, "{p:#?}");
    assert_eq!(proxy.seen("GET", ENTITY).len(), 3);

    // Cosmos DB's 429 says how long to wait; the policy's own first
    // delay is about 100 ms.
    proxy.reset();
    let cosmos = Fault::Status {
        status: 429,
        code: "TooManyRequests",
        retry_after_ms: Some(700),
    };
    proxy.fail("GET", ENTITY, cosmos, 1);
    let started = Instant::now();
    let p = plan(s, "EXPLAIN ANALYZE", &point);
    let (n, backoff) = retries(&p);
    assert!(n == 1 && backoff >= 700, "{p:#?}");
    assert!(started.elapsed() >= Duration::from_millis(700));

    proxy.reset();
    proxy.fail("GET", ENTITY, Fault::Delay(Duration::from_millis(300)), 1);
    assert_eq!(rows(s, &point), ["1"]);

    proxy.reset();
    proxy.fail("GET", ENTITY, TIMED_OUT, 100);
    let (_, err, ok) = psql(
        s,
        &[
            "\\set VERBOSITY verbose",
            "SET tablegate.retry_max = 2",
            &point,
        ],
    );
    assert!(!ok && err.contains("53000"), "{err}");
    assert!(err.contains("OperationTimedOut"), "{err}");
    assert_eq!(
        proxy.seen("GET", ENTITY).len(),
        3,
        "one try and two retries"
    );

    // A connection that breaks on every try ends the same way, in words
    // that say so.
    proxy.reset();
    proxy.fail("GET", ENTITY, Fault::CloseBeforeForward, 100);
    let (_, err, ok) = psql(
        s,
        &[
            "\\set VERBOSITY verbose",
            "SET tablegate.retry_max = 1",
            &point,
        ],
    );
    assert!(!ok && err.contains("53000"), "{err}");
    assert!(err.contains("broke before the answer came"), "{err}");
}

/// A write whose connection breaks is applied exactly once: after the
/// service applied it (the answer lost), tablegate reads it back and does
/// not send it again; before, it sends it again.
#[test]
fn azure_interrupted_writes_are_applied_exactly_once() {
    let (proxy, a, t, _drop) =
        serve_through_proxy("once", "pk text, rk text, v int, PRIMARY KEY (pk, rk)");
    let s = &a.s;
    let hundred = |from: usize| {
        let values: Vec<String> = (from..from + 100)
            .map(|i| format!("('a', 'r{i:03}', {i})"))
            .collect();
        format!("INSERT INTO {t} VALUES {}", values.join(", "))
    };

    // A 100-operation EGT applied, its answer lost.
    proxy.reset();
    proxy.fail("POST", "$batch", Fault::CloseAfterForward, 1);
    let (out, err, ok) = psql(s, &[&hundred(0)]);
    assert!(ok && out.contains("INSERT 0 100"), "{out}{err}");
    let batches = proxy.seen("POST", "$batch");
    assert_eq!(batches.len(), 1, "sent once: {batches:#?}");
    assert_eq!(rows(s, &format!("SELECT count(*) FROM {t}")), ["100"]);

    // One that never reached the service is sent again.
    proxy.reset();
    proxy.fail("POST", "$batch", Fault::CloseBeforeForward, 1);
    let (out, err, ok) = psql(s, &[&hundred(100)]);
    assert!(ok && out.contains("INSERT 0 100"), "{out}{err}");
    let batches = proxy.seen("POST", "$batch");
    assert_eq!(batches.len(), 2, "{batches:#?}");
    assert!(!batches[0].forwarded && batches[1].forwarded);
    assert_eq!(
        rows(s, &format!("SELECT count(*), sum(v) FROM {t}")),
        [format!("200|{}", (0..200).sum::<i32>())]
    );

    // A single-entity increment, applied with its answer lost, then one
    // the service timed out on without applying: each lands once.
    let bump = format!("UPDATE {t} SET v = v + 1 WHERE pk = 'a' AND rk = 'r001'");
    proxy.reset();
    proxy.fail("PUT", "RowKey='r001'", Fault::CloseAfterForward, 1);
    let (out, err, ok) = psql(s, &[&bump]);
    assert!(ok && out.contains("UPDATE 1"), "{out}{err}");
    assert_eq!(proxy.seen("PUT", "RowKey='r001'").len(), 1);
    proxy.reset();
    proxy.fail("PUT", "RowKey='r001'", TIMED_OUT, 1);
    let (out, err, ok) = psql(s, &[&bump]);
    assert!(ok && out.contains("UPDATE 1"), "{out}{err}");
    assert_eq!(proxy.seen("PUT", "RowKey='r001'").len(), 2);
    assert_eq!(
        rows(
            s,
            &format!("SELECT v FROM {t} WHERE pk = 'a' AND rk = 'r001'")
        ),
        ["3"]
    );

    // A single-row INSERT applied with its answer lost is not a duplicate.
    proxy.reset();
    proxy.fail("POST", &t, Fault::CloseAfterForward, 1);
    let (out, err, ok) = psql(s, &[&format!("INSERT INTO {t} VALUES ('b', 'x', 7)")]);
    assert!(ok && out.contains("INSERT 0 1"), "{out}{err}");
    assert_eq!(rows(s, &format!("SELECT count(*) FROM {t}")), ["201"]);
}
