//! The tower [`Layer`] and [`Service`] of a [`Guard`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::response::{IntoResponse, Response};
use http::Request;
use tower::{Layer, Service};

use crate::{Guard, fields, held};

impl<S> Layer<S> for Guard {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded {
            guard: Arc::new(self.clone()),
            inner,
        }
    }
}

/// A service behind a [`Guard`]: only called for allowed calls. Any tower
/// service of `http` requests whose response axum can send (an
/// `http::Response` with a body of bytes, as hyper, tower-http and tonic
/// services answer) can be guarded, not only an axum route: key its rules
/// with [`Call::segment`](crate::Call::segment), headers and
/// [`Call::extension`](crate::Call::extension) instead of path parameters.
#[derive(Clone, Debug)]
pub struct Guarded<S> {
    guard: Arc<Guard>,
    inner: S,
}

impl<S, B> Service<Request<B>> for Guarded<S>
where
    S: Service<Request<B>> + Clone + Send + 'static,
    S::Response: IntoResponse,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The clone is not ready; keep the ready service for this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let guard = self.guard.clone();
        Box::pin(async move {
            let (mut parts, body) = request.into_parts();
            let verdict = match guard.admit(&mut parts).await {
                Ok(verdict) => verdict,
                Err(rejection) => return Ok(guard.refuse(&parts.headers, rejection)),
            };
            let response = inner.call(Request::from_parts(parts, body)).await?;
            let mut response = response.into_response();
            fields::insert(&verdict, response.headers_mut());
            Ok(held::hold(response, verdict.leases()))
        })
    }
}
