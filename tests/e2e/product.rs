//! The product a person meets: the demo's printed queries, system views,
//! the Prometheus endpoint, `tablegate stress`, `tablegate import` and the
//! configuration (file, environment, flags).

use std::io::{Read, Write};
use std::process::Command;
use std::sync::Arc;

use datafusion::arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
use datafusion::arrow::datatypes::{DataType, Field, Schema};

use super::server::{TestServer, psql, psql_command};

fn tablegate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tablegate"))
}

fn run(cmd: &mut Command) -> (String, String, bool) {
    let out = cmd.output().expect("run tablegate");
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        out.status.success(),
    )
}

#[test]
fn demo_prints_five_queries_that_run_and_show_the_four_classes() {
    let s = TestServer::demo(&["--throttle", "off"]);
    let printed = s.stdout.lock().unwrap().clone();
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("connect with: psql -h 127.0.0.1 -p ")),
        "{printed:?}"
    );
    let queries: Vec<String> = printed
        .iter()
        .map(|l| l.trim())
        .filter(|l| {
            l.starts_with("SELECT ") && l.contains("FROM registrations") && l.ends_with(';')
        })
        .map(str::to_owned)
        .collect();
    assert_eq!(queries.len(), 5, "{printed:?}");
    let mut classes = std::collections::BTreeSet::new();
    for q in &queries {
        let (out, err, ok) = psql(&s, &[q]);
        assert!(ok && out.contains(" row"), "{q}: {err}");
        let (out, err, ok) = psql(&s, &[&format!("EXPLAIN {q}")]);
        assert!(ok, "{q}: {err}");
        for line in out.lines() {
            if let Some(rest) = line.trim().strip_prefix("Class: ") {
                classes.insert(rest.split_whitespace().next().unwrap().to_owned());
            }
            if let Some(i) = line.find("class=") {
                let c = line[i + 6..].split([',', ' ']).next().unwrap();
                classes.insert(c.to_owned());
            }
        }
    }
    let want: std::collections::BTreeSet<String> =
        ["point", "row-range", "partition-range", "full-scan"]
            .iter()
            .map(|s| s.to_string())
            .collect();
    assert_eq!(classes, want);
    // The second table: the same question answered through its index
    // (EXPLAIN ANALYZE says so) and without it, with the same rows, which
    // are the runners of that age the registrations' AGE: rows list.
    let indexed: Vec<&String> = printed
        .iter()
        .filter(|l| l.contains("FROM entrants") && l.trim_end().ends_with(';'))
        .collect();
    assert_eq!(indexed.len(), 1, "{printed:?}");
    let q = indexed[0].trim();
    let (out, err, ok) = psql(&s, &[&format!("EXPLAIN ANALYZE {q}")]);
    assert!(ok, "{err}");
    assert!(
        out.contains("Actual: rows found through index entrants_age"),
        "{out}"
    );
    let sorted = format!("{} ORDER BY bib", q.trim_end_matches(';'));
    let (with, err, ok) = psql(&s, &[&sorted]);
    assert!(ok && with.contains(" rows)"), "{err}{with}");
    let (without, err, ok) = psql(&s, &["SET tablegate.use_indexes = off", &sorted]);
    assert!(ok, "{err}");
    assert!(
        without.ends_with(&with) || without.contains(with.trim()),
        "{with}\n{without}"
    );
    let (dual, err, ok) = psql(
        &s,
        &[
            "SELECT count(*) FROM registrations WHERE race = '2026 New York City Marathon__Full' AND runner >= 'AGE:030' AND runner < 'AGE:035'",
        ],
    );
    assert!(ok, "{err}");
    let rows = with
        .lines()
        .rev()
        .find_map(|l| {
            l.trim()
                .strip_prefix('(')?
                .strip_suffix(" rows)")?
                .parse::<u64>()
                .ok()
        })
        .expect("a row count");
    assert!(
        dual.contains(&format!(" {rows}\n")),
        "{rows} rows vs {dual}"
    );
}

