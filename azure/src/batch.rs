//! Entity-group transactions as OData `$batch` requests: one
//! `multipart/mixed` batch holding one changeset, one embedded HTTP request
//! per operation; and the response, whose parts are embedded HTTP
//! responses: all 2xx with their ETags, or one failure whose message starts
//! with the failing operation's index (`"3:The specified entity already
//! exists..."`).

use serde_json::Value as Json;

use crate::error::AzureError;
use crate::http::ACCEPT_JSON;

/// One operation of a changeset.
#[derive(Debug, Clone)]
pub struct Part {
    /// Verb (`POST`, `PUT`, `MERGE`, `DELETE`).
    pub method: &'static str,
    /// Absolute URL of the table or entity.
    pub url: String,
    /// `If-Match` value, if any.
    pub if_match: Option<String>,
    /// JSON body, if any.
    pub body: Option<Json>,
}

/// The `$batch` body for `parts`, and its content type.
pub fn body(parts: &[Part]) -> (String, String) {
    let batch = format!("batch_{}", uuid::Uuid::new_v4());
    let changeset = format!("changeset_{}", uuid::Uuid::new_v4());
    let mut b = String::new();
    b.push_str(&format!("--{batch}\r\n"));
    b.push_str(&format!(
        "Content-Type: multipart/mixed; boundary={changeset}\r\n\r\n"
    ));
    for (i, p) in parts.iter().enumerate() {
        b.push_str(&format!("--{changeset}\r\n"));
        b.push_str("Content-Type: application/http\r\n");
        b.push_str("Content-Transfer-Encoding: binary\r\n");
        b.push_str(&format!("Content-ID: {}\r\n\r\n", i + 1));
        b.push_str(&format!("{} {} HTTP/1.1\r\n", p.method, p.url));
        b.push_str(&format!("Accept: {ACCEPT_JSON}\r\n"));
        b.push_str("DataServiceVersion: 3.0;\r\n");
        b.push_str("Prefer: return-no-content\r\n");
        if let Some(m) = &p.if_match {
            b.push_str(&format!("If-Match: {m}\r\n"));
        }
        match &p.body {
            Some(j) => {
                let text = j.to_string();
                b.push_str("Content-Type: application/json\r\n");
                b.push_str(&format!("Content-Length: {}\r\n\r\n", text.len()));
                b.push_str(&text);
                b.push_str("\r\n");
            }
            None => b.push_str("\r\n"),
        }
    }
    b.push_str(&format!("--{changeset}--\r\n"));
    b.push_str(&format!("--{batch}--\r\n"));
    (b, format!("multipart/mixed; boundary={batch}"))
}

/// What a `$batch` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every operation applied; their new ETags in order (`None` after a
    /// Delete).
    Applied(Vec<Option<String>>),
    /// Nothing applied: operation `index` failed.
    Failed {
        /// Index of the failing operation (0-based).
        index: usize,
        /// Its HTTP status.
        status: u16,
        /// The service's error code.
        code: String,
        /// The message, without the index prefix.
        message: String,
    },
}

