//! Identity columns (`serial`, `bigserial`, `GENERATED … AS IDENTITY`):
//! ids handed out in blocks from a counter entity.
//!
//! Each identity column has a counter entity in the system table
//! `tgsys_identity` (PartitionKey the table, RowKey the column) holding the
//! next id nobody has reserved. A gateway reserves a block of ids with one
//! ETag-guarded replace of that entity (a conflict with another gateway
//! reads it again and retries) and hands the ids out from memory: no store
//! write per insert, no hot counter entity. Ids are unique; they increase
//! within one gateway's block and leave gaps across restarts and gateways,
//! as PostgreSQL's cached sequences do.
//!
//! A statement reserves what its rows need before it evaluates them
//! ([`Identities::reserve`], asynchronously, through the store); the
//! evaluation then takes ids synchronously ([`take`]) from a pool of the
//! running thread. A connection runs on a thread of its own, so the pool is
//! the statement's; what a statement leaves is dropped when the next one
//! reserves.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use tablegate_store::{EntityWrite, IfMatch, Operation, StoreError, TableStore, Value};

use crate::error::{PlanError, Result};

/// The system table of identity counters.
pub const IDENTITY_TABLE: &str = "tgsys_identity";
/// Ids reserved at once (more when one statement needs more).
const BLOCK: i64 = 100;
/// Reservation attempts against other gateways before giving up.
const ATTEMPTS: usize = 20;

/// The gateway's reserved, not yet handed out, blocks.
#[derive(Debug)]
pub struct Identities {
    system: Arc<dyn TableStore>,
    /// (table, column) → ids [next, end).
    blocks: Mutex<HashMap<(String, String), (i64, i64)>>,
}

thread_local! {
    /// Ids reserved for the statement running on this thread.
    static POOL: RefCell<HashMap<(String, String), VecDeque<i64>>> = RefCell::default();
}

/// The next reserved id of `table.column` for the running statement.
pub fn take(table: &str, column: &str) -> Result<i64> {
    POOL.with(|p| {
        p.borrow_mut()
            .get_mut(&(table.to_owned(), column.to_owned()))
            .and_then(VecDeque::pop_front)
    })
    .ok_or_else(|| {
        PlanError::InvalidValue(format!(
            "no id was reserved for identity column \"{column}\" of \"{table}\""
        ))
    })
}

/// Ids still reserved for `table.column` on this thread.
pub fn remaining(table: &str, column: &str) -> usize {
    POOL.with(|p| {
        p.borrow()
            .get(&(table.to_owned(), column.to_owned()))
            .map_or(0, VecDeque::len)
    })
}

impl Identities {
    /// Counters in `system` (the table is created on first use).
    pub fn new(system: Arc<dyn TableStore>) -> Identities {
        Identities {
            system,
            blocks: Mutex::new(HashMap::new()),
        }
    }

    /// Reserves `n` ids of `table.column` for the statement about to run on
    /// this thread (dropping what an earlier statement left).
    pub async fn reserve(&self, table: &str, column: &str, n: usize) -> Result<()> {
        let key = (table.to_owned(), column.to_owned());
        let mut ids = VecDeque::with_capacity(n);
        while ids.len() < n {
            let cached = {
                let mut blocks = self.blocks.lock();
                match blocks.get_mut(&key) {
                    Some((next, end)) if *next < *end => {
                        let k = (*end - *next).min((n - ids.len()) as i64);
                        let range = *next..*next + k;
                        *next += k;
                        Some(range)
                    }
                    _ => None,
                }
            };
            match cached {
                Some(range) => ids.extend(range),
                None => {
                    let want = BLOCK.max((n - ids.len()) as i64);
                    let start = self.next_block(table, column, want).await?;
                    self.blocks
                        .lock()
                        .insert(key.clone(), (start, start + want));
                }
            }
        }
        POOL.with(|p| p.borrow_mut().insert(key, ids));
        Ok(())
    }

    /// Forgets a dropped table's counters (store and memory).
    pub async fn drop_table(&self, table: &str) -> Result<()> {
        self.blocks.lock().retain(|k, _| k.0 != table);
        let q = tablegate_store::Query {
            spans: vec![tablegate_store::KeyBox::partition(table)],
            filter: None,
            projection: None,
        };
        let page = match self
            .system
            .query(IDENTITY_TABLE, &q, &Default::default())
            .await
        {
            Ok(p) => p,
            Err(StoreError::TableNotFound { .. }) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        for e in page.entities {
            let op = Operation::Delete {
                partition_key: e.partition_key.clone(),
                row_key: e.row_key.clone(),
                if_match: IfMatch::Any,
            };
            match self.system.execute(IDENTITY_TABLE, vec![op].into()).await {
                Ok(_) | Err(StoreError::EntityNotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Moves the counter on by `n` and returns where the block starts.
    async fn next_block(&self, table: &str, column: &str, n: i64) -> Result<i64> {
        for _ in 0..ATTEMPTS {
            let current = match self.system.get(IDENTITY_TABLE, table, column).await {
                Ok(e) => e,
                Err(StoreError::TableNotFound { .. }) => {
                    match self.system.create_table(IDENTITY_TABLE).await {
                        Ok(_) | Err(StoreError::TableExists { .. }) => {}
                        Err(e) => return Err(e.into()),
                    }
                    None
                }
                Err(e) => return Err(e.into()),
            };
            let start = match &current {
                Some(e) => match e.properties.get("next") {
                    Some(Value::Int64(v)) => *v,
                    _ => 1,
                },
                None => 1,
            };
            let end = start.checked_add(n).ok_or_else(|| {
                PlanError::InvalidValue(format!(
                    "identity column \"{column}\" of \"{table}\" has run out of ids"
                ))
            })?;
            let w = EntityWrite::new(table, column).with("next", Value::Int64(end));
            let op = match &current {
                Some(e) => Operation::Replace {
                    entity: w,
                    if_match: IfMatch::ETag(e.etag()),
                },
                None => Operation::Insert(w),
            };
            match self.system.execute(IDENTITY_TABLE, vec![op].into()).await {
                Ok(_) => return Ok(start),
                // Another gateway moved it first: read it again.
                Err(e) if conflict(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(PlanError::InvalidValue(format!(
            "identity column \"{column}\" of \"{table}\": could not reserve ids after {ATTEMPTS} attempts (other gateways keep reserving)"
        )))
    }
}

fn conflict(e: &StoreError) -> bool {
    match e {
        StoreError::ETagMismatch { .. } | StoreError::EntityAlreadyExists { .. } => true,
        StoreError::BatchOperationFailed { source, .. } => conflict(source),
        _ => false,
    }
}
