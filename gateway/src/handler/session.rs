//! One connection's state between statements: the [`Session`].
//!
//! Everything a statement can leave behind for the next one lives here,
//! behind one lock: settings (SET), the open transaction's staged writes,
//! SQL-level prepared statements (PREPARE), the budget of protocol-level
//! ones (pgwire keeps their plans in its portal store), and open cursors.
//! The lock is never held across an `.await`: a statement takes what it
//! needs (the transaction, a cursor's rows) and puts it back. Beside it,
//! the session's analytics engine (made on first use, most key-value
//! clients never need it) and a COPY FROM in progress, which waits on
//! network input and so has a lock of its own.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};
use tablegate_planner::{Planner, Transaction};

use super::copy::CopyIn;
use super::cursor::Cursor;
use super::prepare::Prepared;
use crate::analytics::Engine;
use crate::settings::Settings;
use crate::sqlstate::PgError;

/// Most prepared statements one session holds, SQL-level (PREPARE) and
/// protocol-level (named Parse) each: a prepared plan is several KiB, and
/// every session may hold this many (JDBC caches 256 by default, psycopg
/// 100).
pub const MAX_NAMED_STATEMENTS: usize = 1_000;
/// Most text of prepared statements one session holds, SQL-level and
/// protocol-level each (their plans take a few times more).
pub const MAX_PREPARED_BYTES: usize = 16 << 20;

/// Most open cursors one session holds.
pub const MAX_CURSORS: usize = 100;

/// A connection's session: its state, analytics engine and COPY.
#[derive(Debug, Default)]
pub struct Session {
    state: Mutex<State>,
    engine: EngineSlot,
    /// A `COPY ... FROM STDIN` in progress.
    pub(super) copy_in: tokio::sync::Mutex<Option<CopyIn>>,
}

/// What the session's lock guards.
#[derive(Debug, Default)]
pub(super) struct State {
    /// SET / SHOW.
    pub settings: Settings,
    /// The open `BEGIN` block's staged writes.
    pub txn: Option<Transaction>,
    /// The open transaction is READ ONLY.
    pub read_only: bool,
    /// Set by a ROLLBACK TO SAVEPOINT that succeeded: the transaction is
    /// no longer failed (pgwire's status would keep it failed).
    pub restored: bool,
    /// Open cursors, by name.
    pub cursors: HashMap<String, Cursor>,
    /// Statements of SQL-level PREPARE, by name.
    pub named: HashMap<String, Named>,
    /// Names and text lengths of the protocol-level prepared statements
    /// (counted against [`MAX_NAMED_STATEMENTS`] and
    /// [`MAX_PREPARED_BYTES`]).
    pub parsed: HashMap<String, usize>,
    /// Protocol-level statements planned again after DDL, by their text,
    /// with the catalog version (pgwire keeps the statement as parsed).
    pub replanned: HashMap<Arc<str>, (u64, Prepared)>,
}

/// The session's analytics engine, created on first use, and the pool it
/// runs on.
#[derive(Debug, Default)]
struct EngineSlot {
    engine: tokio::sync::OnceCell<Arc<Engine>>,
    pool: Mutex<Option<crate::analytics::Pool>>,
    /// The authenticated user (`current_user`), set at startup.
    user: Mutex<String>,
}

impl State {
    /// Whether the current transaction (or, outside a block, the next
    /// statement's) is READ ONLY.
    pub fn read_only_now(&self) -> bool {
        match self.txn {
            Some(_) => self.read_only,
            None => self.settings.default_read_only(),
        }
    }
}

impl Session {
    /// The session's state, locked (never across an `.await`).
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// Whether a `BEGIN` block is open (the session's own record, which
    /// has the last word over pgwire's derived status).
    pub(super) fn in_transaction(&self) -> bool {
        self.state.lock().txn.is_some()
    }

    /// Takes the ROLLBACK TO flag (see [`State::restored`]).
    pub(super) fn take_restored(&self) -> bool {
        std::mem::take(&mut self.state.lock().restored)
    }

    /// Where the analytics engine runs (the server's pool).
    pub(super) fn set_pool(&self, pool: crate::analytics::Pool) {
        *self.engine.pool.lock() = Some(pool);
    }

    /// The authenticated user, known at startup.
    pub(super) fn set_user(&self, user: &str) {
        user.clone_into(&mut self.engine.user.lock());
    }

    /// The session's analytics engine, made on first use.
    pub(super) async fn engine(&self, planner: &Planner) -> Result<Arc<Engine>, PgError> {
        let slot = &self.engine;
        slot.engine
            .get_or_try_init(|| async {
                let pool = slot.pool.lock().clone().unwrap_or_else(|| {
                    crate::analytics::Pool::current(crate::analytics::MEMORY_LIMIT)
                });
                let user = slot.user.lock().clone();
                Engine::new(planner.clone(), pool, &user)
                    .map(Arc::new)
                    .map_err(|e| PgError::from(&e))
            })
            .await
            .cloned()
    }

    /// The engine, reading the session's settings as they are now
    /// (`current_setting`).
    pub(super) async fn engine_for_run(&self, planner: &Planner) -> Result<Arc<Engine>, PgError> {
        let engine = self.engine(planner).await?;
        engine.set_session(&self.state.lock().settings);
        Ok(engine)
    }
}

/// A session's budget of prepared statements is spent.
pub(super) fn too_many_prepared(hint: &str) -> PgError {
    PgError::program_limit_exceeded(format!(
            "too many prepared statements: a session holds at most {MAX_NAMED_STATEMENTS}, of {} MiB of text in all",
            MAX_PREPARED_BYTES >> 20
        ),
    )
    .hint(hint)
}

/// A SQL-level prepared statement.
#[derive(Debug, Clone)]
pub struct Named {
    /// What runs.
    pub stmt: Prepared,
    /// Its text (planned again after DDL; its length is counted against
    /// [`super::MAX_PREPARED_BYTES`]).
    pub sql: Arc<str>,
    /// The catalog version `stmt` was planned at.
    pub version: u64,
}
