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
    /// The catalog refused.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The planner's result type.
pub type Result<T, E = PlanError> = std::result::Result<T, E>;
