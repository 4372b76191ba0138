//! The console's JSON API, under `/api` (`GET /api` lists it):
//!
//! - `GET /api/keyviz?table=T[&buckets=N][&window=SECONDS]` — the key
//!   visualizer's history of table T over the last `window` seconds
//!   (default what the finest slots keep, an hour at 10 s; longer windows
//!   come in coarser slots): key buckets
//!   in key order × time slots, entities read, written and throttled per
//!   second in each cell, the busiest single PartitionKey's rate per cell
//!   (what the 2,000/s target applies to), the range partitions with
//!   their servers, and the balancer's events;
//! - `GET /api/keyviz/statements?table=T&first=K&last=K&from=MICROS[&window=SECONDS]`
//!   — the statements that asked most of keys `first..=last` in the
//!   column starting at `from` (a cell of the map);
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
use axum::extract::rejection::QueryRejection;
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
            {"method": "GET", "path": "/api/keyviz?table=T&buckets=N&window=SECONDS",
             "returns": "the key visualizer's history of table T"},
            {"method": "GET", "path": "/api/keyviz/statements?table=T&first=K&last=K&from=MICROS&window=SECONDS",
             "returns": "the statements that asked most of a cell of the map"},
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
            let key_space = tokio::task::spawn_blocking(move || {
                let space = key_space(&console, &plan);
                (plan, space)
            })
            .await;
            let (plan, space) = match key_space {
                Ok(x) => x,
                Err(e) => return error_response(&PgError::internal(e)),
            };
            Json(json!({ "sql": sql, "analyze": req.analyze, "plan": plan, "key_space": space }))
                .into_response()
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

/// The plan's table's range partitions, each marked where the plan's
/// PartitionKey spans touch it (null without the partition layer, or for
/// a plan without a store scan).
fn key_space(console: &Console, plan: &Json_) -> Json_ {
    let node = &plan[0]["Plan"];
    let (Some(table), Some(spans)) = (
        node["Relation Name"].as_str(),
        node["Stored PartitionKey Spans"].as_array(),
    ) else {
        return Json_::Null;
    };
    let (Ok(def), Ok(store)) = (console.planner.catalog().table(table), partitioned(console))
    else {
        return Json_::Null;
    };
    let Ok(ranges) = store.ranges(&def.name) else {
        return Json_::Null;
    };
    // A span [from, to] (bounds as stored, null = open) against a range
    // [lo, hi).
    let touches = |lo: &str, hi: Option<&str>| {
        spans.iter().any(|s| {
            let below_hi = match (s["From"].as_str(), hi) {
                (Some(f), Some(h)) => f < h,
                _ => true,
            };
            let above_lo = match s["To"].as_str() {
                Some(t) => t > lo || (t == lo && s["To Inclusive"].as_bool() == Some(true)),
                None => true,
            };
            below_hi && above_lo
        })
    };
    let mut servers = std::collections::BTreeSet::new();
    let ranges: Vec<Json_> = ranges
        .iter()
        .map(|r| {
            let touched = touches(&r.lo, r.hi.as_deref());
            if touched {
                servers.insert(r.server);
            }
            json!({
                "lo": r.lo, "hi": r.hi, "lo_label": key_label(&def, &r.lo),
                "server": r.server, "entities": r.entities, "touched": touched,
            })
        })
        .collect();
    json!({
        "table": def.name,
        "ranges": ranges,
        "servers_touched": servers,
        "spans": node["Key Spans"],
    })
}

/// A stored PartitionKey as its column's value (typed keys decoded).
fn key_label(def: &tablegate_planner::catalog::TableDef, key: &str) -> String {
    if key.is_empty() {
        return "(start of table)".to_owned();
    }
    let ty = def.partition_key_column().ty;
    ty.decode_key(key)
        .map_or_else(|| key.to_owned(), |v| ty.pg_text(&v))
}

/// `GET /api/keyviz`'s query.
#[derive(Debug, Deserialize)]
pub struct KeyVizRequest {
    table: String,
    buckets: Option<usize>,
    /// Seconds of history (default an hour).
    window: Option<u64>,
}

/// The longest window asked of the key visualizer: what its coarsest
/// tier keeps, at most.
const MAX_WINDOW: u64 = 366 * 24 * 3600;

/// The window asked, or by default what the finest tier keeps (an hour
/// at the default slot width).
fn window(store: &tablegate_store::PartitionedStore, seconds: Option<u64>) -> std::time::Duration {
    let c = store.config();
    let finest = c.keyviz_slot.as_secs().max(1) * c.keyviz_slots as u64;
    std::time::Duration::from_secs(seconds.unwrap_or(finest).clamp(1, MAX_WINDOW))
}

/// The partition layer of the console's store, or the error that says
/// there is none.
fn partitioned(console: &Console) -> Result<&tablegate_store::PartitionedStore, Box<Response>> {
    console.planner.store().partitioned().ok_or_else(|| {
        Box::new(error_response(
            &PgError::feature_not_supported(
                "the key visualizer needs the embedded store's partition layer",
            )
            .hint(
                "a remote service (Azure Table Storage, Cosmos DB) keeps its partitions to itself",
            ),
        ))
    })
}

