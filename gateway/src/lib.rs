//! The PostgreSQL wire protocol in front of the planner.
//!
//! - [`server`] — the listener: a thread (with a single-threaded runtime)
//!   per connection (pgwire's message loop with a 64 KiB write buffer),
//!   graceful shutdown.
//! - [`admission`] — who gets a thread and a session slot: starting
//!   connections capped apart (the oldest evicted), slots counted after
//!   authentication (53300), reserved slots, message size limits.
//! - `conn_io` — a connection's transport: tokio's reactor through startup
//!   (and for TLS), blocking reads and writes on its thread after that.
//! - [`handler`] — a connection's handlers and its `Session`: statements
//!   prepared once (`handler/prepare.rs`), dispatched once to their family
//!   (one file each: queries, writes, transactions, settings, cursors,
//!   PREPARE, COPY), the simple and extended protocols, parameters.
//! - [`settings`] — SET / SHOW settings, and the version tablegate answers
//!   as.
//! - [`cancel`] — cancel requests routed to the running statement (57014),
//!   and the `Stop` a running statement waits on.
//! - [`auth`] — SCRAM-SHA-256 against stored verifiers, or trust (loopback
//!   only).
//! - [`tls`] — TLS from certificate and key files; when configured it is
//!   required (no plaintext fallback).
//! - [`analytics`] — DataFusion for what the native path does not run,
//!   `pg_catalog`, `information_schema` and the `tablegate` system views
//!   (a default feature; built without it, engine routes answer 0A000).
//! - [`flight`] — Arrow Flight SQL beside pgwire (a default feature):
//!   the same sessions and statements, results as record batches.
//! - [`console`] — the web console and its JSON API (a default feature):
//!   the key visualizer, partitions and servers, EXPLAIN, drawn.
//! - [`telemetry`] — statement counters per query class, `tracing` spans,
//!   `metrics` for the Prometheus endpoint.
//! - [`encode`] — type mapping, value encoding, Arrow record batches to
//!   DataRows (text and binary), result streams.
//! - [`sqlstate`] — **the one place where errors become SQLSTATEs**.
//! - [`unix`] — the Unix-domain socket `DIR/.s.PGSQL.PORT`, relayed to the
//!   TCP listener.

pub mod admission;
#[cfg(feature = "analytics")]
pub mod analytics;
#[cfg(not(feature = "analytics"))]
#[path = "analytics_off.rs"]
pub mod analytics;
pub mod auth;
pub mod cancel;
mod conn_io;
#[cfg(feature = "console")]
pub mod console;
pub mod encode;
#[cfg(feature = "flight")]
pub mod flight;
pub mod handler;
pub mod server;
pub mod settings;
pub mod sqlstate;
pub mod statements;
pub mod telemetry;
pub mod tls;
#[cfg(unix)]
pub mod unix;

pub use auth::{AuthMode, UserStore};
pub use server::{Server, ServerConfig};
pub use sqlstate::PgError;