#[test]
fn system_views_show_tables_ranges_servers_and_counters() {
    let s = TestServer::demo(&["--throttle", "on", "--runners", "20"]);
    let nyc = "2026 New York City Marathon__Full";
    let (_, err, ok) = psql(
        &s,
        &[
            &format!(
                "SELECT name FROM registrations WHERE race = '{nyc}' AND runner = 'BIB:00001__x'"
            ),
            &format!(
                "SELECT name FROM registrations WHERE race = '{nyc}' AND runner = 'BIB:00002__x'"
            ),
        ],
    );
    assert!(ok, "{err}");
    let (out, err, ok) = psql(&s, &["\\dv tablegate.*"]);
    assert!(ok, "{err}");
    for v in [
        "balance_events",
        "health",
        "hot_partitions",
        "indexes",
        "insert_patterns",
        "query_counters",
        "range_partitions",
        "servers",
        "statements",
        "tables",
        "throttle_counters",
    ] {
        assert!(out.contains(v), "{v} missing from \\dv: {out}");
    }
    assert!(out.contains("view"), "{out}");
    let (out, err, ok) = psql(
        &s,
        &[
            "SELECT table_name, partition_key, row_key, entities, index_entities FROM tablegate.tables ORDER BY table_name",
            "SELECT count(*) AS ranges, sum(entities) AS entities FROM tablegate.range_partitions WHERE table_name = 'registrations'",
            "SELECT server, capacity_per_sec FROM tablegate.servers ORDER BY server",
            "SELECT scope, target_per_sec FROM tablegate.throttle_counters ORDER BY scope",
            "SELECT class, statements FROM tablegate.query_counters WHERE class = 'point'",
        ],
    );
    assert!(ok, "{err}");
    // 18 event/distance partitions × 20 runners × 2 rows.
    assert!(
        out.contains("registrations | race          | runner  |      720 |              0"),
        "{out}"
    );
    // The entrants' index entries are counted apart from its rows.
    assert!(
        out.contains("entrants      | race          | bib     |      360 |            360"),
        "{out}"
    );
    assert!(out.contains("|      720"), "{out}");
    assert!(out.contains("      3 |            10000"), "{out}");
    assert!(
        out.contains(" partition | ") && out.contains("2000"),
        "{out}"
    );
    let point: Vec<&str> = out.lines().filter(|l| l.contains(" point ")).collect();
    assert_eq!(point.len(), 1, "{out}");
    let n: u64 = point[0].split('|').nth(1).unwrap().trim().parse().unwrap();
    assert!(n >= 2, "{out}");
    // Views are read-only.
    let (_, err, ok) = psql(&s, &["DELETE FROM tablegate.tables"]);
    assert!(!ok && !err.is_empty());
}

/// GET /metrics over a plain socket.
pub fn scrape(port: u16) -> String {
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", port)).expect("metrics port");
    sock.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    sock.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out}");
    out.split_once("\r\n\r\n").unwrap().1.to_owned()
}

/// Checks the Prometheus text format line by line; returns the samples.
pub fn samples(body: &str) -> Vec<(String, f64)> {
    let mut v = Vec::new();
    for line in body.lines().filter(|l| !l.is_empty()) {
        if let Some(c) = line.strip_prefix('#') {
            assert!(
                c.starts_with(" HELP ") || c.starts_with(" TYPE "),
                "bad comment: {line}"
            );
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("name value");
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name: {line}"
        );
        if name_end < series.len() {
            assert!(series.ends_with('}'), "bad labels: {line}");
        }
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line}"));
        v.push((series.to_owned(), value));
    }
    v
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn metrics_endpoint_serves_prometheus_text_that_follows_queries() {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let s = TestServer::demo(&["--throttle", "on", "--metrics-listen", &addr]);
    let queries = |body: &str, class: &str| {
        let key = format!("tablegate_queries_total{{class=\"{class}\"}}");
        samples(body)
            .into_iter()
            .find(|(k, _)| *k == key)
            .map_or(0.0, |(_, v)| v)
    };
    let point = |body: &str| queries(body, "point");
    let before = scrape(port);
    let (_, err, ok) = psql(
        &s,
        &[
            "SELECT name FROM registrations WHERE race = '2026 New York City Marathon__Full' AND runner = 'BIB:00001__x'",
            "SELECT count(*) FROM registrations",
            "CREATE TABLE lagged (pk text, rk text, email text, PRIMARY KEY (pk, rk))",
            "CREATE INDEX lagged_email ON lagged (email) GLOBAL",
            "INSERT INTO lagged VALUES ('a', '1', 'x@y'), ('b', '1', 'z@y'), ('b', '2', 'x@y')",
        ],
    );
    assert!(ok, "{err}");
    // The maintainer applies the three rows' changes on its own.
    let lagged = |body: &str, family: &str| {
        let key = format!("{family}{{table=\"lagged\"}}");
        samples(body)
            .into_iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    };
    let mut body = scrape(port);
    for _ in 0..100 {
        if lagged(&body, "tablegate_global_index_rows_applied_total") == Some(3.0) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        body = scrape(port);
    }
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let body = scrape(port);
    assert_eq!(
        lagged(&body, "tablegate_global_index_rows_applied_total"),
        Some(3.0),
        "{body}"
    );
    assert_eq!(
        lagged(&body, "tablegate_global_index_pending_partitions"),
        Some(0.0),
        "{body}"
    );
    assert_eq!(
        lagged(&body, "tablegate_global_index_lag_seconds"),
        Some(0.0),
        "{body}"
    );
    assert_eq!(point(&body), point(&before) + 1.0, "{body}");
    // Every class's series exists from the start; this one counted the
    // count(*).
    assert!(
        queries(&body, "analytics") >= queries(&before, "analytics") + 1.0,
        "{body}"
    );
    let all = samples(&body);
    let has = |prefix: &str| all.iter().any(|(k, _)| k.starts_with(prefix));
    assert!(
        has("tablegate_query_duration_seconds_bucket{class=\"point\""),
        "{body}"
    );
    assert!(has("tablegate_entities_scanned_total"), "{body}");
    assert!(
        has("tablegate_throttled_requests_total{scope=\"partition\"}"),
        "{body}"
    );
    assert!(
        has("tablegate_server_load_entities_per_second{server=\"0\"}"),
        "{body}"
    );
    assert!(has("tablegate_build_info{"), "{body}");
    assert!(has("tablegate_connections{state=\"session\"}"), "{body}");
    assert!(has("tablegate_engine_accepts_writes"), "{body}");
    // Every series is explained, and listed in the README.
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let helped: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# HELP "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for (series, _) in &all {
        let name = &series[..series.find('{').unwrap_or(series.len())];
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|f| helped.contains(f)))
            .unwrap_or(name);
        assert!(
            helped.contains(&family),
            "{family} has no HELP text:\n{body}"
        );
        assert!(readme.contains(family), "README.md does not list {family}");
    }
    // The shipped Grafana dashboard reads only series that exist: served
    // now, or documented (a gauge such as the hottest partitions' appears
    // only once one is warm).
    let dashboard = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/grafana/tablegate.json"
    ))
    .unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let exprs: Vec<&str> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap())
        .map(|t| t["expr"].as_str().unwrap())
        .collect();
    assert!(exprs.len() >= 10);
    for expr in exprs {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if let Some(name) = word.strip_prefix("tablegate_") {
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s))
                    .unwrap_or(name);
                let family = format!("tablegate_{family}");
                assert!(
                    helped.contains(&family.as_str())
                        || readme.contains(&format!("| `{family}{{"))
                        || readme.contains(&format!("| `{family}`")),
                    "the dashboard reads tablegate_{name}, which /metrics does not serve"
                );
            }
        }
    }
}

