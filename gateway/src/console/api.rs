//! The console's JSON API, under `/api` (`GET /api` lists it):
//!
//! - `GET /api/keyviz?table=T[&buckets=N]` — the key visualizer's history
//!   of table T: key buckets in key order × time slots, entities read,
//!   written and throttled per second in each cell, the busiest single
//!   PartitionKey's rate per cell (what the 2,000/s target applies to),
//!   the range partitions with their servers, and the balancer's events;
//! - `GET /api/views/NAME` — a system view (`tablegate.NAME`) as an array
//!   of objects;
//! - `POST /api/explain` with `{"sql": "...", "analyze": false}` — the
//!   statement's `EXPLAIN (FORMAT JSON)`.
//!
//! Errors are `{"error", "sqlstate", "detail", "hint"}` with an HTTP
//! status by SQLSTATE class.

use std::sync::Arc;

use arrow_array::{Array, RecordBatch, StringArray};
use axum::Json;
use axum::extract::{Extension, Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value as Json_, json};
use tablegate_store::partition::BalanceAction;

use super::{Console, User, error_response};
use crate::analytics::system::VIEWS;
use crate::handler::Outcome;
use crate::sqlstate::PgError;

/// `GET /api`: what the API offers.
pub async fn index() -> Json<Json_> {
    Json(json!({
        "endpoints": [
            {"method": "GET", "path": "/api/keyviz?table=T&buckets=N",
             "returns": "the key visualizer's history of table T"},
            {"method": "GET", "path": "/api/views/NAME",
             "returns": "system view tablegate.NAME as an array of objects", "views": VIEWS},
            {"method": "POST", "path": "/api/explain", "body": {"sql": "SELECT ...", "analyze": false},
             "returns": "EXPLAIN (FORMAT JSON) of the statement; ANALYZE runs it"},
        ]
    }))
}

/// 404 with a JSON body.
pub fn not_found(message: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({ "error": message, "sqlstate": "42704" })),
    )
        .into_response()
}

/// Runs one statement in a fresh session and collects its rows.
async fn rows(console: &Console, user: &str, sql: &str) -> Result<Vec<RecordBatch>, PgError> {
    let session = console.session(user);
    let p = session.prepare(sql).await?;
    match session.run(&p, &[], sql).await? {
        Outcome::Rows { mut batches, .. } => {
            let mut out = Vec::new();
            while let Some(b) = batches.next().await {
                out.push(b?);
            }
            Ok(out)
        }
        Outcome::Done { .. } => Ok(Vec::new()),
    }
}

/// `GET /api/views/NAME`.
pub async fn view(
    State(console): State<Arc<Console>>,
    Extension(User(user)): Extension<User>,
    Path(name): Path<String>,
) -> Response {
    if !VIEWS.contains(&name.as_str()) {
        return not_found(&format!(
            "no system view \"{name}\"; the views are {}",
            VIEWS.join(", ")
        ));
    }
    let sql = format!("SELECT * FROM tablegate.{name}");
    match rows(&console, &user, &sql).await {
        Ok(batches) => match batches_json(&batches) {
            Ok(v) => Json(v).into_response(),
            Err(e) => error_response(&PgError::internal(e)),
        },
        Err(e) => error_response(&e),
    }
}

/// Record batches as a JSON array of objects.
fn batches_json(batches: &[RecordBatch]) -> Result<Json_, String> {
    let mut w = arrow_json::ArrayWriter::new(Vec::new());
    let refs: Vec<&RecordBatch> = batches.iter().collect();
    w.write_batches(&refs).map_err(|e| e.to_string())?;
    w.finish().map_err(|e| e.to_string())?;
    let bytes = w.into_inner();
    if bytes.is_empty() {
        return Ok(json!([]));
    }
    serde_json::from_slice(&bytes).map_err(|e| e.to_string())
}

/// `POST /api/explain`'s body.
#[derive(Debug, Deserialize)]
pub struct ExplainRequest {
    sql: String,
    #[serde(default)]
    analyze: bool,
}

/// `POST /api/explain`.
pub async fn explain(
    State(console): State<Arc<Console>>,
    Extension(User(user)): Extension<User>,
    Json(req): Json<ExplainRequest>,
) -> Response {
    let sql = req.sql.trim().trim_end_matches(';');
    let options = if req.analyze {
        "FORMAT JSON, ANALYZE"
    } else {
        "FORMAT JSON"
    };
    let statement = format!("EXPLAIN ({options}) {sql}");
    let batches = match rows(&console, &user, &statement).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    let mut text = String::new();
    for b in &batches {
        if let Some(col) = b
            .columns()
            .first()
            .and_then(|c| c.as_any().downcast_ref::<StringArray>())
        {
            for i in 0..col.len() {
                if col.is_valid(i) {
                    text.push_str(col.value(i));
                    text.push('\n');
                }
            }
        }
    }
    match serde_json::from_str::<Json_>(&text) {
        Ok(plan) => {
            Json(json!({ "sql": sql, "analyze": req.analyze, "plan": plan })).into_response()
        }
        // A statement whose EXPLAIN has no JSON form (the engine's plans
        // answer text): the lines themselves.
        Err(_) => Json(json!({
            "sql": sql,
            "analyze": req.analyze,
            "text": text.lines().collect::<Vec<_>>(),
        }))
        .into_response(),
    }
}

