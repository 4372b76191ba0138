//! Authentication: SCRAM-SHA-256 against stored verifiers, or trust.
//!
//! Users live in the store's system table `tgsys_users` as SCRAM
//! verifiers — salt, iteration count, StoredKey and ServerKey — never as
//! passwords or salted passwords: a stolen data directory does not let
//! anyone log in. Trust is only allowed on loopback addresses (the server
//! refuses to bind otherwise).

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use parking_lot::Mutex;
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::{ScramAuth, ScramSecret, gen_salted_password, random_nonce};
use pgwire::api::auth::{
    AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler,
};
use pgwire::api::{ClientInfo, PgWireConnectionState};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::startup::PasswordMessageFamily;
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};
use tablegate_store::{
    EntityWrite, KeyBox, Operation, PageRequest, Query, StoreError, TableStore, Value,
};

use crate::cancel::{CancelRegistry, CancelSignal};
use crate::sqlstate::PgError;

/// The system table holding user verifiers.
pub const USERS_TABLE: &str = "tgsys_users";
const USERS_PARTITION: &str = "users";
/// PBKDF2 iterations for new verifiers (PostgreSQL's default).
pub const SCRAM_ITERATIONS: usize = 4096;

/// How clients authenticate.
#[derive(Debug, Clone)]
pub enum AuthMode {
    /// No password (loopback only).
    Trust,
    /// SCRAM-SHA-256 against the stored verifiers.
    Scram(Arc<UserStore>),
}

impl AuthMode {
    /// Refuses to serve `what` (a protocol) on `addr` with trust unless
    /// the address is loopback.
    pub fn check_address(&self, addr: std::net::SocketAddr, what: &str) -> std::io::Result<()> {
        if matches!(self, AuthMode::Trust) && !addr.ip().is_loopback() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "refusing to {what} on {addr} with trust authentication: trust is allowed on loopback addresses only (use --auth scram)"
                ),
            ));
        }
        Ok(())
    }

    /// Checks a password against the user's stored SCRAM verifier, for
    /// protocols that receive it in the clear over TLS (Flight SQL's Basic
    /// handshake, the console's HTTP Basic authentication). Any user
    /// passes under trust; an unknown user fails like a wrong password
    /// (28P01).
    pub async fn check_password(&self, user: &str, password: &str) -> Result<(), PgError> {
        let AuthMode::Scram(users) = self else {
            return Ok(());
        };
        let denied = || {
            PgError::invalid_password(format!(
                "password authentication failed for user \"{user}\""
            ))
        };
        let verifier = UserStore::verifier(users, user)
            .await
            .map_err(|e| PgError::from(&e))?;
        let Some(ScramSecret::Verifier {
            salt,
            iterations,
            stored_key,
            ..
        }) = verifier
        else {
            return Err(denied());
        };
        let salted = gen_salted_password(password, &salt, iterations);
        let ScramSecret::Verifier {
            stored_key: got, ..
        } = ScramSecret::verifier_from_salted_password(salt, salted, iterations)
        else {
            return Err(denied());
        };
        // Compared in constant time.
        let same = got.len() == stored_key.len()
            && got
                .iter()
                .zip(&stored_key)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        if same { Ok(()) } else { Err(denied()) }
    }
}

/// Users and their SCRAM verifiers, in the store.
#[derive(Debug, Clone)]
pub struct UserStore {
    system: Arc<dyn TableStore>,
}

fn bytes(v: Option<&Value>) -> Option<Vec<u8>> {
    match v {
        Some(Value::Binary(b)) => Some(b.clone()),
        _ => None,
    }
}

impl UserStore {
    /// Opens (creating if needed) the users table in `system`.
    pub async fn open(system: Arc<dyn TableStore>) -> Result<UserStore, StoreError> {
        match system.create_table(USERS_TABLE).await {
            Ok(_) | Err(StoreError::TableExists { .. }) => {}
            Err(e) => return Err(e),
        }
        Ok(UserStore { system })
    }