/// `GET /api/keyviz`.
pub async fn keyviz(
    State(console): State<Arc<Console>>,
    req: Result<Query<KeyVizRequest>, QueryRejection>,
) -> Response {
    let Query(req) = match req {
        Ok(q) => q,
        Err(e) => return bad_query(e),
    };
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
    let store = match partitioned(console) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let buckets = req
        .buckets
        .unwrap_or(console.config.keyviz_buckets)
        .clamp(1, 10_000);
    let window = window(store, req.window);
    let view = match store.key_visualizer(&def.name, buckets, window) {
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
    // as stored. An empty key is a scan page that returned nothing,
    // counted where it began.
    let label = |key: &str| key_label(&def, key);
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
    // `peak` counts one key's busiest base slot: a rate over that slot
    // (the filling one's elapsed part, in the base tier's last column).
    let base = view.base_seconds as f64;
    let peak_seconds: Vec<f64> = seconds.iter().map(|s| s.min(base)).collect();
    let peak: Vec<Vec<f64>> = view
        .peak
        .iter()
        .map(|row| {
            row.iter()
                .zip(&peak_seconds)
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
    // The windows each tier covers whole, for the page's choice.
    let tiers = tablegate_store::partition::keyviz::TIER_FACTORS;
    let tier_slots: Vec<u64> = tiers
        .iter()
        .map(|f| view.base_seconds * *f as u64)
        .collect();
    let windows: Vec<u64> = tier_slots
        .iter()
        .map(|s| s * config.keyviz_slots as u64)
        .collect();
    Json(json!({
        "table": def.name,
        "now": time(now),
        "window_seconds": window.as_secs(),
        "windows": windows,
        "window_slot_seconds": tier_slots,
        "slot_seconds": view.slot_seconds,
        "base_seconds": view.base_seconds,
        "slots": view.slot_starts.iter().map(|&s| time(s)).collect::<Vec<_>>(),
        "slot_micros": view.slot_starts,
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

/// `GET /api/keyviz/statements`'s query: one cell of the map.
#[derive(Debug, Deserialize)]
pub struct CellRequest {
    table: String,
    first: String,
    last: String,
    /// The column's start, clock microseconds (`slot_micros`).
    from: i64,
    window: Option<u64>,
}

/// `GET /api/keyviz/statements`.
pub async fn keyviz_statements(
    State(console): State<Arc<Console>>,
    req: Result<Query<CellRequest>, QueryRejection>,
) -> Response {
    let Query(req) = match req {
        Ok(q) => q,
        Err(e) => return bad_query(e),
    };
    tokio::task::spawn_blocking(move || keyviz_statements_blocking(&console, req))
        .await
        .unwrap_or_else(|e| error_response(&PgError::internal(e)))
}

/// A query string the endpoint cannot read: 22023 with what it wants.
fn bad_query(e: QueryRejection) -> Response {
    error_response(
        &PgError::invalid_parameter_value(e.body_text())
            .hint("GET /api lists each endpoint's parameters"),
    )
}

fn keyviz_statements_blocking(console: &Console, req: CellRequest) -> Response {
    let def = match console.planner.catalog().table(&req.table) {
        Ok(d) => d,
        Err(e) => return error_response(&PgError::from(&e)),
    };
    let store = match partitioned(console) {
        Ok(s) => s,
        Err(r) => return *r,
    };
    let window = window(store, req.window);
    // The column's width is the view's over the same window.
    let width = store.key_visualizer_column(window).as_micros() as i64;
    let to = req.from.saturating_add(width);
    let (tags, total) = match store.key_visualizer_statements(
        &def.name,
        (&req.first, &req.last),
        (req.from, to),
        window,
    ) {
        Ok(x) => x,
        Err(e) => return error_response(&PgError::from(&e)),
    };
    // Tags back to the statement log's entries (a text may run under
    // several classes: its calls and time are summed).
    // tag → (text, classes, calls, total ms)
    type Known = (Arc<str>, Vec<&'static str>, u64, f64);
    let mut known: std::collections::HashMap<u64, Known> = Default::default();
    for e in crate::statements::statements().snapshot() {
        let tag = crate::statements::tag(&e.query);
        if !tags.iter().any(|(t, _)| *t == tag) {
            continue;
        }
        let k = known
            .entry(tag)
            .or_insert_with(|| (e.query.clone(), Vec::new(), 0, 0.0));
        k.1.push(e.class);
        k.2 += e.stats.calls;
        k.3 += e.stats.total.as_secs_f64() * 1e3;
    }
    let attributed: u64 = tags.iter().map(|(_, n)| n).sum();
    let statements: Vec<Json_> = tags
        .iter()
        .map(|(tag, n)| match known.get(tag) {
            Some((query, classes, calls, ms)) => json!({
                "query": query, "classes": classes, "entities": n,
                "calls": calls, "total_ms": round(*ms),
            }),
            None => json!({ "query": null, "tag": format!("{tag:016x}"), "entities": n }),
        })
        .collect();
    Json(json!({
        "table": def.name,
        "first": req.first,
        "last": req.last,
        "from": time(req.from),
        "to": time(to),
        "entities": total,
        "attributed": attributed.min(total),
        "statements": statements,
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