#[test]
fn stress_admits_the_target_and_charts_it() {
    let dir = tempfile::tempdir().unwrap();
    let chart = dir.path().join("stress.svg");
    let (out, err, ok) = run(tablegate()
        .args([
            "stress",
            "--partition-target",
            "400",
            "--clients",
            "6",
            "--duration",
            "4",
            "--entities",
            "200",
            "--chart",
        ])
        .arg(&chart));
    assert!(ok, "{out}\n{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("admitted:"))
        .unwrap_or_else(|| panic!("{out}"));
    // "admitted:   1610 entities in 4.0 s = 402 entities/s (target 400/s: 100.6%)"
    let rate: f64 = line
        .split(" = ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(
        (360.0..=440.0).contains(&rate),
        "admitted {rate}/s, not 400 ± 10%: {out}"
    );
    assert!(
        out.contains("verdict:    the partition is too hot"),
        "{out}"
    );
    assert!(out.contains("p99"), "{out}");
    let svg = std::fs::read_to_string(&chart).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("valid XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    assert!(svg.contains("target 400 entities/s"), "{svg}");

    // Below the target, the verdict is fine.
    let (out, err, ok) = run(tablegate().args([
        "stress",
        "--partition-target",
        "400",
        "--clients",
        "2",
        "--rate",
        "100",
        "--duration",
        "2",
        "--entities",
        "100",
    ]));
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("verdict:    fine"), "{out}");
}

/// `tablegate import FILE --table T [--partition-key P --row-key R] --connect CONN`.
fn import(
    file: &std::path::Path,
    table: &str,
    keys: Option<(&str, &str)>,
    conn: &str,
) -> (String, String, bool) {
    let mut cmd = tablegate();
    cmd.arg("import")
        .arg(file)
        .args(["--table", table, "--connect", conn]);
    if let Some((pk, rk)) = keys {
        cmd.args(["--partition-key", pk, "--row-key", rk]);
    }
    run(&mut cmd)
}

const ROWS: usize = 100_000;

fn data_batch() -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("pk", DataType::Utf8, false),
        Field::new("rk", DataType::Utf8, false),
        Field::new("n", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("score", DataType::Float64, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from_iter_values(
                (0..ROWS).map(|i| format!("p{:02}", i % 50)),
            )),
            Arc::new(StringArray::from_iter_values(
                (0..ROWS).map(|i| format!("r{i:06}")),
            )),
            Arc::new(Int64Array::from_iter_values((0..ROWS).map(|i| i as i64))),
            Arc::new(StringArray::from_iter(
                (0..ROWS).map(|i| (i % 7 != 0).then(|| format!("name, \"{i}\""))),
            )),
            Arc::new(Float64Array::from_iter_values(
                (0..ROWS).map(|i| i as f64 / 4.0),
            )),
        ],
    )
    .unwrap()
}

