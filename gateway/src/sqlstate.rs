//! **The one place where errors become SQLSTATEs**.
//!
//! Every error a client can see passes through [`PgError::from`] for the
//! planner's, catalog's and store's error types. Each variant maps to
//! exactly one code; detail and hint say what happened and what to do.

use pgwire::error::{ErrorInfo, PgWireError};
use tablegate_catalog::CatalogError;
use tablegate_planner::{PlanError, TxnRule};
use tablegate_store::StoreError;

/// SQLSTATE for a full scan refused by `tablegate.allow_full_scan = off`:
/// an implementation-defined class ("TG") so clients can tell it apart.
pub const FULL_SCAN_REFUSED: &str = "TG001";

/// An error as the client receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgError {
    /// SQLSTATE.
    pub code: &'static str,
    /// Primary message.
    pub message: String,
    /// DETAIL.
    pub detail: Option<String>,
    /// HINT.
    pub hint: Option<String>,
    /// 1-based character position in the query text.
    pub position: Option<usize>,
}

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl std::error::Error for PgError {}

impl PgError {
    /// An error with a code and message.
    pub fn new(code: &'static str, message: impl Into<String>) -> Self {
        PgError {
            code,
            message: message.into(),
            detail: None,
            hint: None,
            position: None,
        }
    }

    /// With a DETAIL.
    #[must_use]
    pub fn detail(mut self, d: impl Into<String>) -> Self {
        self.detail = Some(d.into());
        self
    }

    /// With a HINT.
    #[must_use]
    pub fn hint(mut self, h: impl Into<String>) -> Self {
        self.hint = Some(h.into());
        self
    }

    /// With a position.
    #[must_use]
    pub fn at(mut self, p: Option<usize>) -> Self {
        self.position = p;
        self
    }

    /// 25P02: the transaction is aborted.
    pub fn aborted() -> Self {
        PgError::new(
            "25P02",
            "current transaction is aborted, commands ignored until end of transaction block",
        )
        .hint("ROLLBACK to end the transaction")
    }

    /// 57P01: the session ends because the server is shutting down (sent
    /// with severity FATAL, in PostgreSQL's words).
    pub fn admin_shutdown() -> Self {
        PgError::new(
            "57P01",
            "terminating connection due to administrator command",
        )
    }

    /// XX000: a state the code should never reach, or a failure with no
    /// better class (an encoder's).
    pub fn internal(message: impl std::fmt::Display) -> Self {
        PgError::new("XX000", message.to_string())
    }

    /// 08006: the client's connection failed while the server wrote to it.
    pub fn connection_lost(e: impl std::fmt::Display) -> Self {
        PgError::new("08006", e.to_string())
    }

    /// 57014: cancelled by request or by statement_timeout.
    pub fn cancelled(by_timeout: bool) -> Self {
        if by_timeout {
            PgError::new("57014", "canceling statement due to statement timeout")
        } else {
            PgError::new("57014", "canceling statement due to user request")
        }
    }
}

/// The message of 22021 for U+0000 in text, which PostgreSQL's text never
/// holds (a parameter, a COPY option or a COPY line say where, around it).
pub const NUL_IN_TEXT: &str = "invalid byte sequence for encoding \"UTF8\": 0x00";

