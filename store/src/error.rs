//! The store's one error type.
//!
//! Variants are named for what went wrong from the caller's point of view
//! (a limit, a conflict, a missing entity), never for the engine underneath,
//! so the gateway can map each to exactly one SQLSTATE without looking at
//! message text.

use std::time::Duration;

/// Which of the two key properties a key error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// The PartitionKey.
    PartitionKey,
    /// The RowKey.
    RowKey,
}

impl std::fmt::Display for KeyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KeyKind::PartitionKey => "PartitionKey",
            KeyKind::RowKey => "RowKey",
        })
    }
}

/// Everything the store can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    // ---- names ------------------------------------------------------------
    /// A table name breaks the naming rules.
    #[error("invalid table name {name:?}: {reason}")]
    InvalidTableName {
        /// The rejected name.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// `create_table` on a name that exists (case-insensitively).
    #[error("table {name:?} already exists")]
    TableExists {
        /// The existing table's name.
        name: String,
    },
    /// The named table does not exist.
    #[error("table {name:?} does not exist")]
    TableNotFound {
        /// The name looked up.
        name: String,
    },
    /// A property name breaks the identifier rules or is reserved.
    #[error("invalid property name {name:?}: {reason}")]
    InvalidPropertyName {
        /// The rejected name (possibly truncated for display by callers).
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },

    // ---- keys -------------------------------------------------------------
    /// A key is longer than 1 KiB as UTF-16.
    #[error("{kind} is {units} UTF-16 code units long; the limit is {limit}")]
    KeyTooLong {
        /// Which key.
        kind: KeyKind,
        /// Its length in UTF-16 code units.
        units: usize,
        /// The limit in UTF-16 code units.
        limit: usize,
    },
    /// A key contains `/`, `\`, `#`, `?` or a control character.
    /// Shown counting from 1, as PostgreSQL counts positions.
    #[error("{kind} contains the forbidden character {ch:?} at character {}", .position + 1)]
    ForbiddenKeyCharacter {
        /// Which key.
        kind: KeyKind,
        /// The offending character.
        ch: char,
        /// Its zero-based character position.
        position: usize,
    },

    // ---- entity shape and size ------------------------------------------
    /// More than 252 properties besides the system properties.
    #[error(
        "entity has {count} properties; at most {limit} are allowed besides PartitionKey, RowKey and Timestamp"
    )]
    TooManyProperties {
        /// Number of stored properties.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// A String or Binary value is over 64 KiB.
    #[error("property {property:?} is {size} bytes; the limit for a {edm} value is {limit} bytes")]
    ValueTooLarge {
        /// The property.
        property: String,
        /// EDM type name.
        edm: &'static str,
        /// Its size in bytes (UTF-16 bytes for strings).
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// A DateTime outside 1601-01-01 .. 9999-12-31 UTC.
    #[error(
        "property {property:?}: DateTime {micros} µs since 1970 is outside 1601-01-01T00:00:00Z ..= 9999-12-31T23:59:59.999999Z"
    )]
    DateTimeOutOfRange {
        /// The property.
        property: String,
        /// The value in microseconds since the Unix epoch.
        micros: i64,
    },
    /// The entity is over 1 MiB by the documented size formula.
    #[error(
        "entity ({partition_key:?}, {row_key:?}) is {size} bytes by the Table size formula; the limit is {limit}"
    )]
    EntityTooLarge {
        /// PartitionKey of the entity.
        partition_key: String,
        /// RowKey of the entity.
        row_key: String,
        /// Computed size.
        size: usize,
        /// The limit.
        limit: usize,
    },

    // ---- conflicts and preconditions -------------------------------------
    /// Insert of a key that exists.
    #[error("entity ({partition_key:?}, {row_key:?}) already exists")]
    EntityAlreadyExists {
        /// PartitionKey.
        partition_key: String,
        /// RowKey.
        row_key: String,
    },
    /// Replace, Merge or Delete of a key that does not exist.
    #[error("entity ({partition_key:?}, {row_key:?}) does not exist")]
    EntityNotFound {
        /// PartitionKey.
        partition_key: String,
        /// RowKey.
        row_key: String,
    },
    /// If-Match with a specific ETag did not match the current one.
    #[error(
        "entity ({partition_key:?}, {row_key:?}) has changed: ETag {expected} does not match the current {actual}"
    )]
    ETagMismatch {
        /// PartitionKey.
        partition_key: String,
        /// RowKey.
        row_key: String,
        /// The ETag the caller sent.
        expected: String,
        /// The ETag the entity has now.
        actual: String,
    },

    // ---- entity-group transactions ---------------------------------------
    /// An EGT with no operations.
    #[error("an entity-group transaction needs at least one operation")]
    EmptyBatch,
    /// More than 100 operations.
    #[error("entity-group transaction has {count} operations; the limit is {limit}")]
    BatchTooManyOperations {
        /// Number of operations.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// More than 4 MiB of payload.
    #[error("entity-group transaction is {size} bytes; the limit is {limit}")]
    BatchTooLarge {
        /// Computed payload size.
        size: usize,
        /// The limit.
        limit: usize,
    },
    /// Operation `index` names a different PartitionKey than operation 0.
    #[error(
        "operation {index} is for PartitionKey {found:?}, but an entity-group transaction must stay within PartitionKey {expected:?}"
    )]
    BatchCrossPartition {
        /// Index of the offending operation.
        index: usize,
        /// PartitionKey of operation 0.
        expected: String,
        /// PartitionKey of the offending operation.
        found: String,
    },
    /// The same entity appears twice in one EGT.
    #[error(
        "operation {index} touches entity ({partition_key:?}, {row_key:?}) again; an entity-group transaction may touch each entity once"
    )]
    BatchDuplicateEntity {
        /// Index of the second occurrence.
        index: usize,
        /// PartitionKey.
        partition_key: String,
        /// RowKey.
        row_key: String,
    },
    /// Operation `index` of an EGT failed; nothing in the EGT was applied.
    #[error("operation {index} of the entity-group transaction failed: {source}")]
    BatchOperationFailed {
        /// Zero-based index of the failing operation.
        index: usize,
        /// Why it failed.
        #[source]
        source: Box<StoreError>,
    },

    // ---- queries -----------------------------------------------------------
    /// A page request or query that cannot be served as asked.
    #[error("invalid query: {reason}")]
    InvalidQuery {
        /// What is wrong.
        reason: String,
    },
    /// A continuation token that is malformed, from another version, or from
    /// another query.
    #[error("invalid continuation token: {reason}")]
    InvalidContinuationToken {
        /// What is wrong.
        reason: &'static str,
    },

    // ---- capacity ------------------------------------------------------------
    /// A scalability target was exceeded, or the range partition is
    /// offline while it moves between partition servers. The request did no
    /// work and may be retried after backing off.
    #[error("server busy: {reason}")]
    ServerBusy {
        /// The whole story, e.g. `partition "p" of table t is over its target
        /// of 2000 entities/s`.
        reason: String,
        /// What is busy: a partition, a partition server, the account or a
        /// moving range partition.
        scope: String,
        /// The target exceeded in entities per second (`None` for a move).
        target_per_sec: Option<u64>,
        /// How long the caller should wait before retrying.
        retry_after: Duration,
    },
    /// The operation took longer than the service allows; retryable.
    #[error("operation timed out: {0}")]
    Timeout(String),

    // ---- the engine underneath ---------------------------------------------
    /// Stored bytes that do not decode: a bug or on-disk corruption.
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// The durable engine failed (I/O, poisoned journal, ...).
    #[error("storage engine error: {0}")]
    Engine(String),
    /// The durable engine could not make a write durable (its journal
    /// could not be written or synced), so it refuses every write until
    /// restart; reads go on.
    #[error("the storage engine refuses writes: {cause}")]
    WritesStopped {
        /// What failed, as the operating system said it.
        cause: String,
        /// The cause is a full disk.
        disk_full: bool,
    },
    /// A remote table service refused a request for a reason none of the
    /// variants above describes (authentication, permissions, a malformed
    /// request), or could not be reached (`status` is `None`).
    #[error("table service: {message}")]
    Remote {
        /// HTTP status, when a response arrived.
        status: Option<u16>,
        /// The service's error code (`AuthenticationFailed`, ...).
        code: String,
        /// The whole story.
        message: String,
    },
}

impl StoreError {
    /// Wraps `self` as the failure of operation `index` of an EGT.
    pub fn at_operation(self, index: usize) -> StoreError {
        StoreError::BatchOperationFailed {
            index,
            source: Box::new(self),
        }
    }

    /// The innermost error: for a failed EGT operation, why it failed.
    pub fn root(&self) -> &StoreError {
        match self {
            StoreError::BatchOperationFailed { source, .. } => source.root(),
            other => other,
        }
    }

    /// True for errors that retrying the same request may fix (throttling),
    /// false for client errors that will fail again.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.root(),
            StoreError::ServerBusy { .. } | StoreError::Timeout(_)
        )
    }
}

/// The store's result type.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