    /// The users already in `system`, without creating their table (a
    /// server in trust mode has none).
    pub fn existing(system: Arc<dyn TableStore>) -> UserStore {
        UserStore { system }
    }

    /// Every user with a verifier, in name order.
    pub async fn names(&self) -> Result<Vec<String>, StoreError> {
        let query = Query::spans(vec![KeyBox::partition(USERS_PARTITION)]);
        let mut page = PageRequest::default();
        let mut names = Vec::new();
        loop {
            let p = match self.system.query(USERS_TABLE, &query, &page).await {
                Ok(p) => p,
                Err(StoreError::TableNotFound { .. }) => return Ok(names),
                Err(e) => return Err(e),
            };
            names.extend(p.entities.into_iter().map(|e| e.row_key));
            match p.continuation {
                Some(c) => page.continuation = Some(c),
                None => return Ok(names),
            }
        }
    }

    /// Creates or replaces a user's verifier from a password (which is
    /// then forgotten).
    pub async fn set_password(&self, user: &str, password: &str) -> Result<(), StoreError> {
        let salt = random_nonce().into_bytes();
        let salted = gen_salted_password(password, &salt, SCRAM_ITERATIONS);
        let ScramSecret::Verifier {
            salt,
            iterations,
            stored_key,
            server_key,
        } = ScramSecret::verifier_from_salted_password(salt, salted, SCRAM_ITERATIONS)
        else {
            unreachable!("verifier_from_salted_password returns a verifier");
        };
        let w = EntityWrite::new(USERS_PARTITION, user)
            .with("salt", Value::Binary(salt))
            .with("iterations", Value::Int32(iterations as i32))
            .with("stored_key", Value::Binary(stored_key))
            .with("server_key", Value::Binary(server_key));
        self.system
            .execute(USERS_TABLE, vec![Operation::InsertOrReplace(w)].into())
            .await?;
        Ok(())
    }

    /// A user's verifier, if the user exists.
    pub async fn verifier(&self, user: &str) -> Result<Option<ScramSecret>, StoreError> {
        let Some(e) = self.system.get(USERS_TABLE, USERS_PARTITION, user).await? else {
            return Ok(None);
        };
        let p = &e.properties;
        match (
            bytes(p.get("salt")),
            p.get("iterations"),
            bytes(p.get("stored_key")),
            bytes(p.get("server_key")),
        ) {
            (Some(salt), Some(Value::Int32(it)), Some(stored_key), Some(server_key)) => {
                Ok(Some(ScramSecret::Verifier {
                    salt,
                    iterations: *it as usize,
                    stored_key,
                    server_key,
                }))
            }
            _ => Err(StoreError::Corrupt(format!(
                "verifier of user {user:?} is incomplete"
            ))),
        }
    }
}

#[async_trait]
impl AuthSource for UserStore {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        // Only SCRAM is offered; there is no password to give.
        Err(PgWireError::InvalidPassword(
            login.user().unwrap_or_default().to_owned(),
        ))
    }

    async fn get_scram_secret(&self, login: &LoginInfo) -> PgWireResult<(ScramSecret, Option<()>)> {
        let user = login.user().unwrap_or_default().to_owned();
        match self.verifier(&user).await {
            Ok(Some(v)) => Ok((v, None)),
            // Unknown users fail exactly like wrong passwords (28P01), so
            // the error does not reveal which users exist.
            Ok(None) => Err(PgWireError::InvalidPassword(user)),
            Err(e) => Err(PgWireError::ApiError(Box::new(e))),
        }
    }
}

/// SCRAM startup that, once the client is authenticated, makes the session
/// reachable by cancel requests.
pub struct ScramStartup {
    inner: SASLAuthStartupHandler<DefaultServerParameterProvider>,
    registry: Arc<CancelRegistry>,
    cancel: Arc<CancelSignal>,
    pid: Arc<Mutex<Option<i32>>>,
    /// The client's first password-family message (SASLInitialResponse)
    /// has been read.
    initial_read: std::sync::atomic::AtomicBool,
}

