//! gRPC refusals (feature `tonic`): a [`Rejection`] as the `tonic::Status`
//! a gRPC client understands, with the wait in `google.rpc.RetryInfo`.
//!
//! | rejection | code | details |
//! |---|---|---|
//! | `Limited` | `RESOURCE_EXHAUSTED` | `RetryInfo` (the wait; none when the cost never fits), `QuotaFailure` (the limit's name, and what it allows) |
//! | `Unavailable` | `UNAVAILABLE` | `RetryInfo` ([`UNAVAILABLE_RETRY_AFTER`]) |
//! | `BadRequest` | `INVALID_ARGUMENT` | |
//! | `Internal` | `INTERNAL` | |
//!
//! A limited call's status also carries the `ratelimit-policy` and
//! `ratelimit` metadata, as a 429 carries those fields. The message, like a
//! 429's body, never names a storage key or a store.
//!
//! A [`Guard`](crate::Guard) answers a gRPC request (`content-type:
//! application/grpc…`) this way by itself, unless
//! [`on_rejection`](crate::Guard::on_rejection) shapes its refusals. A
//! handler that checks limits itself (the key is in the message) maps its
//! refusal with [`status`]:
//!
//! ```
//! use tollgate_tower::{Rejection, check, grpc};
//! use tollgate_core::{Limiter, Mode, Policy, RuleSet};
//!
//! async fn ask(limiter: &Limiter, project: &str) -> Result<String, tonic::Status> {
//!     let rules = RuleSet::defaults();
//!     let limit = rules
//!         .get("ask-site")
//!         .and_then(|rule| rule.limit(&[project]))
//!         .map_err(|err| grpc::status(&Rejection::from(err)))?;
//!     let _verdict = check(limiter, &[limit], Mode::Reserve, Policy::FailClosed)
//!         .await
//!         .map_err(|refused| grpc::status(&refused))?;
//!     Ok("the answer".into())
//! }
//! ```

use std::net::IpAddr;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, header};
use tollgate_core::{Verdict, Visitor};
use tonic::metadata::MetadataMap;
use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

use crate::{Rejection, UNAVAILABLE_RETRY_AFTER, VisitorSource, fields};

/// The `tonic::Status` of a refused call (the module's table).
pub fn status(rejection: &Rejection) -> Status {
    let detail = rejection.detail();
    match rejection {
        Rejection::Limited { limited, usage } => {
            let mut details = ErrorDetails::new();
            if !limited.never_fits() {
                details.set_retry_info(Some(Duration::from_secs(limited.retry_after())));
            }
            details.add_quota_failure_violation(limited.limit(), detail.clone());
            let mut headers = HeaderMap::new();
            fields::insert_usage(usage, &mut headers);
            Status::with_error_details_and_metadata(
                Code::ResourceExhausted,
                detail,
                details,
                MetadataMap::from_headers(headers),
            )
        }
        Rejection::Unavailable => Status::with_error_details(
            Code::Unavailable,
            detail,
            ErrorDetails::with_retry_info(Some(Duration::from_secs(UNAVAILABLE_RETRY_AFTER))),
        ),
        Rejection::BadRequest(_) => Status::invalid_argument(detail),
        Rejection::Internal => Status::internal(detail),
    }
}

/// The whole response to a refused gRPC call: HTTP 200 with the
/// [`status`] in its headers (a trailers-only response), as a
/// [`Guard`](crate::Guard) sends it.
pub fn respond(rejection: &Rejection) -> http::Response<String> {
    status(rejection).into_http()
}

/// Whether `headers` are a gRPC request's (`content-type: application/grpc`,
/// `application/grpc+proto`, …).
pub(crate) fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .map(HeaderValue::as_bytes)
        .is_some_and(|value| value.starts_with(b"application/grpc"))
}

/// The visitor of a gRPC call, found by `source` from the call's peer (as
/// tonic's server records it) and metadata (`cf-connecting-ip`,
/// `x-forwarded-for`, believed only as the source's trust says). For
/// handlers that check limits themselves; a [`Guard`](crate::Guard) finds
/// it on its own and puts it in the call's extensions.
///
/// # Errors
///
/// The `INVALID_ARGUMENT` status of a call without a usable address (in
/// production mode).
pub fn visitor<T>(source: &VisitorSource, request: &tonic::Request<T>) -> Result<Visitor, Status> {
    if let Some(visitor) = request.extensions().get::<Visitor>() {
        return Ok(visitor.clone());
    }
    let peer = request.remote_addr().map(|addr| addr.ip());
    source
        .visitor_from(peer, request.metadata().as_ref())
        .map_err(|err| status(&Rejection::from(err)))
}

/// The peer address tonic's server records in a call's extensions.
pub(crate) fn peer(extensions: &http::Extensions) -> Option<IpAddr> {
    extensions
        .get::<tonic::transport::server::TcpConnectInfo>()
        .and_then(|info| info.remote_addr())
        .map(|addr| addr.ip())
}

/// Adds the `ratelimit-policy` and `ratelimit` metadata of an allowed
/// call's `verdict` (none when degraded), as [`fields::insert`] adds the
/// header fields.
pub fn insert_fields(verdict: &Verdict, metadata: &mut MetadataMap) {
    fields::insert(verdict, metadata.as_mut());
}
