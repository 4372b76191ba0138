//! The Cosmos DB Table API, imitated by the fault proxy in front of
//! Azurite where it differs from Azure Table Storage (there is no Cosmos
//! DB Table emulator): query pages come in no key order, a `$filter` on
//! Timestamp returns nothing, and throttling is 429 with
//! `x-ms-retry-after-ms`. `tablegate serve --azure-service cosmos` must
//! still give SQL's answers.

use super::super::server::psql;
use super::faults::{Fault, serve_through_proxy_with};
use super::{line, plan, psql_at, rows};

#[test]
fn cosmos_answers_are_sorted_filtered_and_retried_by_tablegate() {
    let (proxy, a, t, _drop) = serve_through_proxy_with(
        "cos",
        "pk text, rk text, n int, PRIMARY KEY (pk, rk)",
        &["--azure-service", "cosmos"],
    );
    let s = &a.s;
    let values: Vec<String> = ["a", "b", "c"]
        .iter()
        .flat_map(|pk| (1..=4).map(move |r| format!("('{pk}', 'r{r}', {r})")))
        .collect();
    let (_, err, ok) = psql(
        s,
        &[&format!("INSERT INTO {t} VALUES {}", values.join(", "))],
    );
    assert!(ok, "{err}");
    proxy.imitate_cosmos();

    let p = plan(s, "EXPLAIN", &format!("SELECT * FROM {t}"));
    assert!(
        line(&p, "Backend: ").starts_with("Backend: Cosmos DB Table API (account"),
        "{p:?}"
    );
    // The service's order is not the key order (the proxy reverses each
    // page): without ORDER BY, any order will do, and this one shows the
    // proxy at work.
    let unordered = rows(s, &format!("SELECT pk, rk FROM {t} WHERE pk = 'a'"));
    assert_eq!(unordered, ["a|r4", "a|r3", "a|r2", "a|r1"]);
    // ORDER BY the keys sorts, with or without LIMIT and OFFSET.
    let all: Vec<String> = ["a", "b", "c"]
        .iter()
        .flat_map(|pk| (1..=4).map(move |r| format!("{pk}|r{r}")))
        .collect();
    assert_eq!(
        rows(s, &format!("SELECT pk, rk FROM {t} ORDER BY pk, rk")),
        all
    );
    assert_eq!(
        rows(
            s,
            &format!("SELECT pk, rk FROM {t} WHERE pk = 'b' ORDER BY rk LIMIT 2 OFFSET 1")
        ),
        ["b|r2", "b|r3"]
    );
    assert_eq!(
        rows(s, &format!("SELECT pk, rk FROM {t} ORDER BY pk LIMIT 5")),
        all[..5]
    );
    // A cursor over an ordered query, fetched in pieces.
    let (out, err, ok) = psql_at(
        s,
        &[
            "BEGIN",
            &format!("DECLARE c CURSOR FOR SELECT pk, rk FROM {t} ORDER BY pk, rk"),
            "FETCH 3 FROM c",
            "FETCH 3 FROM c",
            "COMMIT",
        ],
    );
    assert!(ok, "{err}");
    let fetched: Vec<&str> = out.lines().filter(|l| l.contains("|r")).collect();
    assert_eq!(fetched, all[..6], "{out}");

    // A condition on the Timestamp is finished by tablegate: sent to the
    // service, it would return no row.
    assert_eq!(
        rows(
            s,
            &format!("SELECT count(*) FROM {t} WHERE timestamp > '2000-01-01'")
        ),
        ["12"]
    );
    assert_eq!(
        rows(
            s,
            &format!("SELECT rk FROM {t} WHERE pk = 'c' AND timestamp > '2000-01-01' ORDER BY rk")
        ),
        ["r1", "r2", "r3", "r4"]
    );
    let p = plan(
        s,
        "EXPLAIN",
        &format!("SELECT rk FROM {t} WHERE pk = 'c' AND timestamp > '2000-01-01'"),
    );
    assert!(!line(&p, "OData $filter: ").contains("Timestamp"), "{p:?}");

    // 429 with the service's wait, twice: retried, counted.
    proxy.fail(
        "GET",
        &t,
        Fault::Status {
            status: 429,
            code: "TooManyRequests",
            retry_after_ms: Some(50),
        },
        2,
    );
    let p = plan(
        s,
        "EXPLAIN ANALYZE",
        &format!("SELECT rk FROM {t} WHERE pk = 'a' ORDER BY rk"),
    );
    assert!(
        line(&p, "Actual: throttled retries").starts_with("Actual: throttled retries 2 "),
        "{p:?}"
    );
    assert!(
        line(&p, "Actual: entities scanned").contains("returned 4"),
        "{p:?}"
    );
}
