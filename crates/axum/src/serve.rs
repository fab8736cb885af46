//! Serving the router over HTTP/1.1 so that slow clients cannot hold the
//! service: a request head must arrive within a timeout, and open
//! connections are capped.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::{Extension, Router};
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::Layer;

/// How long a client has to send a whole request head by default.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How many connections are open at most by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 1_024;

/// How long a slow accept error (such as too many open files) waits before
/// the next accept.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// What one client may hold of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// How long a connection may take to send a request head, counted from
    /// its start or from the end of its previous response; past it the
    /// connection is closed. Idle keep-alive connections end after it too.
    pub header_timeout: Duration,
    /// How many connections are open at most (at least 1). When all are in
    /// use the server stops accepting until one ends: a new client waits in
    /// the listen backlog and is not dropped.
    pub max_connections: usize,
}

impl Default for Limits {
    /// [`DEFAULT_HEADER_TIMEOUT`] and [`DEFAULT_MAX_CONNECTIONS`].
    fn default() -> Limits {
        Limits {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Serves `router` on `listener` with the default [`Limits`], each
/// connection's peer address known to the visitor source, until `shutdown`
/// completes and open connections end.
///
/// # Errors
///
/// None today: a failed accept is logged and retried.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    serve_with(listener, router, Limits::default(), shutdown).await
}

/// Serves `router` on `listener` within `limits`, each connection's peer
/// address known to the visitor source (as `ConnectInfo<SocketAddr>`), until
/// `shutdown` completes and open connections end.
///
/// # Errors
///
/// None today: a failed accept is logged and retried.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout);
    let slots = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(slots));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.map_err(io::Error::other)?,
            () = &mut shutdown => break,
        };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(err) if is_connection_error(&err) => continue,
            Err(err) => {
                tracing::error!(error = %err, "accepting a connection failed; retrying in 1 s");
                tokio::select! {
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        let service = TowerToHyperService::new(connect_info(peer).layer(router.clone()));
        let connection = graceful.watch(http.serve_connection(TokioIo::new(stream), service));
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(%peer, error = %err, "connection closed on an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// The layer giving requests their connection's peer address, as
/// `into_make_service_with_connect_info::<SocketAddr>()` does.
fn connect_info(peer: SocketAddr) -> Extension<ConnectInfo<SocketAddr>> {
    Extension(ConnectInfo(peer))
}

/// Whether an accept error concerns only the one connection.
fn is_connection_error(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}