fn check_imported(s: &TestServer, table: &str) {
    let (out, err, ok) = psql(
        s,
        &[
            &format!("SELECT count(*) FROM {table}"),
            &format!("SELECT n, name, score FROM {table} WHERE pk = 'p17' AND rk = 'r012317'"),
            &format!("SELECT n, name FROM {table} WHERE pk = 'p49' AND rk = 'r000049'"),
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains(&format!(" {ROWS}\n")), "{out}");
    assert!(out.contains("12317 | name, \"12317\" | 3079.25"), "{out}");
    // Row 49 is a multiple of 7: its name is NULL.
    assert!(
        out.lines().any(|l| {
            let f: Vec<&str> = l.split('|').map(str::trim).collect();
            f == ["49", ""]
        }),
        "{out}"
    );
}

#[test]
fn import_csv_parquet_and_json_and_name_the_bad_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let s = TestServer::serve_in(data.path(), &["--throttle", "off"]);
    let conn = s.conn_str();
    let batch = data_batch();

    let csv = dir.path().join("data.csv");
    {
        let f = std::fs::File::create(&csv).unwrap();
        let mut w = datafusion::arrow::csv::WriterBuilder::new()
            .with_header(true)
            .build(f);
        w.write(&batch).unwrap();
    }
    let (out, err, ok) = import(&csv, "imp_csv", Some(("pk", "rk")), &conn);
    assert!(ok, "{out}\n{err}");
    assert!(out.contains(&format!("imported {ROWS} rows")), "{out}");
    check_imported(&s, "imp_csv");

    let parquet = dir.path().join("data.parquet");
    {
        let f = std::fs::File::create(&parquet).unwrap();
        // Snappy, as pyarrow and DuckDB write by default: import must have
        // Parquet's codecs.
        use datafusion::parquet::{basic::Compression, file::properties::WriterProperties};
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .build();
        let mut w =
            datafusion::parquet::arrow::ArrowWriter::try_new(f, batch.schema(), Some(props))
                .unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
    }
    let (out, err, ok) = import(&parquet, "imp_pq", Some(("pk", "rk")), &conn);
    assert!(ok, "{out}\n{err}");
    check_imported(&s, "imp_pq");

    let json = dir.path().join("few.jsonl");
    std::fs::write(
        &json,
        "{\"city\":\"Oslo\",\"day\":\"d1\",\"temp\":-3.5}\n{\"city\":\"Lima\",\"day\":\"d1\",\"temp\":19.0}\n",
    )
    .unwrap();
    let (out, err, ok) = import(&json, "weather", Some(("city", "day")), &conn);
    assert!(ok, "{out}\n{err}");
    let (out, _, _) = psql(
        &s,
        &["SELECT temp FROM weather WHERE city = 'Oslo' AND day = 'd1'"],
    );
    assert!(out.contains("-3.5"), "{out}");

    // A malformed CSV: the fifth line has a field too few.
    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "pk,rk,n\na,1,1\na,2,2\na,3,3\na,4\na,5,5\n").unwrap();
    let (out, err, ok) = import(&bad, "bad", Some(("pk", "rk")), &conn);
    assert!(!ok, "{out}");
    assert!(
        err.contains("at line 5") && err.contains("bad.csv"),
        "{err}"
    );
    // A value that does not fit the inferred type names line and column.
    let bad2 = dir.path().join("bad2.csv");
    let mut text = String::from("pk,rk,n\n");
    for i in 0..1500 {
        text.push_str(&format!("a,{i},{i}\n"));
    }
    text.push_str("a,x,not-a-number\n");
    std::fs::write(&bad2, text).unwrap();
    let (out, err, ok) = import(&bad2, "bad2", Some(("pk", "rk")), &conn);
    assert!(!ok, "{out}");
    assert!(err.contains("not-a-number"), "{err}");
    // Importing into a missing table without keys says how to create it.
    let (_, err, ok) = import(&json, "nosuch", None, &conn);
    assert!(!ok);
    assert!(err.contains("--partition-key"), "{err}");
}

#[test]
fn config_file_env_and_flags_merge_and_bad_settings_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tablegate.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:6543\"\n[throttle]\nper_partition = 500\nper_server = 4000\n[session]\npage_size = 200\n",
    )
    .unwrap();
    let (out, err, ok) = run(tablegate()
        .args(["serve", "--print-config", "--config"])
        .arg(&file)
        .args(["--server-target", "7000"])
        .env("TABLEGATE_PAGE_SIZE", "300")
        .env("TABLEGATE_PARTITION_TARGET", "600"));
    assert!(ok, "{err}");
    assert!(out.contains("listen = \"127.0.0.1:6543\""), "{out}");
    assert!(out.contains("per_partition = 600"), "{out}");
    assert!(out.contains("per_server = 7000"), "{out}");
    assert!(out.contains("page_size = 300"), "{out}");

    // Session defaults reach every session, and RESET returns to them.
    let data = tempfile::tempdir().unwrap();
    let s = TestServer::serve_in(
        data.path(),
        &["--page-size", "250", "--retry-policy", "none"],
    );
    let (out, err, ok) = psql(
        &s,
        &[
            "SHOW tablegate.page_size",
            "SET tablegate.page_size = 10",
            "RESET tablegate.page_size",
            "SHOW tablegate.page_size",
            "SHOW tablegate.retry_policy",
        ],
    );
    assert!(ok, "{err}");
    assert_eq!(out.matches(" 250\n").count(), 2, "{out}");
    assert!(out.contains(" none\n"), "{out}");

    // Trust on a public address, a typo in the file, a bad value.
    let (_, err, ok) = run(tablegate().args(["serve", "--listen", "0.0.0.0:0"]));
    assert!(!ok && err.contains("loopback"), "{err}");
    std::fs::write(&file, "[throttle]\nper_partion = 1\n").unwrap();
    let (_, err, ok) = run(tablegate().args(["serve", "--config"]).arg(&file));
    assert!(!ok && err.contains("per_partion"), "{err}");
    let (_, err, ok) = run(tablegate().args(["serve", "--page-size", "0"]));
    assert!(!ok && err.contains("page_size"), "{err}");
}

