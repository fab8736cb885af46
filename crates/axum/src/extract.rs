//! [`ClientVisitor`]: the visitor of a request, as an axum extractor.

use axum::extract::{FromRef, FromRequestParts};
use http::request::Parts;
use tollgate_core::Visitor;

use crate::{Rejection, VisitorSource};

/// The [`Visitor`] of a request, found by the router state's
/// [`VisitorSource`] (or taken from a [`Guard`](crate::Guard) that already
/// found it). A request without a usable address is refused with 400 in
/// production mode.
///
/// ```
/// use axum::{Router, routing::get};
/// use tollgate_axum::{ClientVisitor, Trust, VisitorSource};
///
/// async fn whoami(ClientVisitor(visitor): ClientVisitor) -> String {
///     visitor.to_string()
/// }
///
/// let app: Router = Router::new()
///     .route("/whoami", get(whoami))
///     .with_state(VisitorSource::new(Trust::cloudflare()));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientVisitor(pub Visitor);

impl<S> FromRequestParts<S> for ClientVisitor
where
    S: Send + Sync,
    VisitorSource: FromRef<S>,
{
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<ClientVisitor, Rejection> {
        if let Some(visitor) = parts.extensions.get::<Visitor>() {
            return Ok(ClientVisitor(visitor.clone()));
        }
        let source = VisitorSource::from_ref(state);
        source
            .visitor(parts)
            .map(ClientVisitor)
            .map_err(Rejection::from)
    }
}
