//! The backend's own errors. Everything the planner sees is a
//! [`StoreError`]; this enum covers what happens before or around a
//! request (a bad connection string, an unreadable response) and converts
//! into [`StoreError::Remote`] at the trait boundary. Service error codes are
//! mapped to meaning-based store errors in one place, `http::service_error`.

use tablegate_store::StoreError;

/// Errors of the Azure backend.
#[derive(Debug, thiserror::Error)]
pub enum AzureError {
    /// The connection string cannot be used.
    #[error("invalid connection string: {reason}")]
    ConnectionString {
        /// What is wrong.
        reason: String,
    },
    /// The service could not be reached (DNS, TCP, TLS, a dropped connection).
    #[error("cannot reach {endpoint}: {reason}")]
    Unreachable {
        /// The endpoint.
        endpoint: String,
        /// The transport's story.
        reason: String,
    },
    /// The connection broke, or the answer did not come in time, after the
    /// request was sent: the service may or may not have applied it. Reads
    /// retry it; writes first check what the service holds (see
    /// `AzureStore::settle`).
    #[error("the connection to {endpoint} broke before the answer came: {reason}")]
    Interrupted {
        /// The endpoint.
        endpoint: String,
        /// The transport's story.
        reason: String,
    },
    /// A response arrived that this client cannot read.
    #[error("unexpected response from the table service: {0}")]
    BadResponse(String),
}

/// Results of the Azure backend.
pub type Result<T, E = AzureError> = std::result::Result<T, E>;

impl From<AzureError> for StoreError {
    fn from(e: AzureError) -> Self {
        let code = match &e {
            // Retryable: the retry policy backs off and sends it again.
            AzureError::Interrupted { .. } => {
                return StoreError::ServerBusy {
                    reason: format!("{e}; retry"),
                    scope: "the table service".to_owned(),
                    target_per_sec: None,
                    retry_after: std::time::Duration::ZERO,
                };
            }
            AzureError::ConnectionString { .. } => "InvalidConnectionString",
            AzureError::Unreachable { .. } => "Unreachable",
            AzureError::BadResponse(_) => "BadResponse",
        };
        StoreError::Remote {
            status: None,
            code: code.to_owned(),
            message: e.to_string(),
        }
    }
}
