//! Connection startup: the TLS requirement, trust or SCRAM
//! authentication, and the session slot admission grants at its end.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use parking_lot::Mutex;
use pgwire::api::ClientInfo;
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;

use super::{ConnHandler, Session};
use crate::auth::ScramStartup;
use crate::sqlstate::{PgError, error_info};

/// The startup handler of a connection: trust or SCRAM, behind the TLS
/// requirement.
#[derive(Debug)]
pub struct Startup {
    pub(super) mode: StartupMode,
    pub(super) session: Arc<Session>,
    pub(super) tls_required: bool,
    pub(super) admission: Option<Arc<crate::admission::Admission>>,
    pub(super) slot: Arc<Mutex<Option<crate::admission::SessionSlot>>>,
}

/// How a connection authenticates.
#[derive(Debug)]
pub enum StartupMode {
    /// No password (loopback only).
    Trust(Arc<ConnHandler>),
    /// SCRAM-SHA-256.
    Scram(ScramStartup),
}

#[async_trait]
impl pgwire::api::auth::StartupHandler for Startup {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if self.tls_required && !client.is_secure() {
            let mut info = error_info(
                PgError::invalid_authorization_specification("this server requires TLS")
                    .hint("connect with sslmode=require"),
            );
            info.severity = "FATAL".to_owned();
            return Err(PgWireError::UserError(Box::new(info)));
        }
        if let pgwire::messages::PgWireFrontendMessage::Startup(s) = &message
            && let Some(user) = s.parameters.get(pgwire::api::METADATA_USER)
        {
            self.session.set_user(user);
        }
        let Some(admission) = &self.admission else {
            return match &self.mode {
                StartupMode::Trust(h) => h.on_startup(client, message).await,
                StartupMode::Scram(s) => s.on_startup(client, message).await,
            };
        };
        let mut gate = crate::admission::SlotGate {
            inner: client,
            admission,
            slot: &self.slot,
            refused: false,
        };
        match &self.mode {
            StartupMode::Trust(h) => h.on_startup(&mut gate, message).await?,
            StartupMode::Scram(s) => s.on_startup(&mut gate, message).await?,
        }
        if gate.refused {
            metrics::counter!("tablegate_connections_refused_total", "reason" => "max_connections")
                .increment(1);
            let mut info = error_info(
                PgError::too_many_connections("sorry, too many clients already")
                    .hint("the remaining connection slots are reserved for the server's operators (reserved_connections)"),
            );
            info.severity = "FATAL".to_owned();
            return Err(PgWireError::UserError(Box::new(info)));
        }
        Ok(())
    }
}

// Trust authentication; the server only accepts it on loopback. The
// session becomes reachable by cancel requests before ReadyForQuery.
#[async_trait]
impl pgwire::api::auth::StartupHandler for ConnHandler {
    async fn on_startup<C>(
        &self,
        client: &mut C,
        message: pgwire::messages::PgWireFrontendMessage,
    ) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let pgwire::messages::PgWireFrontendMessage::Startup(startup) = &message {
            pgwire::api::auth::protocol_negotiation(client, startup).await?;
            pgwire::api::auth::save_startup_parameters_to_metadata(client, startup);
            let (pid, secret) = crate::cancel::pid_generator().generate(client);
            client.set_pid_and_secret_key(pid, secret.clone());
            self.registry.register(pid, secret, self.cancel.clone());
            *self.pid.lock() = Some(pid);
            pgwire::api::auth::finish_authentication(client, &crate::auth::server_parameters())
                .await?;
        }
        Ok(())
    }
}