/// The examples: `cargo test` builds `examples/race_client.rs` next to
/// the test binary (target/debug/examples/).
fn example_binary(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let path = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        path.exists(),
        "{} is missing: cargo test builds the examples (cargo build --examples)",
        path.display()
    );
    path
}

fn ok_line(out: &str, prefix: &str) -> std::collections::HashMap<String, u64> {
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix(prefix))
        .unwrap_or_else(|| panic!("no {prefix} line: {out}"));
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.parse().unwrap()))
        .collect()
}

#[test]
fn examples_register_runners_retry_53000_and_not_client_errors() {
    let client = example_binary("race_client");
    // A partition target of 50 entities/s: the client's transactions are
    // throttled (53000), rolled back, retried with backoff, and all land.
    let s = TestServer::demo(&["--partition-target", "50", "--runners", "1"]);
    // A client error fails at once (checked first, while the partition
    // is cool: a hot one answers 53000 before looking at the key).
    let (out, _, ok) = run(Command::new(&client).arg(s.conn_str()).arg("--bad-key"));
    assert!(!ok);
    assert!(out.contains("client error 22023 not retried"), "{out}");
    let (out, err, ok) = run(Command::new(&client)
        .arg(s.conn_str())
        .args(["--runners", "25"]));
    assert!(ok, "{out}\n{err}");
    let v = ok_line(&out, "race_client ok: ");
    assert_eq!((v["registered"], v["rows"]), (25, 50), "{out}");
    assert!(v["retries_53000"] > 0, "no throttling seen: {out}");
    // A second run finds them registered (23505 is not retried either).
    let (out, err, ok) = run(Command::new(&client)
        .arg(s.conn_str())
        .args(["--runners", "25"]));
    assert!(ok, "{out}\n{err}");
    assert_eq!(ok_line(&out, "race_client ok: ")["rows"], 50, "{out}");

    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/psycopg_race.py");
    let (out, err, ok) = run(Command::new("python3")
        .arg(script)
        .arg(s.port.to_string())
        .args(["127.0.0.1", "20"]));
    assert!(
        ok,
        "psycopg (pip install 'psycopg[binary]'; .ci/run does): {out}\n{err}"
    );
    let v = ok_line(&out, "psycopg_race ok: ");
    assert_eq!((v["registered"], v["rows"]), (20, 40), "{out}");
}

