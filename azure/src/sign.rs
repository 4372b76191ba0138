//! SharedKey request signing for the Table service.
//!
//! The Table service's SharedKey string to sign is shorter than the Blob
//! service's: `VERB\nContent-MD5\nContent-Type\nDate\nCanonicalizedResource`,
//! where the resource is `/{account}{path}` (the path includes the account
//! again in path-style URLs, as Azurite uses) plus `?comp=...` when the
//! request has one. The signature is base64(HMAC-SHA256(key, string)).

use base64::Engine as _;
use ring::hmac;

/// The parts of a request that are signed.
#[derive(Debug, Clone, Copy)]
pub struct ToSign<'a> {
    /// HTTP verb (`GET`, `POST`, `MERGE`, ...).
    pub verb: &'a str,
    /// `Content-MD5` header, usually empty.
    pub content_md5: &'a str,
    /// `Content-Type` header, empty when there is no body.
    pub content_type: &'a str,
    /// The `x-ms-date` value (RFC 1123).
    pub date: &'a str,
    /// Account name.
    pub account: &'a str,
    /// The URL path, percent-encoded as sent, without the query.
    pub path: &'a str,
    /// The `comp` query parameter, if any.
    pub comp: Option<&'a str>,
}

impl ToSign<'_> {
    /// The exact string the service signs.
    pub fn string_to_sign(&self) -> String {
        let mut resource = format!("/{}{}", self.account, self.path);
        if let Some(c) = self.comp {
            resource.push_str("?comp=");
            resource.push_str(c);
        }
        format!(
            "{}\n{}\n{}\n{}\n{}",
            self.verb, self.content_md5, self.content_type, self.date, resource
        )
    }

    /// The `Authorization` header value.
    pub fn authorization(&self, key: &[u8]) -> String {
        let k = hmac::Key::new(hmac::HMAC_SHA256, key);
        let tag = hmac::sign(&k, self.string_to_sign().as_bytes());
        format!(
            "SharedKey {}:{}",
            self.account,
            base64::engine::general_purpose::STANDARD.encode(tag.as_ref())
        )
    }
}

/// The current time as `x-ms-date` wants it (RFC 1123, GMT).
pub fn http_date(now: chrono::DateTime<chrono::Utc>) -> String {
    now.format("%a, %d %b %Y %H:%M:%S GMT").to_string()
}
