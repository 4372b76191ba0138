//! Write operations and their semantics, independent of any engine.
//!
//! [`Operation::apply`] turns "the entity as it is now" into "the entity as it
//! must be after this operation" or the error the Table service would give:
//! the single definition of Insert / Replace / Merge / upserts / Delete and
//! If-Match that every backend and the test model share.

use std::collections::BTreeMap;

use crate::entity::{ETag, Entity, EntityWrite, IfMatch, Timestamp, Value, entity_size};
use crate::error::{KeyKind, Result, StoreError};
use crate::limits;

/// One write in an entity-group transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum Operation {
    /// Create; fails if the entity exists.
    Insert(EntityWrite),
    /// Overwrite an existing entity; properties not supplied are dropped.
    Replace {
        /// New state.
        entity: EntityWrite,
        /// Precondition (`*` or an ETag).
        if_match: IfMatch,
    },
    /// Update an existing entity; properties not supplied are kept, NULLs
    /// remove.
    Merge {
        /// Properties to change.
        entity: EntityWrite,
        /// Precondition (`*` or an ETag).
        if_match: IfMatch,
    },
    /// Insert, or replace whatever exists.
    InsertOrReplace(EntityWrite),
    /// Insert, or merge into whatever exists.
    InsertOrMerge(EntityWrite),
    /// Remove an existing entity.
    Delete {
        /// PartitionKey.
        partition_key: String,
        /// RowKey.
        row_key: String,
        /// Precondition (`*` or an ETag).
        if_match: IfMatch,
    },
}

/// What one applied operation did.
#[derive(Debug, Clone, PartialEq)]
pub struct OpOutcome {
    /// Whether an entity existed before the operation.
    pub existed: bool,
    /// What it left at the key.
    pub written: Written,
}

/// What an operation left at its key. The entity is kept only where the
/// operation alone does not say what it is: an Insert or Replace wrote
/// exactly its own non-NULL properties, so its outcome keeps the Timestamp
/// and [`OpOutcome::entity`] rebuilds the entity from the operation when a
/// caller asks (RETURNING), instead of every write paying for a copy of
/// every entity it writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Written {
    /// The entity was deleted.
    Deleted,
    /// The operation's own non-NULL properties, stamped with this
    /// Timestamp (Insert, Replace, InsertOrReplace on the embedded engine).
    AsSent(Timestamp),
    /// This entity (a merge's result, or one a remote service stamped with
    /// its own ETag).
    Entity(Entity),
}

impl OpOutcome {
    /// The entity as written by `op` (the operation this is the outcome
    /// of); `None` after a Delete.
    pub fn entity(&self, op: &Operation) -> Option<Entity> {
        match &self.written {
            Written::Deleted => None,
            Written::Entity(e) => Some(e.clone()),
            Written::AsSent(ts) => {
                Some(op.stamped(op.write().map(non_null).unwrap_or_default(), *ts))
            }
        }
    }

    /// [`OpOutcome::entity`] taking the outcome's own entity when it has one.
    pub fn into_entity(self, op: &Operation) -> Option<Entity> {
        match self.written {
            Written::Entity(e) => Some(e),
            _ => self.entity(op),
        }
    }

    /// Whether the operation left an entity (it was not a Delete).
    pub fn wrote(&self) -> bool {
        !matches!(self.written, Written::Deleted)
    }

    /// The new ETag, `None` after a Delete.
    pub fn etag(&self) -> Option<ETag> {
        match &self.written {
            Written::Deleted => None,
            Written::AsSent(ts) => Some(ETag::from_timestamp(*ts)),
            Written::Entity(e) => Some(e.etag()),
        }
    }
}

/// The effect of an operation on one key, borrowing what it can from the
/// operation.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Effect<'a> {
    /// Write the operation's own non-NULL properties.
    PutSent(&'a EntityWrite),
    /// Write these properties (a merge's result).
    PutMerged(BTreeMap<String, Value>),
    Delete,
}

