//! The console's pages: one HTML page, its script and its stylesheet,
//! compiled into the binary (no CDN, no build step, nothing fetched at run
//! time). The script routes between the key visualizer, partitions and
//! EXPLAIN by the URL's fragment and reads only the JSON API.

use axum::http::header;
use axum::response::IntoResponse;

const INDEX: &str = include_str!("assets/index.html");
const SCRIPT: &str = include_str!("assets/console.js");
const STYLE: &str = include_str!("assets/console.css");

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // Always the running server's own copy.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

/// `GET /`.
pub async fn index() -> impl IntoResponse {
    asset("text/html; charset=utf-8", INDEX)
}

/// `GET /console.js`.
pub async fn script() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /console.css`.
pub async fn style() -> impl IntoResponse {
    asset("text/css; charset=utf-8", STYLE)
}
