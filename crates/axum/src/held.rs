//! Leases held while a response is sent: the body holds them, renews them
//! while it lasts, and releases them once it has been sent in full or
//! dropped (a client gone mid-stream).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::response::Response;
use http_body::{Frame, SizeHint};
use tokio::sync::oneshot;
use tollgate_core::{Lease, Verdict};

/// `response` with its body holding the leases of `verdict` (one per
/// concurrency limit of the check) until it has been sent in full or
/// dropped, renewing them at once and every third of their lifetime meanwhile; then they are
/// released. The guard does this itself; a handler that checks limits
/// with [`check`](crate::check) calls it on its response. A verdict
/// without leases leaves the response as it is.
///
/// Call it from a tokio runtime (as handlers run).
pub fn hold_leases(response: Response, verdict: &Verdict) -> Response {
    hold(response, verdict.leases())
}

/// `response` with its body holding `leases` until it ends (none: as it is).
pub(crate) fn hold(response: Response, leases: &[Lease]) -> Response {
    if leases.is_empty() {
        return response;
    }
    let leases = leases.to_vec();
    let (ended, renewing) = oneshot::channel();
    tokio::spawn(renew(leases.clone(), renewing));
    response.map(|inner| {
        Body::new(Held {
            inner,
            leases: Some(Holder {
                leases,
                _ended: ended,
            }),
        })
    })
}

/// Renews `leases` every third of their lifetime until the body ends (`ended` is
/// dropped or sent to).
async fn renew(leases: Vec<Lease>, mut ended: oneshot::Receiver<()>) {
    let every = leases
        .iter()
        .map(Lease::lifetime)
        .min()
        .unwrap_or(Duration::from_secs(60))
        / 3;
    // At once first: the handler may have run for a good part of the
    // lifetime already.
    let mut wait = Duration::ZERO;
    while tokio::time::timeout(wait, &mut ended).await.is_err() {
        wait = every;
        for lease in &leases {
            if let Err(err) = lease.renew().await {
                tracing::warn!(rule = lease.rule().name(), error = %err, "a lease was not renewed");
            }
        }
    }
}

/// The leases of a body being sent; released when dropped.
struct Holder {
    leases: Vec<Lease>,
    /// Dropped with the holder: stops the renewals.
    _ended: oneshot::Sender<()>,
}

impl Drop for Holder {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime: each lease's own drop (or its expiry) ends it.
            return;
        };
        for lease in self.leases.drain(..) {
            runtime.spawn(async move {
                if let Err(err) = lease.release().await {
                    tracing::warn!(rule = lease.rule().name(), error = %err, "a lease was not released; it ends at its expiry");
                }
            });
        }
    }
}

/// A body holding leases until its last frame (or its drop).
struct Held {
    inner: Body,
    leases: Option<Holder>,
}

impl HttpBody for Held {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None)) {
            // Sent in full: release now, not when the connection lets go.
            self.leases = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
