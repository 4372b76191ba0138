//! The planner's one error type. Variants carry what the gateway needs to
//! pick a SQLSTATE (it maps them in one place) and to point at the text.

use tablegate_catalog::CatalogError;
use tablegate_store::StoreError;

/// Why a statement could not be planned or run.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The SQL does not parse.
    #[error("{message}")]
    Syntax {
        /// Parser message.
        message: String,
        /// 1-based character position, when known.
        position: Option<usize>,
    },
    /// No such table.
    #[error("relation \"{name}\" does not exist")]
    UnknownTable {
        /// As written.
        name: String,
        /// 1-based character position.
        position: Option<usize>,
    },
    /// No such column.
    #[error("column \"{name}\" does not exist")]
    UnknownColumn {
        /// As written.
        name: String,
        /// 1-based character position.
        position: Option<usize>,
        /// Similar column names, if any.
        hint: Option<String>,
    },
    /// Types that do not compare (e.g. `text = integer`).
    #[error("operator does not exist: {left} {op} {right}")]
    TypeMismatch {
        /// Left type.
        left: String,
        /// Operator.
        op: String,
        /// Right type.
        right: String,
        /// How to fix it.
        hint: String,
    },
    /// A value that does not parse as its type (22P02).
    #[error("{0}")]
    InvalidValue(String),
    /// A parameter that was not supplied or has the wrong type.
    #[error("{0}")]
    InvalidParameter(String),
    /// Valid SQL that tablegate does not run (yet, or by design).
    #[error("{feature} is not supported")]
    Unsupported {
        /// What.
        feature: String,
        /// What to do instead.
        hint: String,
    },
    /// The query needs the analytics engine (DataFusion), which this build
    /// does not have yet.
    #[error("this query needs the analytics engine: {reason}")]
    NeedsAnalytics {
        /// Which construct.
        reason: String,
    },
    /// `tablegate.allow_full_scan = off` and the query scans the table.
    #[error("full scan of table \"{table}\" refused by tablegate.allow_full_scan = off")]
    FullScanRefused {
        /// The table.
        table: String,
        /// The hint: which key predicate would avoid it.
        hint: String,
    },
    /// A statement too long or too deeply built to plan safely.
    #[error("{message}")]
    TooComplex {
        /// What is too big.
        message: String,
        /// SQLSTATE 54000 (too long) or 54001 (too complex).
        too_long: bool,
    },
    /// The server is too busy to take the statement now (53000).
    #[error("server busy: {0}")]
    Busy(String),
    /// A parameter number outside `$1` .. `$65535` (42P02).
    #[error("{message}")]
    NoSuchParameter {
        /// Which parameter.
        message: String,
    },
    /// A write names a read-only system column (`timestamp`, `etag`).
    #[error("column \"{column}\" can only be updated to DEFAULT")]
    ReadOnlyColumn {
        /// The column.
        column: String,
    },
    /// A value of the wrong type for its column (42804).
    #[error("{0}")]
    DatatypeMismatch(String),
    /// Arithmetic or an assignment out of the type's range (22003).
    #[error("{0}")]
    OutOfRange(String),
    /// Division by zero (22012).
    #[error("division by zero")]
    DivisionByZero,
    /// A statement would write the same row twice (21000).
    #[error("{0}")]
    Cardinality(String),
    /// A write inside BEGIN ... COMMIT breaks an entity-group transaction
    /// rule; the transaction is aborted.
    #[error("{message}")]
    TransactionRule {
        /// Which rule.
        rule: TxnRule,
        /// What happened.
        message: String,
    },
    /// ROLLBACK TO or RELEASE names no savepoint of the transaction (3B001).
    #[error("savepoint \"{0}\" does not exist")]
    NoSuchSavepoint(String),
    /// More savepoints than a transaction keeps (54000).
    #[error(
        "too many savepoints: a transaction keeps at most {0}, and 32 MiB of writes under them"
    )]
    TooManySavepoints(usize),
    /// COMMIT found that an entity changed (or an inserted key appeared)
    /// since the transaction read it; nothing was applied (40001).
    #[error("could not serialize access due to concurrent update")]
    CommitConflict {
        /// Which entity and how.
        detail: String,
    },
    /// A statement applied as several entity-group transactions failed
    /// after some of them were applied.
    #[error("{source}")]
    PartlyApplied {
        /// Rows applied before the failure.
        rows: u64,
        /// Entity-group transactions applied before the failure.
        groups: u64,
        /// The failure.
        source: Box<PlanError>,
    },
    /// The catalog refused.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// An INSERT of a key that exists, with the key in the table's columns.
    #[error("duplicate key value violates unique constraint \"{table}_pkey\"")]
    DuplicateKey {
        /// The table.
        table: String,
        /// `(id)=(42)`, as PostgreSQL's detail shows it.
        key: String,
    },
    /// A write that would give a UNIQUE index a second entity with one
    /// value in a partition.
    #[error("duplicate key value violates unique constraint \"{index}\"")]
    UniqueViolation {
        /// The index.
        index: String,
        /// `(email)=(a@b)`.
        key: String,
        /// The row of the entity-group transaction that wrote it.
        row: usize,
    },
    /// CREATE UNIQUE INDEX over rows that already repeat a value.
    #[error("could not create unique index \"{index}\"")]
    UniqueIndexBuild {
        /// The index.
        index: String,
        /// `(email)=(a@b)`.
        key: String,
    },
    /// A value for a `GENERATED ALWAYS AS IDENTITY` column.
    #[error("cannot insert a non-DEFAULT value into column \"{column}\"")]
    GeneratedAlways {
        /// The identity column.
        column: String,
    },
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The entity-group transaction rules a transaction can break.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnRule {
    /// Every write shares the first write's table and PartitionKey.
    OnePartition,
    /// At most 100 distinct entities.
    MaxEntities,
    /// At most 4 MiB of payload.
    MaxBytes,
}

