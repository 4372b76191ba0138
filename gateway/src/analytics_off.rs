//! The gateway built without its `analytics` feature: the analytics
//! engine's API with no DataFusion behind it. Every statement the planner
//! routes to the engine answers 0A000 with the planner's reason; native
//! statements, the protocol, COPY, cursors and transactions are unchanged.
//!
//! It exists for the fuzz targets (`fuzz/`), whose sanitizer-coverage
//! build cannot afford DataFusion on CI's two cores. The product is always
//! built with the feature (it is a default one).

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use futures::stream::BoxStream;
use tablegate_catalog::SqlType;
use tablegate_planner::{ExecOptions, Planner};
use tablegate_store::Value;

use crate::sqlstate::PgError;

/// The catalog (database) name the engine would report.
pub const DATABASE: &str = "tablegate";

/// The server-wide engine memory a pool would hold by default.
pub const MEMORY_LIMIT: usize = 1 << 30;

/// What the engine's calls fail with.
#[derive(Debug, Clone)]
pub struct EngineError(PgError);

impl From<&EngineError> for PgError {
    fn from(e: &EngineError) -> Self {
        e.0.clone()
    }
}

fn not_built(reason: &str) -> EngineError {
    EngineError(
        PgError::feature_not_supported(format!(
            "not supported in this build: {reason} (it needs the analytics engine)"
        ))
        .hint("build the gateway with its default `analytics` feature"),
    )
}

/// No runtime and no memory pool: nothing runs here.
#[derive(Debug, Clone)]
pub struct Pool;

impl Pool {
    /// A pool (nothing to start).
    pub fn new(
        _memory: usize,
        _running: usize,
        _queue_wait: std::time::Duration,
    ) -> std::io::Result<Pool> {
        Ok(Pool)
    }

    /// A pool on the caller's runtime (nothing to start).
    pub fn current(_memory: usize) -> Pool {
        Pool
    }

    /// Nothing to stop.
    pub fn shutdown(&self) {}
}

/// A statement the engine planned: never made in this build.
#[derive(Debug, Clone)]
pub struct EnginePlan {
    /// Result schema.
    pub schema: SchemaRef,
    /// Parameter types, `$1` first.
    pub param_types: Vec<SqlType>,
    /// True for each parameter the plan gives no type.
    pub open_params: Vec<bool>,
    /// Why the planner sent it here.
    pub reason: String,
}

/// One connection's engine: refuses every statement.
#[derive(Debug)]
pub struct Engine;

impl Engine {
    /// A session (nothing to set up).
    pub fn new(_planner: Planner, _pool: Pool, _user: &str) -> Result<Engine, EngineError> {
        Ok(Engine)
    }

    /// Nothing reads the settings.
    pub fn set_session(&self, _session: &crate::settings::Settings) {}

    /// Refuses the statement with the planner's reason.
    pub async fn plan(&self, _sql: &str, reason: &str) -> Result<EnginePlan, EngineError> {
        Err(not_built(reason))
    }

    /// Refuses (no plan can reach it).
    pub async fn execute(
        &self,
        p: &EnginePlan,
        _params: &[Option<Value>],
        _opts: ExecOptions,
    ) -> Result<BoxStream<'static, Result<RecordBatch, EngineError>>, EngineError> {
        Err(not_built(&p.reason))
    }

    /// Refuses (no plan can reach it).
    pub async fn execute_counted(
        &self,
        p: &EnginePlan,
        _params: &[Option<Value>],
        _opts: ExecOptions,
        _scans: std::sync::Arc<parking_lot::Mutex<tablegate_planner::Actuals>>,
    ) -> Result<BoxStream<'static, Result<RecordBatch, EngineError>>, EngineError> {
        Err(not_built(&p.reason))
    }

    /// Refuses (no plan can reach it).
    pub async fn explain(
        &self,
        p: &EnginePlan,
        _params: &[Option<Value>],
        _analyze: bool,
        _opts: ExecOptions,
    ) -> Result<Vec<String>, EngineError> {
        Err(not_built(&p.reason))
    }
}