impl Operation {
    /// (PartitionKey, RowKey) this operation touches.
    pub fn keys(&self) -> (&str, &str) {
        match self {
            Operation::Insert(e)
            | Operation::InsertOrReplace(e)
            | Operation::InsertOrMerge(e)
            | Operation::Replace { entity: e, .. }
            | Operation::Merge { entity: e, .. } => (&e.partition_key, &e.row_key),
            Operation::Delete {
                partition_key,
                row_key,
                ..
            } => (partition_key, row_key),
        }
    }

    /// Operation name as the Table service calls it.
    pub fn name(&self) -> &'static str {
        match self {
            Operation::Insert(_) => "Insert",
            Operation::Replace { .. } => "Replace",
            Operation::Merge { .. } => "Merge",
            Operation::InsertOrReplace(_) => "InsertOrReplace",
            Operation::InsertOrMerge(_) => "InsertOrMerge",
            Operation::Delete { .. } => "Delete",
        }
    }

    /// Bytes this operation adds to an EGT's payload (the entity size
    /// formula; a Delete counts its keys).
    pub fn payload_size(&self) -> usize {
        match self {
            Operation::Delete {
                partition_key,
                row_key,
                ..
            } => entity_size(partition_key, row_key, std::iter::empty()),
            Operation::Insert(e)
            | Operation::InsertOrReplace(e)
            | Operation::InsertOrMerge(e)
            | Operation::Replace { entity: e, .. }
            | Operation::Merge { entity: e, .. } => e.size_in_formula(),
        }
    }

    /// Validates what can be validated without the current entity: keys,
    /// property names and value limits.
    pub fn validate(&self) -> Result<()> {
        match self {
            Operation::Delete {
                partition_key,
                row_key,
                ..
            } => {
                limits::check_key(KeyKind::PartitionKey, partition_key)?;
                limits::check_key(KeyKind::RowKey, row_key)
            }
            Operation::Insert(e)
            | Operation::InsertOrReplace(e)
            | Operation::InsertOrMerge(e)
            | Operation::Replace { entity: e, .. }
            | Operation::Merge { entity: e, .. } => e.validate(),
        }
    }

    /// The entity this operation's write carries (`None`: a Delete).
    fn write(&self) -> Option<&EntityWrite> {
        match self {
            Operation::Insert(e)
            | Operation::InsertOrReplace(e)
            | Operation::InsertOrMerge(e)
            | Operation::Replace { entity: e, .. }
            | Operation::Merge { entity: e, .. } => Some(e),
            Operation::Delete { .. } => None,
        }
    }

    /// The entity this operation leaves behind given the current one
    /// (`None`: deleted), stamped with `timestamp`, or the error the Table
    /// service would give. For backends that must compute a result
    /// client-side (a remote Merge that removes properties).
    pub fn result_on(
        &self,
        current: Option<&Entity>,
        timestamp: Timestamp,
    ) -> Result<Option<Entity>> {
        let properties = match self.apply(current.cloned())? {
            Effect::PutSent(w) => non_null(w),
            Effect::PutMerged(p) => p,
            Effect::Delete => return Ok(None),
        };
        Ok(Some(self.stamped(properties, timestamp)))
    }

    /// The entity at this operation's key with these properties.
    pub(crate) fn stamped(
        &self,
        properties: BTreeMap<String, Value>,
        timestamp: Timestamp,
    ) -> Entity {
        let (pk, rk) = self.keys();
        Entity {
            partition_key: pk.to_owned(),
            row_key: rk.to_owned(),
            timestamp,
            etag: None,
            properties,
        }
    }

    /// The properties the operation leaves at its key given the current
    /// entity, without checking existence, If-Match or limits (`None`
    /// after a Delete): what a caller keeping derived data (index
    /// entries) needs to know before sending it.
    pub fn properties_after(&self, current: Option<&Entity>) -> Option<BTreeMap<String, Value>> {
        match self {
            Operation::Delete { .. } => None,
            Operation::Insert(e)
            | Operation::InsertOrReplace(e)
            | Operation::Replace { entity: e, .. } => Some(non_null(e)),
            Operation::Merge { entity: e, .. } | Operation::InsertOrMerge(e) => {
                Some(merged(current.cloned(), e))
            }
        }
    }

    /// Applies the operation to the current entity (if any; taken, as a
    /// merge keeps its properties). Checks existence, If-Match and the
    /// limits of the resulting entity.
    pub(crate) fn apply(&self, current: Option<Entity>) -> Result<Effect<'_>> {
        let (pk, rk) = self.keys();
        let not_found = || StoreError::EntityNotFound {
            partition_key: pk.to_owned(),
            row_key: rk.to_owned(),
        };
        let check = |if_match: &IfMatch| -> Result<()> {
            let cur = current.as_ref().ok_or_else(not_found)?;
            if let IfMatch::ETag(expected) = if_match {
                let actual = cur.etag();
                if &actual != expected {
                    return Err(StoreError::ETagMismatch {
                        partition_key: pk.to_owned(),
                        row_key: rk.to_owned(),
                        expected: expected.0.clone(),
                        actual: actual.0,
                    });
                }
            }
            Ok(())
        };
        let effect = match self {
            Operation::Insert(e) => {
                if current.is_some() {
                    return Err(StoreError::EntityAlreadyExists {
                        partition_key: pk.to_owned(),
                        row_key: rk.to_owned(),
                    });
                }
                Effect::PutSent(e)
            }
            Operation::Replace { entity, if_match } => {
                check(if_match)?;
                Effect::PutSent(entity)
            }
            Operation::Merge { entity, if_match } => {
                check(if_match)?;
                Effect::PutMerged(merged(current, entity))
            }
            Operation::InsertOrReplace(e) => Effect::PutSent(e),
            Operation::InsertOrMerge(e) => Effect::PutMerged(merged(current, e)),
            Operation::Delete { if_match, .. } => {
                check(if_match)?;
                return Ok(Effect::Delete);
            }
        };
        match &effect {
            Effect::PutSent(w) => limits::check_entity_parts(pk, rk, w.non_null())?,
            Effect::PutMerged(p) => {
                limits::check_entity_parts(pk, rk, p.iter().map(|(k, v)| (k.as_str(), v)))?
            }
            Effect::Delete => {}
        }
        Ok(effect)
    }
}