impl Debug for ScramStartup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramStartup").finish_non_exhaustive()
    }
}

/// The parameters reported at startup (ParameterStatus), as PostgreSQL 15
/// reports them: drivers read `server_version` to pick features
/// (SQLAlchemy parses it), so it agrees with `SHOW server_version`.
pub fn server_parameters() -> DefaultServerParameterProvider {
    let mut params = DefaultServerParameterProvider::default();
    params.server_version = crate::settings::SERVER_VERSION.to_owned();
    params.scram_iterations = SCRAM_ITERATIONS;
    params
}

impl ScramStartup {
    /// A SCRAM handler over `users` for one connection.
    pub fn new(
        users: Arc<UserStore>,
        registry: Arc<CancelRegistry>,
        cancel: Arc<CancelSignal>,
        pid: Arc<Mutex<Option<i32>>>,
    ) -> Self {
        let inner = SASLAuthStartupHandler::new(Arc::new(server_parameters()))
            .with_scram(ScramAuth::new(users))
            .with_pid_secret_key_generator(crate::cancel::shared_pid_generator());
        ScramStartup {
            inner,
            registry,
            cancel,
            pid,
            initial_read: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

#[async_trait]
impl StartupHandler for ScramStartup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        // pgwire reads a SASLInitialResponse's lengths as they come (a
        // short or lying one would panic the connection's thread): its
        // layout is checked here, where the message is known to be one.
        if let PgWireFrontendMessage::PasswordMessageFamily(PasswordMessageFamily::Raw(body)) =
            &message
            && !self
                .initial_read
                .swap(true, std::sync::atomic::Ordering::Relaxed)
            && !sasl_initial_response_is_well_formed(body)
        {
            let mut info = crate::sqlstate::error_info(
                crate::sqlstate::PgError::protocol_violation("invalid message format"),
            );
            info.severity = "FATAL".to_owned();
            return Err(PgWireError::UserError(Box::new(info)));
        }
        if let Err(e) = self.inner.on_startup(client, message).await {
            // Failed logins are an operator's business (brute force, a
            // stale password in a pool); the password never reaches here.
            tracing::warn!(
                user = client.metadata().get("user").map_or("", String::as_str),
                peer = %client.socket_addr(),
                reason = %e,
                "authentication failed"
            );
            return Err(e);
        }
        if matches!(client.state(), PgWireConnectionState::ReadyForQuery)
            && self.pid.lock().is_none()
        {
            let (pid, secret) = client.pid_and_secret_key();
            self.registry.register(pid, secret, self.cancel.clone());
            *self.pid.lock() = Some(pid);
        }
        Ok(())
    }
}

/// A SASLInitialResponse body: the mechanism's name (a C string), then the
/// initial response's length (-1 for none) and exactly that many bytes.
fn sasl_initial_response_is_well_formed(body: &[u8]) -> bool {
    let Some(nul) = body.iter().position(|&b| b == 0) else {
        return false;
    };
    let rest = &body[nul + 1..];
    let Some((len, data)) = rest.split_first_chunk::<4>() else {
        return false;
    };
    match i32::from_be_bytes(*len) {
        -1 => data.is_empty(),
        n => usize::try_from(n).is_ok_and(|n| n == data.len()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_sasl_initial_response_must_hold_what_it_claims() {
        use super::sasl_initial_response_is_well_formed as ok;
        assert!(ok(b"SCRAM-SHA-256\0\0\0\0\x03abc"));
        assert!(ok(b"SCRAM-SHA-256\0\xff\xff\xff\xff"));
        assert!(!ok(b"SCRAM-SHA-256\0\0\0\0\x09abc"));
        assert!(!ok(b"SCRAM-SHA-256\0\0\0"));
        assert!(!ok(b"SCRAM-SHA-256"));
        assert!(!ok(b"SCRAM-SHA-256\0\xff\xff\xff\xfeab"));
    }
}