/// Named constructors, one per SQLSTATE a call site raises directly
/// (PostgreSQL's condition names): the codes live here, not at the call
/// sites.
macro_rules! conditions {
    ($($(#[$doc:meta])* $name:ident = $code:literal;)*) => {
        impl PgError {
            $(
                $(#[$doc])*
                pub fn $name(message: impl Into<String>) -> Self {
                    PgError::new($code, message)
                }
            )*
        }
    };
}

conditions! {
    /// 0A000: a feature tablegate does not have.
    feature_not_supported = "0A000";
    /// 42601: a statement that is not valid where it stands.
    syntax_error = "42601";
    /// 08P01: a message that breaks the wire protocol.
    protocol_violation = "08P01";
    /// 54000: a per-session or per-message limit.
    program_limit_exceeded = "54000";
    /// 22023: a setting or option value that is not valid.
    invalid_parameter_value = "22023";
    /// 22P04: COPY data that does not have the table's shape.
    bad_copy_file_format = "22P04";
    /// 42704: a setting that does not exist.
    undefined_object = "42704";
    /// 25001: BEGIN inside a transaction block (a WARNING).
    active_sql_transaction = "25001";
    /// 25006: a write in a READ ONLY transaction.
    read_only_sql_transaction = "25006";
    /// 42P02: a `$n` with no value.
    undefined_parameter = "42P02";
    /// 25P01: a command that needs a transaction block.
    no_active_sql_transaction = "25P01";
    /// 22P02: a value whose text does not parse as its type.
    invalid_text_representation = "22P02";
    /// 22021: bytes that are not UTF-8.
    character_not_in_repertoire = "22021";
    /// 22000: a value that cannot be sent.
    data_exception = "22000";
    /// 55P02: a read-only setting.
    cant_change_runtime_param = "55P02";
    /// 42P05: a prepared statement name already taken.
    duplicate_prepared_statement = "42P05";
    /// 26000: a prepared statement that does not exist.
    invalid_sql_statement_name = "26000";
    /// 00000: a NOTICE (successful completion).
    notice = "00000";
    /// 28000: authentication refused.
    invalid_authorization_specification = "28000";
    /// 3F000: a schema other than `public`.
    invalid_schema_name = "3F000";
    /// 42P07: a table that already exists.
    duplicate_table = "42P07";
    /// 42P01: a table that does not exist.
    undefined_table = "42P01";
    /// 28P01: a wrong password or an unknown user (Flight SQL's handshake).
    invalid_password = "28P01";
    /// 53300: no session slot left.
    too_many_connections = "53300";
    /// 42P03: a cursor name already taken.
    duplicate_cursor = "42P03";
    /// 34000: a cursor that does not exist.
    invalid_cursor_name = "34000";
    /// 22003: a number out of its type's range.
    numeric_value_out_of_range = "22003";
    /// 42703: a column that does not exist.
    undefined_column = "42703";
    /// 42804: a value of the wrong type.
    datatype_mismatch = "42804";
    /// 42501: an operation the session may not do.
    insufficient_privilege = "42501";
    /// 53000: the server is out of a shared resource.
    insufficient_resources = "53000";
    /// 22008: a date or time out of range.
    datetime_field_overflow = "22008";
    /// 57014: a statement stopped by its client (COPY's CopyFail).
    query_canceled = "57014";
}

impl From<&StoreError> for PgError {
    fn from(e: &StoreError) -> Self {
        let m = e.to_string();
        match e {
            StoreError::BatchOperationFailed { index, source } => {
                let inner = PgError::from(&**source);
                let detail = match &inner.detail {
                    Some(d) => format!("{d} (operation {index} of the entity-group transaction)"),
                    None => format!("Operation {index} of the entity-group transaction failed."),
                };
                PgError { detail: Some(detail), ..inner }
            }
            StoreError::InvalidTableName { .. } => PgError::new("42602", m)
                .hint("table names have 3 to 63 characters: a letter, then letters, digits or '_'"),
            StoreError::TableExists { .. } => PgError::new("42P07", m),
            StoreError::TableNotFound { name } => PgError::new("42P01", format!("relation \"{name}\" does not exist")),
            StoreError::InvalidPropertyName { .. } => PgError::new("42602", m),
            StoreError::KeyTooLong { .. } => PgError::new("54000", m)
                .hint("PartitionKey and RowKey hold at most 1 KiB (512 UTF-16 code units) each"),
            StoreError::ForbiddenKeyCharacter { .. } => PgError::new("22023", m)
                .hint("keys cannot contain / \\ # ? or control characters (U+0000-U+001F, U+007F-U+009F)"),
            StoreError::TooManyProperties { .. }
            | StoreError::ValueTooLarge { .. }
            | StoreError::EntityTooLarge { .. } => PgError::new("54000", m),
            StoreError::DateTimeOutOfRange { .. } => PgError::new("22008", m)
                .hint("timestamps range from 1601-01-01 to 9999-12-31 UTC"),
            StoreError::EntityAlreadyExists {
                partition_key,
                row_key,
            } => PgError::new("23505", "duplicate key value violates the primary key")
                .detail(format!("Key (PartitionKey, RowKey)=({partition_key}, {row_key}) already exists.")),
            StoreError::EntityNotFound { .. } | StoreError::ETagMismatch { .. } => {
                PgError::new("40001", "could not serialize access due to concurrent update")
                    .detail(m)
                    .hint("the row changed since it was read: read it again and retry")
            }
            StoreError::EmptyBatch => PgError::new("XX000", m),
            StoreError::BatchTooManyOperations { .. } | StoreError::BatchTooLarge { .. } => PgError::new("54000", m)
                .hint("an entity-group transaction holds at most 100 operations and 4 MiB"),
            StoreError::BatchCrossPartition { .. } => PgError::new("0A000", m).hint(
                "an entity-group transaction stays within one table and one PartitionKey; commit, then write the other partition",
            ),
            StoreError::BatchDuplicateEntity { .. } => PgError::new("21000", m),
            StoreError::InvalidQuery { .. } => PgError::new("22023", m),
            StoreError::InvalidContinuationToken { .. } => PgError::new("22023", m),
            StoreError::ServerBusy {
                reason,
                scope,
                target_per_sec,
                retry_after,
            } => {
                // Without a target it is a move or the remote service's own
                // answer: the reason holds its words.
                let detail = match target_per_sec {
                    Some(t) => format!("{scope} is over its target of {t} entities/s."),
                    None => format!("{reason}."),
                };
                PgError::new("53000", "server busy: the request was throttled and retries ran out")
                    .detail(detail)
                    .hint(format!(
                        "back off and retry (after at least {} ms); spread load over more PartitionKeys",
                        retry_after.as_millis().max(1)
                    ))
            }
            StoreError::Timeout(_) => PgError::new("53000", m).hint("back off and retry"),
            StoreError::Corrupt(_) => PgError::new("XX001", m),
            StoreError::Engine(_) => PgError::new("58030", m),
            StoreError::WritesStopped {
                disk_full: true, ..
            } => PgError::new("53100", m).hint(
                "the data directory's disk is full: free space, then restart tablegate; \
                 every acknowledged write is recovered at start-up, and reads work until then \
                 (SELECT * FROM tablegate.health)",
            ),
            StoreError::WritesStopped { .. } => PgError::new("58030", m).hint(
                "the disk failed a write: check the disk and the system log, then restart \
                 tablegate; every acknowledged write is recovered at start-up, and reads work \
                 until then (SELECT * FROM tablegate.health)",
            ),
            StoreError::Remote { status: Some(401 | 403), .. } => PgError::new("42501", m)
                .hint("check the account key, or the SAS token's permissions and expiry"),
            // The service's own size limits: the same SQLSTATE as the
            // checks made before sending (which count as the service
            // documents; Azurite measures an entity by its request body's
            // UTF-8 bytes, so it refuses some that the service accepts).
            StoreError::Remote { code, .. }
                if matches!(
                    code.as_str(),
                    "PropertyValueTooLarge" | "EntityTooLarge" | "RequestBodyTooLarge"
                ) =>
            {
                PgError::new("54000", m).hint(
                    "a String or Binary value holds at most 64 KiB (a string at most 32K UTF-16 \
                     characters), an entity at most 1 MiB (the Azurite emulator counts its \
                     request body's UTF-8 bytes), a transaction at most 4 MiB",
                )
            }
            StoreError::Remote { status: None, .. } => PgError::new("58000", m)
                .hint("the table service could not be reached; check the endpoint and the network"),
            StoreError::Remote { .. } => PgError::new("58000", m),
        }
    }
}

impl From<&CatalogError> for PgError {
    fn from(e: &CatalogError) -> Self {
        let m = e.to_string();
        match e {
            CatalogError::UnknownTable { .. } => PgError::new("42P01", m),
            CatalogError::TableExists { .. } => PgError::new("42P07", m),
            CatalogError::ChangedElsewhere { .. } => PgError::new("40001", m).hint(
                "another gateway sharing the account changed this table at the same moment; \
                 its change won: look at the table again, then retry",
            ),
            CatalogError::UnknownColumn { .. } => PgError::new("42703", m),
            CatalogError::DuplicateColumn { .. } => PgError::new("42701", m),
            CatalogError::UnsupportedType { hint, .. } => PgError::new("0A000", m).hint(*hint),
            CatalogError::InvalidKey { hint, .. } => PgError::new("42P16", m).hint(*hint),
            CatalogError::NullValue { hint, .. } => PgError::new("23502", m).hint(*hint),
            CatalogError::InvalidColumnName { .. } => PgError::new("42939", m),
            CatalogError::InvalidText { .. } => PgError::new("22P02", m),
            CatalogError::InvalidKeyValue { .. } => PgError::new("22008", m)
                .hint("a timestamp key lies between 1601-01-01 and 9999-12-31 UTC (the EDM range)"),
            CatalogError::IndexRowTooLong { .. } => PgError::new("54000", m).hint(
                "index only short values: the entry's RowKey holds every indexed value (text and bytea as hex) and the base RowKey",
            ),
            CatalogError::ReservedRowKey { .. } => PgError::new("22023", m),
            CatalogError::UnknownIndex { .. } => PgError::new("42704", m),
            CatalogError::IndexExists { .. } => PgError::new("42P07", m),
            CatalogError::InvalidIndex { hint, .. } => PgError::new("0A000", m).hint(*hint),
            CatalogError::Corrupt(_) => PgError::new("XX001", m),
            CatalogError::Store(s) => PgError::from(s),
        }
    }
}

impl From<&PlanError> for PgError {
    fn from(e: &PlanError) -> Self {
        let m = e.to_string();
        match e {
            PlanError::Syntax { position, .. } => PgError::new("42601", m).at(*position),
            PlanError::UnknownTable { position, .. } => PgError::new("42P01", m).at(*position),
            PlanError::UnknownColumn { position, hint, .. } => {
                let e = PgError::new("42703", m).at(*position);
                match hint {
                    Some(h) => e.hint(h.clone()),
                    None => e,
                }
            }
            PlanError::TypeMismatch { hint, .. } => PgError::new("42883", m).hint(hint.clone()),
            PlanError::InvalidValue(_) => PgError::new("22P02", m),
            PlanError::DuplicateKey { key, .. } => {
                PgError::new("23505", m).detail(format!("Key {key} already exists."))
            }
            PlanError::UniqueViolation { key, .. } => PgError::new("23505", m)
                .detail(format!("Key {key} already exists."))
                .hint("a local UNIQUE index is unique within each PartitionKey"),
            PlanError::UniqueIndexBuild { key, .. } => PgError::new("23505", m)
                .detail(format!("Key {key} is duplicated."))
                .hint("a local UNIQUE index is unique within each PartitionKey: remove the duplicates first"),
            PlanError::GeneratedAlways { column } => PgError::new("428C9", m)
                .detail(format!(
                    "Column \"{column}\" is an identity column defined as GENERATED ALWAYS."
                ))
                .hint("leave the column out of the INSERT (or write DEFAULT): its value is generated"),
            PlanError::InvalidParameter(_) => PgError::new("22023", m),
            PlanError::Unsupported { hint, .. } => PgError::new("0A000", m).hint(hint.clone()),
            PlanError::NeedsAnalytics { .. } => PgError::new("0A000", m).hint(
                "SELECT queries run in the analytics engine, but this statement form (INSERT ... SELECT, UPDATE or DELETE conditions) runs only on the native path: use key conditions and filters the store evaluates, or read first and write the results",
            ),
            PlanError::FullScanRefused { hint, .. } => PgError::new(FULL_SCAN_REFUSED, m).hint(hint.clone()),
            PlanError::TooComplex { too_long, .. } => PgError::new(if *too_long { "54000" } else { "54001" }, m)
                .hint("split the statement, or use IN (...) lists instead of long OR chains"),
            PlanError::NoSuchParameter { .. } => PgError::new("42P02", m)
                .hint(format!("parameters are numbered $1 to ${}", tablegate_planner::MAX_PARAMETER)),
            PlanError::ReadOnlyColumn { column } => PgError::new("428C9", m).detail(format!(
                "\"{column}\" is a system column the store sets on every write"
            )),
            PlanError::DatatypeMismatch(_) => PgError::new("42804", m)
                .hint("give a value of the column's type, or cast it"),
            PlanError::OutOfRange(_) => PgError::new("22003", m),
            PlanError::DivisionByZero => PgError::new("22012", m),
            PlanError::Cardinality(_) => PgError::new("21000", m)
                .hint("ensure that no rows proposed for insertion within the same command have duplicate keys"),
            PlanError::NoSuchSavepoint(_) => PgError::new("3B001", m),
            PlanError::Busy(_) => PgError::new("53000", m)
                .hint("try again in a moment; large statements are parsed a few at a time"),
            PlanError::TooManySavepoints(_) => PgError::new("54000", m)
                .hint("RELEASE savepoints no longer needed"),
            PlanError::TransactionRule { rule, .. } => match rule {
                TxnRule::OnePartition => PgError::new("0A000", m).hint(
                    "a transaction is one entity-group transaction: every write shares the first write's table and PartitionKey; COMMIT, then write the other partition",
                ),
                TxnRule::MaxEntities | TxnRule::MaxBytes => PgError::new("54000", m).hint(
                    "a transaction is one entity-group transaction: at most 100 distinct entities and 4 MiB; split the work into several transactions",
                ),
            },
            PlanError::CommitConflict { detail } => PgError::new("40001", m)
                .detail(format!("{detail} Nothing was applied."))
                .hint("run the transaction again"),
            PlanError::PartlyApplied { rows, groups, source } => {
                let inner = PgError::from(&**source);
                let applied = format!(
                    "{rows} row(s) in {groups} earlier entity-group transaction(s) were applied and stay applied; the failing group and the rest were not."
                );
                let detail = match &inner.detail {
                    Some(d) => format!("{d} {applied}"),
                    None => applied,
                };
                PgError { detail: Some(detail), ..inner }
            }
            PlanError::Catalog(c) => PgError::from(c),
            PlanError::Store(s) => PgError::from(s),
        }
    }
}

#[cfg(feature = "analytics")]
impl From<&datafusion::common::DataFusionError> for PgError {
    fn from(e: &datafusion::common::DataFusionError) -> Self {
        use datafusion::common::DataFusionError as D;
        match e {
            // The store's and planner's own errors, raised inside a scan.
            D::External(inner) => external(&**inner),
            D::ArrowError(a, _) => match &**a {
                arrow_schema::ArrowError::ExternalError(inner) => external(&**inner),
                // Arrow says which operation ("Overflow happened on: 1 + 2").
                arrow_schema::ArrowError::ArithmeticOverflow(m) => {
                    PgError::new("22003", "integer out of range").detail(m.trim().to_owned())
                }
                // A value cast to an integer type too narrow for it.
                arrow_schema::ArrowError::CastError(m) if m.starts_with("Can't cast value") => {
                    let message = match m.rsplit(' ').next() {
                        Some("Int16") => "smallint out of range",
                        Some("Int32") => "integer out of range",
                        Some("Int64") => "bigint out of range",
                        _ => "value out of range",
                    };
                    PgError::new("22003", message).detail(m.trim().to_owned())
                }
                other => PgError::new(arrow_code(other), e.strip_backtrace()),
            },
            D::Context(_, inner) | D::Diagnostic(_, inner) => PgError::from(&**inner),
            D::Shared(inner) => PgError::from(&**inner),
            D::SQL(p, _) => PgError::new("42601", format!("syntax error: {p}")),
            D::NotImplemented(m) => PgError::new("0A000", format!("not supported: {m}"))
                .hint("the analytics engine does not run this construct"),
            D::ResourcesExhausted(m) => PgError::new("53200", format!("out of memory: {m}"))
                .hint("the analytics engine's memory (engine_memory_mb, shared by all sessions) was reached: narrow the query or aggregate less data"),
            D::SchemaError(schema, _) => {
                use datafusion::common::SchemaError as S;
                match &**schema {
                    S::FieldNotFound { field, .. } => {
                        let err =
                            PgError::new("42703", format!("column {} does not exist", column(field)));
                        match suggestion(&e.strip_backtrace()) {
                            Some(s) => err.hint(format!(
                                "Perhaps you meant to reference the column \"{s}\"."
                            )),
                            None => err,
                        }
                    }
                    S::AmbiguousReference { field } => PgError::new(
                        "42702",
                        format!("column reference \"{}\" is ambiguous", field.name),
                    ),
                    S::DuplicateQualifiedField { qualifier, name } => PgError::new(
                        "42701",
                        format!("column \"{name}\" specified more than once in {qualifier}"),
                    ),
                    S::DuplicateUnqualifiedField { name } => PgError::new(
                        "42701",
                        format!("column \"{name}\" specified more than once"),
                    ),
                }
            }
            // DataFusion says these only in text (a `Plan` or `Execution`
            // string, no variant of their own); PostgreSQL's words.
            D::Plan(m) | D::Execution(m) => {
                let lower = m.to_ascii_lowercase();
                if lower.contains("scalar subquery returned more than one row") {
                    return PgError::new(
                        "21000",
                        "more than one row returned by a subquery used as an expression",
                    );
                }
                if lower.contains("correlated scalar subquery must be aggregated") {
                    return PgError::new(
                        "0A000",
                        "not supported: a correlated subquery in an expression that is not an aggregate",
                    )
                    .hint("aggregate it (max(), min(), count(), …) so it returns one row per outer row, or write it as a LEFT JOIN");
                }
                // An unknown table or function in PostgreSQL's words.
                if let Some(table) = m
                    .strip_prefix("table '")
                    .and_then(|t| t.strip_suffix("' not found"))
                {
                    let name = table.rsplit('.').next().unwrap_or(table);
                    return PgError::new("42P01", format!("relation \"{name}\" does not exist"));
                }
                if let Some(rest) = m.strip_prefix("Invalid function '")
                    && let Some((name, _)) = rest.split_once('\'')
                {
                    // DataFusion always suggests its nearest name, however
                    // far; PostgreSQL's hint does not guess.
                    return PgError::new("42883", format!("function {name}() does not exist"))
                        .hint("No function matches the given name. You might need to add explicit type casts.");
                }
                if let Some(e) = no_such_function(m) {
                    return e;
                }
                let code = if lower.contains("table") && lower.contains("not found") {
                    "42P01"
                } else if lower.contains("divide by zero") || lower.contains("division by zero") {
                    "22012"
                } else if lower.contains("overflow") {
                    "22003"
                } else if lower.contains("cast")
                    || lower.contains("cannot parse")
                    || lower.contains("invalid") && lower.contains("value")
                {
                    "22P02"
                } else if matches!(e, D::Plan(_)) {
                    if lower.contains("function") { "42883" } else { "42601" }
                } else {
                    "XX000"
                };
                // The message without DataFusion's "Error during planning: "
                // or "Execution error: ".
                PgError::new(code, m.trim_end())
            }
            other => PgError::new("XX000", other.strip_backtrace()),
        }
    }
}

/// DataFusion's refusal of a call or an operator for its argument types, in
/// PostgreSQL's words (42883), the types named as PostgreSQL names them:
/// `function left(bigint, text) does not exist`, `operator does not exist:
/// integer + text`.
#[cfg(feature = "analytics")]
fn no_such_function(m: &str) -> Option<PgError> {
    let pg = |t: &str| {
        t.trim()
            .parse::<arrow_schema::DataType>()
            .map(|t| crate::analytics::functions::pg_type_name(&t))
            .unwrap_or_else(|_| t.trim().to_owned())
    };
    const MARK: &str = "No function matches the given name and argument types '";
    if let Some(at) = m.find(MARK) {
        let call = &m[at + MARK.len()..];
        let call = &call[..call.find('\'')?];
        let (name, args) = call.split_once('(')?;
        let args = &args[..args.rfind(')')?];
        // Split at the commas outside parentheses: `Decimal128(10, 2)`.
        let (mut depth, mut start, mut types) = (0, 0, Vec::new());
        for (i, c) in args.char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                ',' if depth == 0 => {
                    types.push(pg(&args[start..i]));
                    start = i + 1;
                }
                _ => {}
            }
        }
        if !args.trim().is_empty() {
            types.push(pg(&args[start..]));
        }
        return Some(
            PgError::new(
                "42883",
                format!("function {name}({}) does not exist", types.join(", ")),
            )
            .hint("No function matches the given name and argument types. You might need to add explicit type casts."),
        );
    }
    let expr = m
        .strip_prefix("Cannot coerce arithmetic expression ")?
        .strip_suffix(" to valid types")?;
    let (left, op, right) = ["+", "-", "*", "/", "%"].iter().find_map(|op| {
        expr.split_once(&format!(" {op} "))
            .map(|(l, r)| (l, *op, r))
    })?;
    Some(
        PgError::new(
            "42883",
            format!("operator does not exist: {} {op} {}", pg(left), pg(right)),
        )
        .hint("No operator matches the given name and argument types. You might need to add explicit type casts."),
    )
}

/// A column as PostgreSQL's 42703 names it: `"c"` alone, `t.c` qualified.
#[cfg(feature = "analytics")]
fn column(c: &datafusion::common::Column) -> String {
    match &c.relation {
        Some(r) => format!("{}.{}", r.table(), c.name),
        None => format!("\"{}\"", c.name),
    }
}

/// What DataFusion's message suggests (`Did you mean 'o.qty'?`), unquoted.
#[cfg(feature = "analytics")]
fn suggestion(message: &str) -> Option<String> {
    let (_, rest) = message.split_once("Did you mean '")?;
    let (name, _) = rest.split_once("'?")?;
    Some(name.replace('"', ""))
}

/// An error the engine carried from our own code (a scan's store or
/// planner error), or another library's.
#[cfg(feature = "analytics")]
fn external(inner: &(dyn std::error::Error + Send + Sync + 'static)) -> PgError {
    if let Some(p) = inner.downcast_ref::<PlanError>() {
        return PgError::from(p);
    }
    if let Some(s) = inner.downcast_ref::<StoreError>() {
        return PgError::from(s);
    }
    if let Some(p) = inner.downcast_ref::<PgError>() {
        return p.clone();
    }
    if let Some(d) = inner.downcast_ref::<datafusion::common::DataFusionError>() {
        return PgError::from(d);
    }
    PgError::new("XX000", inner.to_string())
}

/// The SQLSTATE of an Arrow kernel's error, by its variant. A cast that
/// overflows is a `CastError` whose text says so (Arrow has no variant).
#[cfg(feature = "analytics")]
fn arrow_code(e: &arrow_schema::ArrowError) -> &'static str {
    use arrow_schema::ArrowError as A;
    match e {
        A::DivideByZero => "22012",
        A::ArithmeticOverflow(_) => "22003",
        A::CastError(m) if m.to_ascii_lowercase().contains("overflow") => "22003",
        A::CastError(_) | A::ParseError(_) => "22P02",
        A::MemoryError(_) => "53200",
        _ => "XX000",
    }
}

/// Turns a PgError into pgwire's error.
pub fn wire_error(e: PgError) -> PgWireError {
    PgWireError::UserError(Box::new(error_info(e)))
}

impl PgError {
    /// An error that already went out as pgwire's ErrorInfo, back as a
    /// PgError (for results that leave the PostgreSQL protocol: Flight
    /// SQL). Its code keeps the SQLSTATE given where it was made.
    pub fn from_info(info: ErrorInfo) -> Self {
        PgError {
            code: interned_code(&info.code),
            message: info.message,
            detail: info.detail,
            hint: info.hint,
            position: info.position.and_then(|p| p.parse().ok()),
        }
    }

    /// A pgwire error as a PgError: a user error keeps its SQLSTATE,
    /// anything else is XX000.
    pub fn from_wire(e: &PgWireError) -> Self {
        match e {
            PgWireError::UserError(info) => {
                let mut copy = ErrorInfo::new(
                    info.severity.clone(),
                    info.code.clone(),
                    info.message.clone(),
                );
                copy.detail.clone_from(&info.detail);
                copy.hint.clone_from(&info.hint);
                copy.position.clone_from(&info.position);
                PgError::from_info(copy)
            }
            other => PgError::internal(other),
        }
    }
}

/// A SQLSTATE as `&'static str`: each distinct code is leaked once (they
/// are five characters from a small set).
fn interned_code(code: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{LazyLock, Mutex};
    static CODES: LazyLock<Mutex<HashSet<&'static str>>> = LazyLock::new(Default::default);
    let mut codes = CODES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(c) = codes.get(code) {
        return c;
    }
    let c: &'static str = Box::leak(code.to_owned().into_boxed_str());
    codes.insert(c);
    c
}

/// pgwire's ErrorInfo for a PgError.
pub fn error_info(e: PgError) -> ErrorInfo {
    let mut info = ErrorInfo::new("ERROR".to_owned(), e.code.to_owned(), e.message);
    info.detail = e.detail;
    info.hint = e.hint;
    info.position = e.position.map(|p| p.to_string());
    info
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The SQLSTATE table, row by row.
    #[test]
    fn the_spec_table() {
        let syntax = PlanError::Syntax {
            message: "x".into(),
            position: Some(8),
        };
        assert_eq!(PgError::from(&syntax).code, "42601");
        assert_eq!(PgError::from(&syntax).position, Some(8));
        let unknown_table = PlanError::UnknownTable {
            name: "t".into(),
            position: None,
        };
        assert_eq!(PgError::from(&unknown_table).code, "42P01");
        let unknown_col = PlanError::UnknownColumn {
            name: "c".into(),
            position: Some(3),
            hint: None,
        };
        assert_eq!(PgError::from(&unknown_col).code, "42703");
        let dup = StoreError::EntityAlreadyExists {
            partition_key: "p".into(),
            row_key: "r".into(),
        };
        let e = PgError::from(&dup);
        assert_eq!(e.code, "23505");
        assert!(e.detail.unwrap().contains("(p, r)"));
        let etag = StoreError::ETagMismatch {
            partition_key: "p".into(),
            row_key: "r".into(),
            expected: "a".into(),
            actual: "b".into(),
        };
        assert_eq!(PgError::from(&etag).code, "40001");
        let busy = StoreError::ServerBusy {
            reason: "r".into(),
            scope: "partition \"p\" of table t".into(),
            target_per_sec: Some(2000),
            retry_after: Duration::from_millis(300),
        };
        let e = PgError::from(&busy);
        assert_eq!(e.code, "53000");
        assert!(e.detail.as_deref().unwrap().contains("2000"));
        assert!(e.hint.as_deref().unwrap().contains("back off"));
        let many = StoreError::BatchOperationFailed {
            index: 100,
            source: Box::new(StoreError::BatchTooManyOperations {
                count: 101,
                limit: 100,
            }),
        };
        assert_eq!(PgError::from(&many).code, "54000");
        let cross = StoreError::BatchCrossPartition {
            index: 1,
            expected: "a".into(),
            found: "b".into(),
        };
        assert_eq!(PgError::from(&cross).code, "0A000");
        let bad_key = StoreError::ForbiddenKeyCharacter {
            kind: tablegate_store::KeyKind::PartitionKey,
            ch: '/',
            position: 0,
        };
        assert_eq!(PgError::from(&bad_key).code, "22023");
        let bad_value = CatalogError::InvalidText {
            ty: "integer",
            text: "x".into(),
        };
        assert_eq!(PgError::from(&bad_value).code, "22P02");
        assert_eq!(PgError::aborted().code, "25P02");
        let refused = PlanError::FullScanRefused {
            table: "t".into(),
            hint: "add a key".into(),
        };
        let e = PgError::from(&refused);
        assert_eq!(e.code, FULL_SCAN_REFUSED);
        assert!(e.hint.is_some());
        assert_eq!(PgError::cancelled(true).code, "57014");
        // Transactions: the EGT rules, and conflicts at COMMIT.
        let cross = PlanError::TransactionRule {
            rule: TxnRule::OnePartition,
            message: "x".into(),
        };
        assert_eq!(PgError::from(&cross).code, "0A000");
        let many = PlanError::TransactionRule {
            rule: TxnRule::MaxEntities,
            message: "x".into(),
        };
        assert_eq!(PgError::from(&many).code, "54000");
        let conflict = PlanError::CommitConflict {
            detail: "d.".into(),
        };
        let e = PgError::from(&conflict);
        assert_eq!(e.code, "40001");
        assert!(e.detail.unwrap().contains("Nothing was applied"));
        // A statement that failed after some EGTs keeps the failure's code
        // and says what stayed applied.
        let partly = PlanError::PartlyApplied {
            rows: 100,
            groups: 1,
            source: Box::new(PlanError::Store(StoreError::ServerBusy {
                reason: "r".into(),
                scope: "partition \"p\"".into(),
                target_per_sec: Some(2000),
                retry_after: Duration::from_millis(5),
            })),
        };
        let e = PgError::from(&partly);
        assert_eq!(e.code, "53000");
        assert!(e.detail.unwrap().contains("100 row(s) in 1 earlier"));
        assert_eq!(PgError::from(&PlanError::DivisionByZero).code, "22012");
        assert_eq!(
            PgError::from(&PlanError::ReadOnlyColumn {
                column: "etag".into()
            })
            .code,
            "428C9"
        );
        // Wrapped errors keep the inner code and name the operation.
        let wrapped = StoreError::BatchOperationFailed {
            index: 3,
            source: Box::new(dup),
        };
        let e = PgError::from(&wrapped);
        assert_eq!(e.code, "23505");
        assert!(e.detail.unwrap().contains("operation 3"));
    }
}