/// The planner's result type.
pub type Result<T, E = PlanError> = std::result::Result<T, E>;

impl PlanError {
    /// The store's "entity already exists" (however deep in an EGT or a
    /// partly applied write) said with `table`'s key columns and typed
    /// values: `Key (id)=(42)`, not the stored key text.
    pub fn with_key_columns(self, table: &tablegate_catalog::TableDef) -> PlanError {
        match self {
            PlanError::Store(e) => match duplicate(&e) {
                Some((pk, rk)) => {
                    let shown = |c: Option<tablegate_catalog::ColumnRef>, key: &str| {
                        c.map(|c| {
                            let v =
                                c.ty.decode_key(key)
                                    .map_or_else(|| key.to_owned(), |v| c.ty.pg_text(&v));
                            (c.name, v)
                        })
                    };
                    let parts: Vec<(String, String)> = [
                        shown(Some(table.partition_key_column()), pk),
                        shown(table.row_key_column(), rk),
                    ]
                    .into_iter()
                    .flatten()
                    .collect();
                    let names: Vec<&str> = parts.iter().map(|(n, _)| n.as_str()).collect();
                    let values: Vec<&str> = parts.iter().map(|(_, v)| v.as_str()).collect();
                    PlanError::DuplicateKey {
                        table: table.name.clone(),
                        key: format!("({})=({})", names.join(", "), values.join(", ")),
                    }
                }
                None => PlanError::Store(e),
            },
            PlanError::PartlyApplied {
                rows,
                groups,
                source,
            } => PlanError::PartlyApplied {
                rows,
                groups,
                source: Box::new(source.with_key_columns(table)),
            },
            other => other,
        }
    }
}

fn duplicate(e: &StoreError) -> Option<(&str, &str)> {
    match e {
        StoreError::EntityAlreadyExists {
            partition_key,
            row_key,
        } => Some((partition_key, row_key)),
        StoreError::BatchOperationFailed { source, .. } => duplicate(source),
        _ => None,
    }
}
