//! [`Rejection`]: why the boundary refused a call, as a standard HTTP response.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use tollgate_core::{MAX_PART_LEN, RateLimited, Unit, Usage, Verdict};

use crate::problem::{self, Problem};
use crate::{Error, fields};

/// The `Retry-After` of a 503 answered when limits could not be checked, in seconds.
pub const UNAVAILABLE_RETRY_AFTER: u64 = 2;

/// A refused call. As a response it is an `application/problem+json` body
/// that never holds a storage key, a store's name or a store's error text:
///
/// | variant | status | headers |
/// |---|---|---|
/// | `Limited` | 429 | `Retry-After` (none when the cost never fits), `RateLimit-Policy`, `RateLimit` |
/// | `Unavailable` | 503 | `Retry-After: 2` |
/// | `BadRequest` | 400 | |
/// | `Internal` | 500 | |
///
/// A limited body names the limit, the wait and the reset time:
///
/// ```json
/// {"type": "tag:tollgate,2025:rate-limited", "title": "Too Many Requests", "status": 429,
///  "detail": "rate limit `ask` reached: 15 per 1d; retry in 3600 s",
///  "limit": "ask", "retry_after": 3600, "reset": 1764460800}
/// ```
///
/// A call whose cost is above the limit's max
/// ([`RateLimited::never_fits`]) would be refused in every window: its body
/// says so, with `"never_fits": true` and no `retry_after` or `reset`, and
/// the response has no `Retry-After`; the caller must ask for less:
///
/// ```json
/// {"type": "tag:tollgate,2025:rate-limited", "title": "Too Many Requests", "status": 429,
///  "detail": "a cost of 250000 tokens never fits rate limit `ask-tokens`: 200000 tokens per 1d",
///  "limit": "ask-tokens", "unit": "tokens", "never_fits": true}
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejection {
    /// A limit refuses the call (429).
    Limited {
        /// The limit that refuses it.
        limited: RateLimited,
        /// Every limit of the check, for the `RateLimit` fields.
        usage: Vec<Usage>,
    },
    /// The store failed under the fail-closed policy (503).
    Unavailable,
    /// The client address or a value identifying the call cannot be used (400);
    /// the text says why, for the caller.
    BadRequest(String),
    /// The guard cannot build the check; details are in the server log (500).
    Internal,
}

impl Rejection {
    /// The rejection of a limited verdict; `None` when the verdict allows the call.
    pub fn from_verdict(verdict: &Verdict) -> Option<Rejection> {
        let limited = verdict.limited()?;
        Some(Rejection::Limited {
            limited,
            usage: verdict.usage().to_vec(),
        })
    }

    /// The status code of the response.
    pub fn status(&self) -> StatusCode {
        match self {
            Rejection::Limited { .. } => StatusCode::TOO_MANY_REQUESTS,
            Rejection::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Rejection::BadRequest(_) => StatusCode::BAD_REQUEST,
            Rejection::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The problem body and `Retry-After` of the response.
    pub fn problem(&self) -> Problem {
        let status = self.status();
        match self {
            Rejection::Limited { limited, .. } => {
                let problem = Problem::new(status, problem::RATE_LIMITED, "Too Many Requests")
                    .detail(limited.to_string())
                    .member("limit", limited.limit());
                let problem = match limited.unit() {
                    Unit::Calls => problem,
                    unit => problem.member("unit", unit.as_str()),
                };
                if limited.never_fits() {
                    // No wait helps: nothing that reads as a time to retry.
                    return problem.member("never_fits", true);
                }
                problem
                    .member("retry_after", limited.retry_after())
                    .member("reset", limited.reset())
                    .retry_after(limited.retry_after())
            }
            Rejection::Unavailable => {
                Problem::new(status, problem::UNAVAILABLE, "Service Unavailable")
                    .detail("rate limits cannot be checked right now; try again shortly")
                    .member("retry_after", UNAVAILABLE_RETRY_AFTER)
                    .retry_after(UNAVAILABLE_RETRY_AFTER)
            }
            Rejection::BadRequest(detail) => {
                Problem::new(status, problem::BAD_REQUEST, "Bad Request").detail(detail.clone())
            }
            Rejection::Internal => Problem::new(status, problem::INTERNAL, "Internal Server Error")
                .detail("the request could not be checked"),
        }
    }
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let mut response = self.problem().into_response();
        if let Rejection::Limited { usage, .. } = &self {
            let headers = response.headers_mut();
            if let (Some(policy), Some(rate_limit)) =
                (fields::policy(usage), fields::rate_limit(usage))
            {
                headers.insert(fields::RATELIMIT_POLICY, policy);
                headers.insert(fields::RATELIMIT, rate_limit);
            }
        }
        response
    }
}

impl From<tollgate_core::Error> for Rejection {
    /// A store failure is 503, a bad client value 400, anything else 500
    /// (logged here, never shown to the caller).
    fn from(err: tollgate_core::Error) -> Rejection {
        use tollgate_core::Error as Core;
        match err {
            Core::Unavailable(_) => Rejection::Unavailable,
            Core::MissingAddress => Rejection::BadRequest("missing client address".into()),
            Core::InvalidAddress => Rejection::BadRequest("malformed client address".into()),
            Core::PartTooLong { .. } => Rejection::BadRequest(format!(
                "a value identifying this call is longer than {MAX_PART_LEN} bytes"
            )),
            Core::InvalidDeliveryId | Core::InvalidCost(_) => {
                Rejection::BadRequest(err.to_string())
            }
            other => {
                tracing::error!(error = %other, "a rate limit check could not be built");
                Rejection::Internal
            }
        }
    }
}

impl From<Error> for Rejection {
    /// An unusable client address is 400, whose text names no header (where
    /// the address was looked for is logged at debug); a configuration
    /// error 500 (logged).
    fn from(err: Error) -> Rejection {
        match err {
            Error::MissingAddress(source) => {
                tracing::debug!(%source, "400: missing client address");
                Rejection::BadRequest("missing client address".into())
            }
            Error::MalformedAddress(source) => {
                tracing::debug!(%source, "400: malformed client address");
                Rejection::BadRequest("malformed client address".into())
            }
            other => {
                tracing::error!(error = %other, "tollgate-axum is misconfigured");
                Rejection::Internal
            }
        }
    }
}