/// The workload log: `tablegate.statements` keeps each statement by its
/// normalized text and class, from both protocols, with calls, errors, rows
/// and the entities the store read (analytics plans included); it survives
/// a restart, and `tablegate_statements_reset()` empties it for good.
#[tokio::test]
async fn the_statement_log_records_the_workload_and_survives_restarts() {
    use tokio_postgres::NoTls;
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::serve_in(dir.path(), &["--throttle", "off"]);
    let (c, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    c.batch_execute(
        "CREATE TABLE kvs (k text, r int, v text, PRIMARY KEY (k, r));
         INSERT INTO kvs SELECT 'k' || (n % 5), n, 'v' FROM generate_series(1, 50) AS g(n)",
    )
    .await
    .unwrap();
    // Two runs of one shape through the simple protocol, three through a
    // prepared statement, an analytics scan, and a failure.
    for r in [1, 6] {
        c.simple_query(&format!("SELECT v FROM kvs WHERE k = 'k1' AND r = {r}"))
            .await
            .unwrap();
    }
    let point = c
        .prepare("SELECT v FROM kvs WHERE k = $1 AND r = $2")
        .await
        .unwrap();
    for r in [1, 6, 11] {
        assert_eq!(c.query(&point, &[&"k1", &r]).await.unwrap().len(), 1);
    }
    c.simple_query("SELECT count(*) FROM kvs WHERE v <> 'x'")
        .await
        .unwrap();
    assert!(c.simple_query("SELECT 1/0 FROM kvs").await.is_err());

    let log = |c: tokio_postgres::Client| async move {
        let rows = c
            .query(
                "SELECT query, class, calls, errors, rows, entities_scanned FROM tablegate.statements \
                 WHERE query NOT LIKE '%tablegate%' ORDER BY query, class",
                &[],
            )
            .await
            .unwrap();
        rows.iter()
            .map(|r| {
                format!(
                    "{} | {} | {} | {} | {} | {}",
                    r.get::<_, String>(0),
                    r.get::<_, String>(1),
                    r.get::<_, i64>(2),
                    r.get::<_, i64>(3),
                    r.get::<_, i64>(4),
                    r.get::<_, i64>(5)
                )
            })
            .collect::<Vec<_>>()
    };
    let before = log(c).await;
    let want = |line: &str| {
        assert!(
            before.iter().any(|l| l == line),
            "{line}\nnot in\n{before:#?}"
        );
    };
    // (What the failed scan read depends on when the error stopped it.)
    assert!(
        before
            .iter()
            .any(|l| l.starts_with("SELECT $1/$2 FROM kvs | analytics | 1 | 1 | 0 |")),
        "{before:#?}"
    );
    want("SELECT count(*) FROM kvs WHERE v <> $1 | analytics | 1 | 0 | 1 | 50");
    want("SELECT v FROM kvs WHERE k = $1 AND r = $2 | point | 5 | 0 | 5 | 5");
    assert!(
        before.iter().any(|l| l.starts_with("CREATE TABLE kvs")),
        "{before:#?}"
    );
    assert!(
        before
            .iter()
            .any(|l| l.contains("generate_series($4, $5)") && l.contains("| write | 1 | 0 | 50 |")),
        "{before:#?}"
    );

    // Written back on shutdown, read again at start.
    assert!(s.terminate());
    let s = TestServer::serve_in(dir.path(), &["--throttle", "off"]);
    let (c, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    assert_eq!(log(c).await, before);

    let (c, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    let n: i64 = c
        .query_one("SELECT tablegate_statements_reset()", &[])
        .await
        .unwrap()
        .get(0);
    assert!(n >= before.len() as i64, "{n}");
    assert_eq!(log(c).await, Vec::<String>::new());
    assert!(s.terminate());
    let s = TestServer::serve_in(dir.path(), &["--throttle", "off"]);
    let (c, conn) = tokio_postgres::connect(&s.conn_str(), NoTls).await.unwrap();
    tokio::spawn(conn);
    assert_eq!(log(c).await, Vec::<String>::new(), "the reset is durable");
}

/// `tablegate advise`: from the statement log and from a workload file,
/// over a running server. A log table keyed by its timestamp is flagged
/// append-only; the tenant, which every query names, is recommended as the
/// PartitionKey.
#[test]
fn advise_ranks_key_designs_from_the_log_and_a_workload_file() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::serve_in(dir.path(), &["--throttle", "off"]);
    let (out, err, ok) = psql(
        &s,
        &[
            "CREATE TABLE events (tenant text, ts timestamptz, seq int, msg text, PRIMARY KEY (ts, seq))",
            "INSERT INTO events SELECT 't' || (g % 8), to_timestamp(1793491200 + g), g, 'm' || g FROM generate_series(1, 400) AS s(g)",
            "INSERT INTO events SELECT 't' || (g % 8), to_timestamp(1793491200 + g), g, 'm' || g FROM generate_series(401, 800) AS s(g)",
            "INSERT INTO events SELECT 't' || (g % 8), to_timestamp(1793491200 + g), g, 'm' || g FROM generate_series(801, 1200) AS s(g)",
            "SELECT msg FROM events WHERE tenant = 't3' AND seq = 11",
            "SELECT msg FROM events WHERE tenant = 't5' AND seq = 13",
            "SELECT msg FROM events WHERE tenant = 't1' AND seq > 1100",
        ],
    );
    assert!(ok, "{out}\n{err}");

    // From the statement log (its three SELECTs name the table).
    let conn = s.conn_str();
    let (out, err, ok) = run(tablegate().args(["advise", "events", "--connect", &conn]));
    assert!(ok, "{out}\n{err}");
    let first = out.lines().nth(1).unwrap_or_default();
    assert!(
        first.contains("(tenant, seq)") && first.contains("recommended"),
        "{out}"
    );
    let ts = out
        .lines()
        .find(|l| l.contains("(ts, seq) *"))
        .unwrap_or_default();
    assert!(ts.contains("append-only"), "{out}");

    // From a file, as JSON: one statement by seq alone, weighted above the
    // rest, makes seq the PartitionKey.
    let file = dir.path().join("workload.sql");
    std::fs::write(
        &file,
        "-- weight: 100\nSELECT msg FROM events WHERE seq = $1;\nSELECT msg FROM events WHERE tenant = $1;\n",
    )
    .unwrap();
    let (out, err, ok) = run(tablegate()
        .args(["advise", "events", "--format", "json", "--connect", &conn])
        .arg("--workload")
        .arg(&file));
    assert!(ok, "{out}\n{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    let best = &doc["designs"][0];
    assert_eq!(best["partition_key"], "seq", "{out}");
    assert_eq!(best["verdict"], "recommended", "{out}");
    assert!(best["entities_per_call"].as_f64().unwrap() < 20.0, "{out}");

    // Errors reach the command line with their SQLSTATE.
    let (out, err, ok) = run(tablegate().args(["advise", "nosuch", "--connect", &conn]));
    assert!(!ok && err.contains("42P01"), "{out}\n{err}");
}

/// `tablegate advise --apply`: the recommended design (a compound
/// PartitionKey here) becomes a new table holding every row, the table
/// advised on is left as it was, and on the new table each statement reads
/// the entities the advisor estimated for it.
#[test]
fn advise_apply_creates_the_design_and_its_estimates_hold() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestServer::serve_in(dir.path(), &["--throttle", "off"]);
    let (out, err, ok) = psql(
        &s,
        &[
            "CREATE TABLE runners (event text NOT NULL, distance text NOT NULL, bib int NOT NULL, name text, age int)",
            "INSERT INTO runners SELECT CASE g / 300 WHEN 0 THEN 'Boston' WHEN 1 THEN 'Chicago' ELSE 'Berlin' END, \
             CASE (g / 100) % 3 WHEN 0 THEN 'Full' WHEN 1 THEN 'Half' ELSE '10K' END, g % 100 + 1, \
             'runner ' || g, 18 + (g * 7) % 60 FROM generate_series(0, 899) AS s(g)",
        ],
    );
    assert!(ok, "{out}\n{err}");
    let by_bib =
        "SELECT name FROM runners WHERE event = 'Chicago' AND distance = 'Half' AND bib = 7";
    let by_age = "SELECT name FROM runners WHERE event = 'Chicago' AND distance = 'Half' AND age BETWEEN 40 AND 44";
    let file = dir.path().join("race.sql");
    std::fs::write(
        &file,
        format!("-- weight: 10\n{by_bib};\n-- weight: 5\n{by_age};\n"),
    )
    .unwrap();
    let conn = s.conn_str();
    let (out, err, ok) = run(tablegate()
        .args(["advise", "runners", "--apply", "--connect", &conn])
        .arg("--workload")
        .arg(&file));
    assert!(ok, "{out}\n{err}");
    assert!(
        out.contains("created runners_by_event__distance keyed by (event__distance, bib) and copied 900 of 900 rows"),
        "{out}\n{err}"
    );
    assert!(
        err.contains("copying") || err.contains("INSERT INTO"),
        "{err}"
    );
    let (out, err, ok) = psql(
        &s,
        &[
            "SELECT count(*) FROM runners",
            "SELECT count(*) FROM runners_by_event__distance WHERE event__distance = 'Chicago__Half'",
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains("900") && out.contains(" 100"), "{out}");
    // The advisor's estimate for each statement under the design.
    let (out, err, ok) = psql(
        &s,
        &[&format!(
            "SELECT partition_key, row_key, entities_per_statement FROM tablegate.advise('runners', $$ {by_bib}; {by_age} $$)"
        )],
    );
    assert!(ok, "{err}");
    let estimates: Vec<f64> = out
        .lines()
        .map(|l| l.split('|').map(str::trim).collect::<Vec<_>>())
        .find(|c| c.len() == 3 && c[0] == "event__distance" && c[1] == "bib")
        .map(|c| {
            c[2].trim_matches(['{', '}'])
                .split(',')
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_else(|| panic!("{out}"));
    // One runner by bib; the age band reads the whole partition.
    assert_eq!(estimates, [1.0, 100.0], "{out}");
    for (stmt, estimate) in [by_bib, by_age].into_iter().zip(estimates) {
        // What the statement reads on the new table, with the key the
        // application now writes.
        let on_new = stmt.replace(
            "FROM runners WHERE",
            "FROM runners_by_event__distance WHERE event__distance = 'Chicago__Half' AND",
        );
        let (out, err, ok) = psql(&s, &[&format!("EXPLAIN ANALYZE {on_new}")]);
        assert!(ok, "{err}");
        let actual: f64 = out
            .lines()
            .find_map(|l| l.trim().strip_prefix("Actual: entities scanned "))
            .and_then(|r| r.split(',').next()?.parse().ok())
            .unwrap_or_else(|| panic!("{out}"));
        assert_eq!(estimate, actual, "{stmt}: {out}");
    }
}

/// `tablegate split` pre-splits a table of a stopped server at its own
/// PartitionKeys over the servers; the server then serves those ranges
/// (and the same rows). It refuses a running server's directory, an
/// unknown table and an empty one.
#[test]
fn split_pre_splits_a_table_into_ranges_over_the_servers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let s = TestServer::serve_in(dir.path(), &["--throttle", "off"]);
    let values: Vec<String> = (0..60).map(|i| format!("('k{i:02}', 1)")).collect();
    let (_, err, ok) = psql(
        &s,
        &[
            "CREATE TABLE tee (pk text, rk bigint, PRIMARY KEY (pk, rk))",
            "CREATE TABLE empty (pk text, rk bigint, PRIMARY KEY (pk, rk))",
            &format!("INSERT INTO tee VALUES {}", values.join(", ")),
        ],
    );
    assert!(ok, "{err}");
    let (_, err, ok) = run(tablegate().args(["split", "tee", "--ranges", "4", "--data", data]));
    assert!(!ok && err.contains("stop it first"), "{err}");
    assert!(s.terminate());
    let (out, err, ok) = run(tablegate().args(["split", "tee", "--ranges", "4", "--data", data]));
    assert!(ok, "{err}");
    assert!(
        out.contains("tee: 4 range partitions over 4 servers"),
        "{out}"
    );
    let (_, err, ok) = run(tablegate().args(["split", "nope", "--ranges", "4", "--data", data]));
    assert!(!ok && err.contains("table nope"), "{err}");
    let (_, err, ok) = run(tablegate().args(["split", "empty", "--ranges", "4", "--data", data]));
    assert!(!ok && err.contains("has no rows"), "{err}");
    let s = TestServer::serve_in(dir.path(), &["--throttle", "off"]);
    let (out, err, ok) = psql(
        &s,
        &[
            "SELECT lower_bound || ' ' || server FROM tablegate.range_partitions \
             WHERE table_name = 'tee' ORDER BY lower_bound",
            "SELECT count(*) FROM tee",
        ],
    );
    assert!(ok, "{err}");
    for want in ["  0\n", " k15 1\n", " k30 2\n", " k45 3\n", " 60\n"] {
        assert!(out.contains(want), "{want:?} in {out}");
    }
}

/// CREATE INDEX over a table with rows, throttled like any writer, says
/// how far it is: NOTICEs while it runs, and `tablegate.indexes` (from
/// another session) shows it building with its counts, then ready.
#[test]
fn create_index_reports_its_progress_while_it_builds() {
    let dir = tempfile::tempdir().unwrap();
    // One partition read and written at 300 entities/s: 900 rows take
    // about 3 s to load and 6 s to index.
    let s = TestServer::serve_in(dir.path(), &["--partition-target", "300"]);
    let (out, err, ok) = psql(
        &s,
        &[
            "CREATE TABLE big (pk text, rk int, name text, PRIMARY KEY (pk, rk))",
            "INSERT INTO big SELECT 'p', g, 'n' || (g % 50) FROM generate_series(1, 900) AS s(g)",
        ],
    );
    assert!(ok, "{out}{err}");
    let view = "SELECT state, build_rows_read, build_entries_written FROM tablegate.indexes WHERE index_name = 'big_name'";
    let (built, seen) = std::thread::scope(|scope| {
        let build = scope.spawn(|| psql(&s, &["CREATE INDEX big_name ON big (name)"]));
        let mut seen = Vec::new();
        while !build.is_finished() {
            let (out, err, ok) = psql(&s, &["\\pset tuples_only on", view]);
            assert!(ok, "{err}");
            if let Some(line) = out.lines().find(|l| l.contains("building")) {
                seen.push(line.to_owned());
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        (build.join().unwrap(), seen)
    });
    let (out, err, ok) = built;
    assert!(ok, "{out}{err}");
    assert!(
        err.contains("NOTICE:  building index \"big_name\": ")
            && err.contains(" rows of \"big\" read, "),
        "{err}"
    );
    assert!(
        err.contains("index \"big_name\" built: 900 entries"),
        "{err}"
    );
    // Counts that grew while it ran.
    let counts: Vec<u64> = seen
        .iter()
        .filter_map(|l| l.split('|').nth(1)?.trim().parse().ok())
        .collect();
    assert!(
        counts.iter().any(|&n| n > 0) && counts.windows(2).all(|w| w[0] <= w[1]),
        "{seen:?}"
    );
    let (out, err, ok) = psql(&s, &["\\pset tuples_only on", view]);
    assert!(ok, "{err}");
    assert!(out.contains("ready") && !out.contains("building"), "{out}");

    // A client killed mid-build does not leave half an index: the build
    // runs to its end and the index is used.
    let mut child = psql_command(&s)
        .args(["-c", "CREATE INDEX big_name2 ON big (name)"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("building index \"big_name2\""))),
        "no progress NOTICE before the end"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let ready = "SELECT state FROM tablegate.indexes WHERE index_name = 'big_name2'";
    let mut state = String::new();
    for _ in 0..300 {
        let (out, err, ok) = psql(&s, &["\\pset tuples_only on", ready]);
        assert!(ok, "{err}");
        state = out.trim().to_owned();
        if state == "ready" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(state, "ready");
    let (out, err, ok) = psql(
        &s,
        &[
            "DROP INDEX big_name",
            "EXPLAIN ANALYZE SELECT rk FROM big WHERE pk = 'p' AND name = 'n7'",
            "SELECT count(*) FROM big WHERE pk = 'p' AND name = 'n7'",
        ],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("rows found through index big_name2") && out.contains(" 18\n"),
        "{out}"
    );
}
