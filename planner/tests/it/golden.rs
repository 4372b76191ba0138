//! Golden files: EXPLAIN output for every query of each theme file in
//! `tests/golden/*.sql`, compared with `tests/golden/*.out`.
//!
//! Regenerate with `UPDATE_GOLDENFILES=1 cargo test -p tablegate-planner`
//! and read the diff before committing it.

use std::path::PathBuf;
use std::sync::Arc;

use sqlparser::ast::Statement;
use tablegate_planner::{Plan, PlanError, Planner, plan};

use super::fixture;

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Splits a theme file into statements: separated by `;` at the end of a
/// line; lines starting with `--` are comments.
fn statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("--") || line.trim().is_empty() {
            continue;
        }
        cur.push_str(line);
        cur.push('\n');
        if line.trim_end().ends_with(';') {
            out.push(cur.trim().trim_end_matches(';').to_owned());
            cur.clear();
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_owned());
    }
    out
}

async fn explain(p: &Planner, sql: &str) -> String {
    let result = async {
        let stmts = Planner::parse(sql)?;
        let stmt = stmts.first().ok_or_else(|| PlanError::Syntax {
            message: "empty".into(),
            position: None,
        })?;
        let select = match p.plan(stmt, sql)? {
            Plan::Select(s) => s,
            Plan::Explain(e) => e.select.clone(),
            // The engine runs it; what the planner shows is its access to
            // the one table it reads, when it binds one.
            Plan::Analytics { reason, .. } => {
                let query = match stmt {
                    Statement::Explain { statement, .. } => statement,
                    other => other,
                };
                let bound = match query {
                    Statement::Query(q) => plan::plan_query(p.catalog(), q, sql)?,
                    _ => plan::Routed::Engine(reason.clone()),
                };
                match bound {
                    plan::Routed::Bound(s) => Arc::new(s),
                    plan::Routed::Engine(_) => {
                        return Ok(vec![format!("Route: analytics engine, for {reason}")]);
                    }
                }
            }
            other => return Ok(vec![format!("(not a query: {other:?})")]),
        };
        // Parameters in golden queries are bound to fixed sample values.
        let params: Vec<_> = select
            .param_types
            .iter()
            .enumerate()
            .map(|(i, t)| Some(sample_param(i, *t)))
            .collect();
        p.explain(&select, &params, false, false, None, &fixture::opts())
            .await
    }
    .await;
    match result {
        Ok(lines) => lines.join("\n"),
        Err(e) => error_text(&e),
    }
}

/// An error as a client would see it: message, then the position (1-based
/// character) and hint the gateway sends along, when there are any.
fn error_text(e: &PlanError) -> String {
    let mut out = format!("ERROR: {e}");
    let position = match e {
        PlanError::Syntax { position, .. }
        | PlanError::UnknownTable { position, .. }
        | PlanError::UnknownColumn { position, .. } => *position,
        _ => None,
    };
    if let Some(p) = position {
        out.push_str(&format!("\n  Position: {p}"));
    }
    let hint = match e {
        PlanError::UnknownColumn { hint, .. } => hint.clone(),
        PlanError::TypeMismatch { hint, .. }
        | PlanError::Unsupported { hint, .. }
        | PlanError::FullScanRefused { hint, .. } => Some(hint.clone()),
        _ => None,
    };
    if let Some(h) = hint.filter(|h| !h.is_empty()) {
        out.push_str(&format!("\n  Hint: {h}"));
    }
    out
}

/// The value bound to `$n` in golden queries.
fn sample_param(i: usize, t: tablegate_catalog::SqlType) -> tablegate_store::Value {
    use tablegate_catalog::SqlType;
    use tablegate_store::Value;
    match t {
        SqlType::Text => Value::String(["2026 NYC__Full", "AGE:030", "AGE:040"][i % 3].to_owned()),
        SqlType::Int4 => Value::Int32(40),
        SqlType::Int8 => Value::Int64(5),
        SqlType::Float8 => Value::Double(1.5),
        SqlType::Bool => Value::Boolean(true),
        SqlType::Timestamptz | SqlType::Timestamp => {
            Value::DateTime(tablegate_store::DateTime(1_767_243_600_000_000))
        }
        other => panic!("no sample for {other:?}"),
    }
}

#[tokio::test]
async fn explain_golden_files() {
    let p = fixture::planner().await;
    let update = std::env::var_os("UPDATE_GOLDENFILES").is_some();
    let mut themes: Vec<_> = std::fs::read_dir(golden_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    themes.sort();
    assert!(!themes.is_empty());
    let mut failures = Vec::new();
    let mut total = 0;
    for theme in themes {
        let text = std::fs::read_to_string(&theme).unwrap();
        let mut out = String::new();
        for sql in statements(&text) {
            total += 1;
            out.push_str(&format!(
                "-- {}\n{}\n\n",
                sql.replace('\n', "\n-- "),
                explain(&p, &sql).await
            ));
        }
        let golden = theme.with_extension("out");
        if update {
            std::fs::write(&golden, &out).unwrap();
        } else {
            let expected = std::fs::read_to_string(&golden).unwrap_or_default();
            if expected != out {
                let actual = theme.with_extension("actual");
                std::fs::write(&actual, &out).unwrap();
                failures.push(format!(
                    "{} differs (see {})",
                    golden.display(),
                    actual.display()
                ));
            }
        }
    }
    assert!(total >= 60, "only {total} golden queries");
    assert!(
        failures.is_empty(),
        "{}\nrun with UPDATE_GOLDENFILES=1 to accept, then read the diff",
        failures.join("\n")
    );
}
