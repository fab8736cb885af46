#![doc = include_str!("../README.md")]

mod extract;
pub mod serve;

pub use extract::ClientVisitor;
#[cfg(feature = "tonic")]
pub use tollgate_tower::grpc;
pub use tollgate_tower::{
    AddressSource, Call, Error, Guard, GuardBody, Guarded, Key, KeyPart, Network, PeerAddr,
    Problem, Rejection, Trust, UNAVAILABLE_RETRY_AFTER, Unkeyed, VisitorSource, check, cloudflare,
    fields, problem,
};

use axum::body::Body;
use axum::response::Response;
use tollgate_core::Verdict;

/// `response` with its body holding the leases of `verdict` until it has
/// been sent in full or dropped ([`tollgate_tower::hold_leases`]), as an
/// axum response: for a handler that checks limits with [`check`].
///
/// Call it from a tokio runtime (as handlers run).
pub fn hold_leases(response: Response, verdict: &Verdict) -> Response {
    tollgate_tower::hold_leases(response, verdict).map(Body::new)
}
