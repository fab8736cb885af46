//! [`GuardBody`]: the body of a guarded service's response. An allowed
//! call's body is the service's own, holding the call's leases (renewed
//! while it lasts, released once it has been sent in full or dropped: a
//! client gone mid-stream); a refused call's body is the refusal's.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::UnsyncBoxBody;
use pin_project_lite::pin_project;
use tokio::sync::oneshot;
use tollgate_core::{Lease, Verdict};

/// The error of a [`GuardBody`]: the service body's own, boxed.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

pin_project! {
    /// The body of a guarded response: the service's own body `B` (holding
    /// the call's leases until it ends), or a refusal's.
    pub struct GuardBody<B> {
        #[pin]
        kind: Kind<B>,
        leases: Option<Holder>,
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Text { text: Option<Bytes> },
        Shaped { #[pin] body: UnsyncBoxBody<Bytes, BoxError> },
    }
}

impl<B> GuardBody<B> {
    /// The service's own body, holding nothing.
    pub fn new(body: B) -> GuardBody<B> {
        GuardBody {
            kind: Kind::Inner { body },
            leases: None,
        }
    }

    /// A refusal's text (a problem document, or nothing for gRPC).
    pub(crate) fn text(text: String) -> GuardBody<B> {
        GuardBody {
            kind: Kind::Text {
                text: (!text.is_empty()).then(|| Bytes::from(text)),
            },
            leases: None,
        }
    }

    /// A refusal an application shaped.
    pub(crate) fn shaped(body: UnsyncBoxBody<Bytes, BoxError>) -> GuardBody<B> {
        GuardBody {
            kind: Kind::Shaped { body },
            leases: None,
        }
    }
}

impl<B: Default> Default for GuardBody<B> {
    /// The service's default (empty) body, as layers outside the guard
    /// make one (tower-http's timeout).
    fn default() -> GuardBody<B> {
        GuardBody::new(B::default())
    }
}

impl<B> Body for GuardBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let polled = match this.kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx).map_err(Into::into),
            KindProj::Text { text } => Poll::Ready(text.take().map(|text| Ok(Frame::data(text)))),
            KindProj::Shaped { body } => body.poll_frame(cx),
        };
        if matches!(polled, Poll::Ready(None)) {
            // Sent in full: release now, not when the connection lets go.
            *this.leases = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Text { text } => text.is_none(),
            Kind::Shaped { body } => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Text { text } => {
                SizeHint::with_exact(text.as_ref().map_or(0, |t| t.len() as u64))
            }
            Kind::Shaped { body } => body.size_hint(),
        }
    }
}

/// `response` with its body holding the leases of `verdict` (one per
/// concurrency limit of the check) until it has been sent in full or
/// dropped, renewing them at once and every third of their lifetime
/// meanwhile; then they are released. The guard does this itself; a
/// handler that checks limits with [`check`](crate::check) calls it on its
/// response. A verdict without leases holds nothing.
///
/// Call it from a tokio runtime (as handlers run).
pub fn hold_leases<B>(
    response: http::Response<B>,
    verdict: &Verdict,
) -> http::Response<GuardBody<B>> {
    hold(response.map(GuardBody::new), verdict.leases())
}

/// `response` with its body holding `leases` until it ends (none: as it is).
pub(crate) fn hold<B>(
    mut response: http::Response<GuardBody<B>>,
    leases: &[Lease],
) -> http::Response<GuardBody<B>> {
    if leases.is_empty() {
        return response;
    }
    let leases = leases.to_vec();
    let (ended, renewing) = oneshot::channel();
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => drop(runtime.spawn(renew(leases.clone(), renewing))),
        // No runtime: the leases are held unrenewed, and end at their
        // expiry if the body outlives them.
        Err(_) => tracing::warn!("leases held outside a tokio runtime are not renewed"),
    }
    response.body_mut().leases = Some(Holder {
        leases,
        _ended: ended,
    });
    response
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

impl<B> std::fmt::Debug for GuardBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            Kind::Inner { .. } => "service",
            Kind::Text { .. } | Kind::Shaped { .. } => "refusal",
        };
        f.debug_struct("GuardBody")
            .field("body", &kind)
            .field(
                "leases",
                &self.leases.as_ref().map_or(0, |h| h.leases.len()),
            )
            .finish()
    }
}

/// A layer that holds, until each response's body ends, the leases of the
/// [`Verdict`] a handler put in that response's extensions: for handlers
/// that check limits themselves and answer through a framework that owns
/// the response (a tonic service: `response.extensions_mut().insert(verdict)`,
/// which tonic carries to the HTTP response). A response without a
/// verdict holds nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct HoldLeasesLayer;

impl<S> tower_layer::Layer<S> for HoldLeasesLayer {
    type Service = HoldLeases<S>;

    fn layer(&self, inner: S) -> HoldLeases<S> {
        HoldLeases { inner }
    }
}

/// The service of [`HoldLeasesLayer`].
#[derive(Clone, Debug)]
pub struct HoldLeases<S> {
    inner: S,
}

impl<S, Request, B> tower_service::Service<Request> for HoldLeases<S>
where
    S: tower_service::Service<Request, Response = http::Response<B>>,
    S::Future: Send + 'static,
{
    type Response = http::Response<GuardBody<B>>;
    type Error = S::Error;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let answered = self.inner.call(request);
        Box::pin(async move {
            let mut response = answered.await?;
            Ok(match response.extensions_mut().remove::<Verdict>() {
                Some(verdict) => hold_leases(response, &verdict),
                None => response.map(GuardBody::new),
            })
        })
    }
}
