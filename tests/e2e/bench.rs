//! `bench/run.py`, the side-by-side benchmark against PostgreSQL 15, on a
//! tiny data set: it starts both servers, runs every workload and writes
//! its Markdown report and SVG chart. No speed is asserted, only that the
//! script works and reports a positive number for every workload.

use std::path::Path;
use std::process::Command;

/// The numeric cells of the report's table rows, by workload letter.
fn rows_by_workload(md: &str) -> Vec<(String, Vec<f64>)> {
    md.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line
                .trim()
                .strip_prefix('|')?
                .strip_suffix('|')?
                .split('|')
                .map(str::trim)
                .collect();
            let id = *cells.first()?;
            if !["a", "b", "c", "d", "e"].contains(&id) {
                return None;
            }
            let numbers = cells[1..]
                .iter()
                .filter_map(|c| c.replace(',', "").parse::<f64>().ok())
                .collect();
            Some((id.to_owned(), numbers))
        })
        .collect()
}

/// The names of the files in `dir`, sorted.
fn file_names(dir: &Path) -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    files
}

/// Runs `bench/<script>` with the test's tablegate binary and `args`;
/// returns its standard output, after checking that it succeeded.
fn run_script(script: &str, args: &[&str]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("bench")
        .join(script);
    let run = Command::new("python3")
        .arg(&path)
        .args(["--tablegate", env!("CARGO_BIN_EXE_tablegate")])
        .args(args)
        .output()
        .expect("python3 is installed");
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "bench/{script} failed ({}):\n{stdout}\n{stderr}",
        run.status
    );
    stdout
}

#[test]
fn bench_script_runs_every_workload_and_writes_report_and_chart() {
    let out = tempfile::tempdir().unwrap();
    let args = [
        "--partitions",
        "4",
        "--rows",
        "50",
        "--duration",
        "1",
        "--runs",
        "1",
        "--rounds",
        "2",
        "--clients",
        "1,2",
        "--group-clients",
        "2",
        "--warmup",
        "0",
        "--out",
        out.path().to_str().expect("a UTF-8 temporary path"),
    ];
    run_script("run.py", &args);

    let files = file_names(out.path());
    assert_eq!(files.len(), 2, "{files:?}");
    let md_name = files.iter().find(|f| f.ends_with(".md")).expect("a .md");
    let stem = md_name.strip_suffix(".md").unwrap();
    assert!(files.contains(&format!("{stem}.svg")), "{files:?}");
    // <date>-<short commit>
    assert!(stem.len() > 11 && stem.as_bytes()[4] == b'-', "{stem}");

    let md = std::fs::read_to_string(out.path().join(md_name)).unwrap();
    let rows = rows_by_workload(&md);
    // a: point lookups, 2 modes x 2 client counts; b: row range; c: scan
    // against parallel and serial PostgreSQL and DataFusion over Parquet
    // (.ci/run installs it); d: three write shapes; e: memory, disk and
    // load time.
    for (id, want) in [("a", 4), ("b", 1), ("c", 3), ("d", 3), ("e", 4)] {
        let of_id: Vec<&Vec<f64>> = rows.iter().filter(|r| r.0 == id).map(|r| &r.1).collect();
        assert!(of_id.len() >= want, "workload {id}: {of_id:?}\n{md}");
        for numbers in of_id {
            assert!(
                !numbers.is_empty() && numbers.iter().all(|v| *v > 0.0),
                "workload {id}: {numbers:?}\n{md}"
            );
        }
    }
    for needle in [
        "2 per server and workload",
        "tps (median)",
        "rows/s (median)",
        "| machine |",
        "| commit |",
        "profile **debug**",
        "4 partitions",
        "vs DataFusion over Parquet",
    ] {
        assert!(md.contains(needle), "{needle}:\n{md}");
    }

    let svg = std::fs::read_to_string(out.path().join(format!("{stem}.svg"))).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the chart is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    // The background and one bar per ratio row (a to d).
    let rects = doc.descendants().filter(|n| n.has_tag_name("rect")).count();
    assert_eq!(rects, 1 + 4 + 1 + 3 + 3, "{svg}");
}

/// `bench/cpu.py`, the per-transaction CPU comparison, on a tiny data set:
/// one line per run and server, every number positive.
#[test]
fn cpu_script_reports_each_servers_cost_per_transaction() {
    let args = [
        "--workload",
        "range",
        "--partitions",
        "3",
        "--rows",
        "120",
        "--duration",
        "1",
        "--pairs",
        "1",
        "--clients",
        "2",
    ];
    let stdout = run_script("cpu.py", &args);
    for server in ["PostgreSQL", "tablegate"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(server))
            .unwrap_or_else(|| panic!("no line for {server}:\n{stdout}"));
        let numbers: Vec<f64> = line
            .split_whitespace()
            .skip(1)
            .filter_map(|c| c.trim_end_matches('%').replace(',', "").parse().ok())
            .collect();
        // tps, rows/s, server µs, its kernel share (whole clock ticks: may
        // be zero in a short run), pgbench µs, context switches,
        // rescheduling interrupts (may be zero), TCP segments, busy %.
        assert_eq!(numbers.len(), 9, "{line}");
        for (i, v) in numbers.iter().enumerate() {
            assert!(*v > 0.0 || i == 3 || i == 6, "{line}");
        }
        assert!(numbers[3] <= 100.0, "{line}");
    }
}

/// `bench/flight.py`, Arrow Flight SQL against pgwire, on a tiny table:
/// every path reads every row, and the report and chart are written.
#[test]
fn flight_bench_reads_every_row_through_every_path() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().to_str().expect("a UTF-8 temporary path");
    let stdout = run_script(
        "flight.py",
        &["--rows", "3000", "--runs", "1", "--out", dir],
    );
    assert!(stdout.contains("Flight SQL ÷ tablegate pgwire"), "{stdout}");
    let files = file_names(out.path());
    assert_eq!(files.len(), 2, "{files:?}");
    let md = std::fs::read_to_string(out.path().join(&files[0])).unwrap();
    let rows: Vec<Vec<f64>> = md
        .lines()
        .filter(|l| l.contains("pgwire (psycopg") || l.contains("Arrow Flight SQL (ADBC)"))
        .filter(|l| l.starts_with('|'))
        .map(|l| {
            l.split('|')
                .skip(2)
                .filter_map(|c| c.trim().replace(',', "").parse::<f64>().ok())
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 3, "{md}");
    for r in &rows {
        // rows/s, seconds and both peaks are positive (to Arrow is 0 for Flight).
        assert!(
            r.len() >= 6 && r[0] > 0.0 && r[1] > 0.0 && r[4] > 0.0,
            "{r:?}\n{md}"
        );
    }
    let svg = std::fs::read_to_string(out.path().join(&files[1])).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("the chart is well-formed XML");
    let rects = doc.descendants().filter(|n| n.has_tag_name("rect")).count();
    assert_eq!(rects, 1 + 3, "{svg}");
}
