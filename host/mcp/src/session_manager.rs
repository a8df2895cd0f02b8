//! rmcp's in-memory session manager, with every session's owner recorded in the
//! [`SessionTable`]: a session is bound to the reservation its `initialize` request carried
//! when rmcp creates it, and its place is given back whenever rmcp closes it — on the owner's
//! `DELETE`, when it stays idle past `--mcp-session-idle-ms` (rmcp's keep-alive), or when its
//! handler fails.
//!
//! The reservation travels with the request in a task-local ([`with_reservation`]): rmcp calls
//! `create_session` while it handles the request, in the same task, and gives the manager
//! nothing of the request. A session rmcp would create without one (no route of this crate does)
//! is refused.
//!
//! Restoring sessions from an external store is not offered: an id can only come from a session
//! this process created.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;

use futures::Stream;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::session::ServerSseMessage;
use rmcp::transport::streamable_http_server::{SessionId, SessionManager};
use rmcp::transport::WorkerTransport;

use crate::sessions::{Reservation, SessionTable};

tokio::task_local! {
    static RESERVATION: RefCell<Option<Reservation>>;
}

/// Run `request` (an `initialize`) with `reservation` for the session it may create.
pub async fn with_reservation<F: Future>(reservation: Reservation, request: F) -> F::Output {
    RESERVATION.scope(RefCell::new(Some(reservation)), request).await
}

/// Why a session could not be created or reached.
#[derive(Debug, thiserror::Error)]
pub enum BoundSessionError {
    /// rmcp's own session manager failed.
    #[error(transparent)]
    Local(#[from] LocalSessionManagerError),
    /// rmcp asked for a session outside [`with_reservation`]: a request that did not pass the
    /// session cap (a bug in the routes, refused rather than counted nowhere).
    #[error("agentrt MCP gateway: a session was to be created without a reserved place")]
    Unreserved,
}

/// One server's sessions.
pub struct BoundSessions {
    local: LocalSessionManager,
    table: Arc<SessionTable>,
}

impl BoundSessions {
    /// Sessions ended after `idle` without a message (rmcp's keep-alive).
    pub fn new(table: Arc<SessionTable>, idle: std::time::Duration) -> Self {
        let mut local = LocalSessionManager::default();
        local.session_config.keep_alive = Some(idle);
        Self { local, table }
    }
}

impl SessionManager for BoundSessions {
    type Error = BoundSessionError;
    type Transport = WorkerTransport<LocalSessionWorker>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let reservation = RESERVATION
            .try_with(|r| r.borrow_mut().take())
            .ok()
            .flatten()
            .ok_or(BoundSessionError::Unreserved)?;
        let (id, transport) = self.local.create_session().await?;
        reservation.bind(id.clone());
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        Ok(self.local.initialize_session(id, message).await?)
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        Ok(self.local.has_session(id).await?)
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        let closed = self.local.close_session(id).await;
        self.table.release(id);
        // A flood that went leaves a large, empty map behind; give its memory back.
        crate::sessions::shrink(&mut *self.local.sessions.write().await);
        Ok(closed?)
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.local.create_stream(id, message).await?)
    }

    async fn accept_message(&self, id: &SessionId, message: ClientJsonRpcMessage) -> Result<(), Self::Error> {
        Ok(self.local.accept_message(id, message).await?)
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.local.create_standalone_stream(id).await?)
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        Ok(self.local.resume(id, last_event_id).await?)
    }
}