fn non_null(e: &EntityWrite) -> BTreeMap<String, Value> {
    e.non_null()
        .map(|(k, v)| (k.to_owned(), v.clone()))
        .collect()
}

fn merged(current: Option<Entity>, e: &EntityWrite) -> BTreeMap<String, Value> {
    let mut props = current.map(|c| c.properties).unwrap_or_default();
    for (k, v) in &e.properties {
        match v {
            Some(v) => {
                props.insert(k.clone(), v.clone());
            }
            None => {
                props.remove(k);
            }
        }
    }
    props
}

/// Checks the shape of an entity-group transaction: 1..=100 operations,
/// one PartitionKey, each entity once, valid keys and values, at most 4 MiB.
/// Errors name the index of the offending operation.
pub fn check_batch(ops: &[Operation]) -> Result<()> {
    if ops.is_empty() {
        return Err(StoreError::EmptyBatch);
    }
    if ops.len() > limits::MAX_BATCH_OPERATIONS {
        return Err(StoreError::BatchTooManyOperations {
            count: ops.len(),
            limit: limits::MAX_BATCH_OPERATIONS,
        });
    }
    let first_pk = ops[0].keys().0;
    let mut seen = std::collections::HashSet::with_capacity(ops.len());
    let mut size = 0usize;
    for (i, op) in ops.iter().enumerate() {
        op.validate().map_err(|e| e.at_operation(i))?;
        let (pk, rk) = op.keys();
        if pk != first_pk {
            return Err(StoreError::BatchCrossPartition {
                index: i,
                expected: first_pk.to_owned(),
                found: pk.to_owned(),
            });
        }
        if !seen.insert(rk) {
            return Err(StoreError::BatchDuplicateEntity {
                index: i,
                partition_key: pk.to_owned(),
                row_key: rk.to_owned(),
            });
        }
        size += op.payload_size();
    }
    if size > limits::MAX_BATCH_BYTES {
        return Err(StoreError::BatchTooLarge {
            size,
            limit: limits::MAX_BATCH_BYTES,
        });
    }
    Ok(())
}