/// `GET /api/keyviz`'s query.
#[derive(Debug, Deserialize)]
pub struct KeyVizRequest {
    table: String,
    buckets: Option<usize>,
}

/// `GET /api/keyviz`.
pub async fn keyviz(
    State(console): State<Arc<Console>>,
    Query(req): Query<KeyVizRequest>,
) -> Response {
    // Range statistics are read from the store with blocking calls.
    tokio::task::spawn_blocking(move || keyviz_blocking(&console, req))
        .await
        .unwrap_or_else(|e| error_response(&PgError::internal(e)))
}

fn keyviz_blocking(console: &Console, req: KeyVizRequest) -> Response {
    let planner = &console.planner;
    let def = match planner.catalog().table(&req.table) {
        Ok(d) => d,
        Err(e) => return error_response(&PgError::from(&e)),
    };
    let Some(store) = planner.store().partitioned() else {
        return error_response(
            &PgError::feature_not_supported(
                "the key visualizer needs the embedded store's partition layer",
            )
            .hint(
                "a remote service (Azure Table Storage, Cosmos DB) keeps its partitions to itself",
            ),
        );
    };
    let buckets = req
        .buckets
        .unwrap_or(console.config.keyviz_buckets)
        .clamp(1, 10_000);
    let view = match store.key_visualizer(&def.name, buckets) {
        Ok(v) => v,
        Err(e) => return error_response(&PgError::from(&e)),
    };
    let ranges = store.ranges(&def.name).unwrap_or_default();
    let now = store.now_micros();
    let slot = view.slot_seconds as f64;
    // The current slot is still filling: rates over its elapsed part.
    let seconds: Vec<f64> = view
        .slot_starts
        .iter()
        .map(|&s| {
            let elapsed = (now - s) as f64 / 1e6;
            if elapsed < slot {
                elapsed.max(1.0)
            } else {
                slot
            }
        })
        .collect();
    let rate = |f: &dyn Fn(&tablegate_store::partition::keyviz::Counts) -> u64| -> Vec<Vec<f64>> {
        view.cells
            .iter()
            .map(|row| {
                row.iter()
                    .zip(&seconds)
                    .map(|(c, s)| round(f(c) as f64 / s))
                    .collect()
            })
            .collect()
    };
    // Typed keys are shown as their values; a prefix (a coarse bucket)
    // as stored.
    let pk_type = def.partition_key_column().ty;
    let label = |key: &str| -> String {
        if key.is_empty() {
            // A scan page that returned nothing, counted where it began.
            return "(start of table)".to_owned();
        }
        pk_type
            .decode_key(key)
            .map_or_else(|| key.to_owned(), |v| pk_type.pg_text(&v))
    };
    let buckets_json: Vec<Json_> = view
        .buckets
        .iter()
        .zip(&view.peak_key)
        .map(|(b, peak)| {
            json!({
                "first": b.first,
                "last": b.last,
                "first_label": label(&b.first),
                "last_label": label(&b.last),
                "keys": b.keys,
                "peak_key": label(peak),
                "server": store.server_of(&def.name, &b.first),
            })
        })
        .collect();
    let peak: Vec<Vec<f64>> = view
        .peak
        .iter()
        .map(|row| {
            row.iter()
                .zip(&seconds)
                .map(|(&n, s)| round(n as f64 / s))
                .collect()
        })
        .collect();
    let events: Vec<Json_> = store
        .balance_events()
        .into_iter()
        .filter(|e| e.table.eq_ignore_ascii_case(&def.name))
        .map(|e| match e.action {
            BalanceAction::Split { at } => {
                json!({"at": time(e.at_micros), "kind": "split", "key": at})
            }
            BalanceAction::Move { lo, from, to } => {
                json!({"at": time(e.at_micros), "kind": "move", "key": lo, "from": from, "to": to})
            }
        })
        .collect();
    let config = store.config();
    Json(json!({
        "table": def.name,
        "now": time(now),
        "slot_seconds": view.slot_seconds,
        "slots": view.slot_starts.iter().map(|&s| time(s)).collect::<Vec<_>>(),
        "coarse": view.coarse,
        "partition_target": config.targets.as_ref().map(|t| t.per_partition),
        "warm_share": config.warm_share,
        "hot_share": config.hot_share,
        "buckets": buckets_json,
        "read": rate(&|c| c.read + c.scanned),
        "written": rate(&|c| c.written),
        "throttled": rate(&|c| c.throttled),
        "peak": peak,
        "ranges": ranges.iter().map(|r| json!({
            "lo": r.lo, "hi": r.hi, "server": r.server, "entities": r.entities,
            "load_per_sec": round(r.load_per_sec),
        })).collect::<Vec<_>>(),
        "events": events,
    }))
    .into_response()
}

fn round(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// Clock microseconds as RFC 3339.
fn time(micros: i64) -> String {
    tablegate_store::DateTime(micros).to_string()
}
