//! The tower [`Layer`] and [`Service`] of a [`Guard`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tower_layer::Layer;
use tower_service::Service;

use crate::body::hold;
use crate::guard::Reach;
use crate::{Guard, GuardBody, fields};

impl<S> Layer<S> for Guard {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded {
            guard: Arc::new(self.clone()),
            inner,
        }
    }
}

/// A service behind a [`Guard`]: only called for allowed calls (and calls
/// the guard's [`path`](Guard::path) does not match). Any tower service of
/// `http` requests and responses can be guarded: an axum route, a hyper
/// service, a tower-http stack, a tonic server.
#[derive(Clone, Debug)]
pub struct Guarded<S> {
    guard: Arc<Guard>,
    inner: S,
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for Guarded<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
{
    type Response = Response<GuardBody<ResBody>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        // The clone is not ready; keep the ready service for this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let guard = self.guard.clone();
        Box::pin(async move {
            let reach = guard.reach(request.uri().path(), request.extensions());
            if reach == Reach::Other {
                let response = inner.call(request).await?;
                return Ok(response.map(GuardBody::new));
            }
            let (mut parts, body) = request.into_parts();
            let admitted = match reach {
                Reach::Checked => guard.check(&mut parts).await,
                _ => Err(guard.misplaced(&parts)),
            };
            let verdict = match admitted {
                Ok(verdict) => verdict,
                Err(rejection) => return Ok(guard.respond(&parts.headers, rejection)),
            };
            let response = inner.call(Request::from_parts(parts, body)).await?;
            let mut response = response.map(GuardBody::new);
            fields::insert(&verdict, response.headers_mut());
            Ok(hold(response, verdict.leases()))
        })
    }
}
