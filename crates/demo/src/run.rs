//! Starting the service: store, rules, router, listener.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tokio::net::TcpListener;
use tollgate::axum::Trust;
use tollgate::url::shown;
use tollgate::{Limiter, OpenError, RuleSet};

use crate::{Options, Settings, serve_with, services_with};

/// Why the service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// The store URL is unknown, not compiled in, or the store refused to open.
    #[error("invalid --store")]
    Store(#[source] OpenError),
    /// The rules file cannot be read.
    #[error("cannot read the rules file {}", path.display())]
    ReadRules {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The rules file is invalid, or lacks a rule the demo uses.
    #[error("invalid rules{}", path.as_ref().map(|p| format!(" in {}", p.display())).unwrap_or_default())]
    Rules {
        /// The file, if not the shipped defaults.
        path: Option<PathBuf>,
        /// What is wrong.
        #[source]
        source: tollgate::Error,
    },
    /// The trust setting is invalid.
    #[error("invalid --trust")]
    Trust(#[source] tollgate::axum::Error),
    /// The listen address cannot be bound.
    #[error("cannot listen on {addr}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The server failed while serving.
    #[error("the server failed")]
    Serve(#[source] io::Error),
}

/// Starts the service the options describe and serves until `shutdown` completes.
///
/// # Errors
///
/// A [`StartError`] saying which option is wrong, or that serving failed.
pub async fn run(
    options: Options,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let store = tollgate::open_store(&options.store).map_err(StartError::Store)?;
    let rules = match &options.rules {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|source| StartError::ReadRules {
                path: path.clone(),
                source,
            })?;
            RuleSet::from_toml(&text).map_err(|source| StartError::Rules {
                path: Some(path.clone()),
                source,
            })?
        }
        None => RuleSet::defaults(),
    };
    let visitors = options.visitors().map_err(StartError::Trust)?;
    if matches!(visitors.trust(), Trust::XForwardedFor(proxies) if proxies.is_empty()) {
        tracing::warn!(
            "--trust x-forwarded-for without --trusted-proxy: the peer address is the visitor"
        );
    }
    if options.github_secret.is_none() {
        tracing::warn!(
            "no --github-secret (GITHUB_WEBHOOK_SECRET): webhook deliveries are unverified; anyone can send one"
        );
    }
    let services = services_with(
        Limiter::new(store.clone()),
        store,
        &rules,
        visitors,
        Settings {
            github_secret: options.github_secret.clone(),
            provider_delay: Duration::from_millis(options.provider_delay_ms),
        },
    )
    .map_err(|source| StartError::Rules {
        path: options.rules.clone(),
        source,
    })?;
    let listener =
        TcpListener::bind(options.listen)
            .await
            .map_err(|source| StartError::Listen {
                addr: options.listen,
                source,
            })?;
    let addr = listener.local_addr().map_err(StartError::Serve)?;
    if let Some(metrics) = options.metrics_listen {
        let admin = TcpListener::bind(metrics)
            .await
            .map_err(|source| StartError::Listen {
                addr: metrics,
                source,
            })?;
        let admin_addr = admin.local_addr().map_err(StartError::Serve)?;
        tracing::info!("metrics on http://{admin_addr}/metrics");
        tokio::spawn(serve_with(
            admin,
            crate::metrics_router(),
            options.limits(),
            std::future::pending(),
        ));
    }
    // One signal stops both servers at once.
    let (stop, _) = tokio::sync::watch::channel(false);
    let grpc = match options.grpc_listen {
        Some(addr) => {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|source| StartError::Listen { addr, source })?;
            let grpc_addr = listener.local_addr().map_err(StartError::Serve)?;
            tracing::info!("gRPC tollgate.demo.v1.Ask on http://{grpc_addr}");
            let server = crate::grpc::serve(listener, services.grpc, stopping(&stop));
            Some(tokio::spawn(async move {
                if let Err(err) = server.await {
                    tracing::error!(error = %err, "the gRPC server failed");
                }
            }))
        }
        None => None,
    };
    // The store as every tollgate program names it: its scheme and host,
    // never its user information, path or query (nor a text that is not a
    // store URL).
    let store = shown(&options.store);
    tracing::info!(
        store = %store,
        trust = %options.trust,
        dev = options.dev,
        rules = rules.len(),
        header_timeout_secs = options.header_timeout,
        max_connections = options.max_connections,
        webhooks = if options.github_secret.is_some() { "signed" } else { "unverified" },
        "listening on http://{addr}"
    );
    let signal = stop.clone();
    tokio::spawn(async move {
        shutdown.await;
        signal.send_replace(true);
    });
    let served = serve_with(listener, services.http, options.limits(), stopping(&stop)).await;
    // The HTTP server has stopped (told to, or failed): so does the gRPC
    // one, letting its calls in flight end.
    stop.send_replace(true);
    if let Some(grpc) = grpc {
        let _ = grpc.await;
    }
    served.map_err(StartError::Serve)
}

/// Completes once `stop` says so.
fn stopping(stop: &tokio::sync::watch::Sender<bool>) -> impl Future<Output = ()> + Send + 'static {
    let mut stopped = stop.subscribe();
    async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    }
}
