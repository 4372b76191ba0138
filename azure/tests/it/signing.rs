//! SharedKey signing, checked independently of the crate's own HMAC: the
//! string to sign against the Table service's documented layout
//! (`VERB\nContent-MD5\nContent-Type\nDate\nCanonicalizedResource`, the
//! resource being `/{account}{path}` plus `?comp=...`), written out here by
//! hand, and the signature against python3's standard library. And Azurite
//! really checks signatures: a wrong key is refused with 403.

use std::process::Command;

use base64::Engine as _;
use tablegate_azure::AzureStore;
use tablegate_azure::conn::{DEV_ACCOUNT, DEV_KEY};
use tablegate_azure::sign::ToSign;
use tablegate_store::{StoreError, TableStore};

const DATE: &str = "Tue, 24 Nov 2026 20:00:00 GMT";

/// `SharedKey {account}:{base64(HMAC-SHA256(base64decode(key), text))}`,
/// computed by python3's hmac/hashlib/base64.
fn python_authorization(account: &str, key_b64: &str, text: &str) -> String {
    let script = "import base64, hashlib, hmac, sys\n\
                  key = base64.b64decode(sys.argv[1])\n\
                  msg = sys.argv[2].encode('utf-8')\n\
                  sig = base64.b64encode(hmac.new(key, msg, hashlib.sha256).digest()).decode()\n\
                  sys.stdout.write('SharedKey ' + sys.argv[3] + ':' + sig)\n";
    let out = Command::new("python3")
        .args(["-c", script, key_b64, text, account])
        .output()
        .unwrap_or_else(|e| panic!("python3 is needed to check signatures independently: {e}"));
    assert!(
        out.status.success(),
        "python3 failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("ascii")
}

fn dev_key() -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(DEV_KEY)
        .expect("the development key is base64")
}

fn check(to_sign: ToSign<'_>, expected: &str) {
    assert_eq!(to_sign.string_to_sign(), expected);
    assert_eq!(
        to_sign.authorization(&dev_key()),
        python_authorization(to_sign.account, DEV_KEY, expected),
        "signature of {expected:?}"
    );
}

#[test]
fn list_tables_request_is_signed_as_documented() {
    check(
        ToSign {
            verb: "GET",
            content_md5: "",
            content_type: "",
            date: DATE,
            account: DEV_ACCOUNT,
            path: "/devstoreaccount1/Tables",
            comp: None,
        },
        "GET\n\n\nTue, 24 Nov 2026 20:00:00 GMT\n/devstoreaccount1/devstoreaccount1/Tables",
    );
}

#[test]
fn entity_request_with_content_type_and_encoded_path_is_signed_as_documented() {
    // PartitionKey "a b", RowKey "it's é" as the client encodes them.
    check(
        ToSign {
            verb: "PUT",
            content_md5: "",
            content_type: "application/json",
            date: DATE,
            account: DEV_ACCOUNT,
            path: "/devstoreaccount1/tbl(PartitionKey='a%20b',RowKey='it%27%27s%20%C3%A9')",
            comp: None,
        },
        "PUT\n\napplication/json\nTue, 24 Nov 2026 20:00:00 GMT\n\
         /devstoreaccount1/devstoreaccount1/tbl(PartitionKey='a%20b',RowKey='it%27%27s%20%C3%A9')",
    );
}

#[test]
fn comp_and_content_md5_are_in_the_signed_string() {
    check(
        ToSign {
            verb: "GET",
            content_md5: "1B2M2Y8AsgTpgAmY7PhCfg==",
            content_type: "",
            date: DATE,
            account: "myaccount",
            path: "/mytable",
            comp: Some("acl"),
        },
        "GET\n1B2M2Y8AsgTpgAmY7PhCfg==\n\nTue, 24 Nov 2026 20:00:00 GMT\n/myaccount/mytable?comp=acl",
    );
}

/// A key that is valid base64 and 64 bytes long, but not the account's.
fn wrong_key() -> String {
    let bytes: Vec<u8> = (0u8..64)
        .map(|i| i.wrapping_mul(37).wrapping_add(11))
        .collect();
    let key = base64::engine::general_purpose::STANDARD.encode(bytes);
    assert_ne!(key, DEV_KEY);
    key
}

#[tokio::test]
async fn azurite_refuses_a_wrong_key() {
    let endpoint = crate::azurite::endpoint();
    // The right key in the explicit form is accepted ...
    let right = format!("AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};TableEndpoint={endpoint}");
    let s = AzureStore::connect(&right, None)
        .await
        .unwrap_or_else(|e| panic!("the development key is refused: {e}"));
    s.list_tables().await.unwrap();

    // ... another key is not: Azurite checks the signature.
    let wrong = format!(
        "AccountName={DEV_ACCOUNT};AccountKey={};TableEndpoint={endpoint}",
        wrong_key()
    );
    let err = AzureStore::connect(&wrong, None)
        .await
        .expect_err("a wrong key must be refused");
    assert!(
        matches!(
            err,
            StoreError::Remote {
                status: Some(403),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable());
}