#[derive(Debug)]
struct PartResponse {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl PartResponse {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Splits a batch response into its embedded HTTP responses. Boundaries
/// and nesting are not needed: every embedded response starts with an
/// `HTTP/1.1` status line, headers, a blank line, then a body that runs to
/// the next boundary line.
fn responses(text: &str) -> Vec<PartResponse> {
    let lines: Vec<&str> = text.split('\n').map(|l| l.trim_end_matches('\r')).collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let Some(rest) = lines[i].strip_prefix("HTTP/1.1 ") else {
            i += 1;
            continue;
        };
        let status = rest
            .split(' ')
            .next()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        i += 1;
        let mut headers = Vec::new();
        while i < lines.len() && !lines[i].is_empty() {
            if let Some((k, v)) = lines[i].split_once(':') {
                headers.push((k.trim().to_owned(), v.trim().to_owned()));
            }
            i += 1;
        }
        let mut body = String::new();
        while i < lines.len() && !lines[i].starts_with("--") {
            body.push_str(lines[i]);
            body.push('\n');
            i += 1;
        }
        out.push(PartResponse {
            status,
            headers,
            body: body.trim().to_owned(),
        });
    }
    out
}

/// Reads a `$batch` response for `n` operations.
pub fn parse(text: &str, n: usize) -> Result<Outcome, AzureError> {
    let parts = responses(text);
    if let Some(f) = parts.iter().find(|p| !(200..300).contains(&p.status)) {
        let j: Option<Json> = serde_json::from_str(&f.body).ok();
        let err = j.as_ref().and_then(|j| j.get("odata.error"));
        let code = err
            .and_then(|e| e["code"].as_str())
            .unwrap_or_default()
            .to_owned();
        let raw = err
            .and_then(|e| e["message"]["value"].as_str())
            .unwrap_or(&f.body);
        let raw = raw.lines().next().unwrap_or_default();
        // "3:The specified entity already exists." — the index prefix.
        let (index, message) = match raw.split_once(':') {
            Some((i, m)) if i.chars().all(|c| c.is_ascii_digit()) && !i.is_empty() => {
                (i.parse().ok(), m.trim())
            }
            _ => (None, raw),
        };
        let index = index
            .or_else(|| {
                f.header("Content-ID")
                    .and_then(|c| c.parse::<usize>().ok())
                    .map(|c| c.saturating_sub(1))
            })
            .unwrap_or(0)
            .min(n.saturating_sub(1));
        return Ok(Outcome::Failed {
            index,
            status: f.status,
            code,
            message: message.to_owned(),
        });
    }
    if parts.len() != n {
        return Err(AzureError::BadResponse(format!(
            "a batch of {n} operations answered with {} responses",
            parts.len()
        )));
    }
    Ok(Outcome::Applied(
        parts
            .iter()
            .map(|p| p.header("ETag").map(str::to_owned))
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_body_has_one_changeset_with_every_operation() {
        let parts = vec![
            Part {
                method: "POST",
                url: "http://h/acct/t".into(),
                if_match: None,
                body: Some(serde_json::json!({"PartitionKey": "p", "RowKey": "a"})),
            },
            Part {
                method: "DELETE",
                url: "http://h/acct/t(PartitionKey='p',RowKey='b')".into(),
                if_match: Some("*".into()),
                body: None,
            },
        ];
        let (b, ct) = body(&parts);
        let batch = ct.strip_prefix("multipart/mixed; boundary=").unwrap();
        assert!(b.starts_with(&format!("--{batch}\r\n")));
        assert!(b.ends_with(&format!("--{batch}--\r\n")));
        assert_eq!(b.matches("Content-Type: application/http").count(), 2);
        assert!(b.contains("POST http://h/acct/t HTTP/1.1\r\n"));
        assert!(b.contains("If-Match: *\r\n"));
        assert!(b.contains("Content-Length: 33\r\n\r\n{\"PartitionKey\":\"p\",\"RowKey\":\"a\"}"));
    }

    #[test]
    fn responses_give_etags_or_the_failing_index() {
        let ok = "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n\
--changesetresponse_2\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n\
HTTP/1.1 204 No Content\r\nETag: W/\"datetime'2026-11-24T20%3A00%3A00.1Z'\"\r\n\r\n\r\n\
--changesetresponse_2\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n\
HTTP/1.1 204 No Content\r\n\r\n\r\n--changesetresponse_2--\r\n--batchresponse_1--\r\n";
        assert_eq!(
            parse(ok, 2).unwrap(),
            Outcome::Applied(vec![
                Some("W/\"datetime'2026-11-24T20%3A00%3A00.1Z'\"".into()),
                None
            ])
        );
        assert!(parse(ok, 3).is_err());
        let failed = "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_2\r\n\r\n\
--changesetresponse_2\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n\
HTTP/1.1 409 Conflict\r\nContent-ID: 2\r\nContent-Type: application/json;odata=minimalmetadata\r\n\r\n\
{\"odata.error\":{\"code\":\"EntityAlreadyExists\",\"message\":{\"lang\":\"en-US\",\"value\":\"1:The specified entity already exists.\\nRequestId:x\"}}}\r\n\
--changesetresponse_2--\r\n--batchresponse_1--\r\n";
        assert_eq!(
            parse(failed, 3).unwrap(),
            Outcome::Failed {
                index: 1,
                status: 409,
                code: "EntityAlreadyExists".into(),
                message: "The specified entity already exists.".into()
            }
        );
    }
}
