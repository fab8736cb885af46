//! [`Rejection`]: why the boundary refused a call, as a standard HTTP response.

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
/// A limited body names the limit, its shape, the wait and the reset time:
///
/// ```json
/// {"type": "tag:tollgate,2025:rate-limited", "title": "Too Many Requests", "status": 429,
///  "detail": "rate limit `ask` reached: 15 per 1d; retry in 3600 s",
///  "limit": "ask", "algorithm": "fixed", "retry_after": 3600, "reset": 1764460800}
/// ```
///
/// | member | what it holds |
/// |---|---|
/// | `limit` | the name of the rule that refuses the call |
/// | `algorithm` | how that rule counts its window ([`Algorithm::as_str`](tollgate_core::Algorithm::as_str)): `fixed` (the window resets at its end), `sliding` (the previous window's count still weighs, less every second) or `gcra` (a bucket of `burst` units that refills one unit every `window / max`) |
/// | `unit` | what the rule counts, when it is not calls |
/// | `retry_after` | whole seconds to wait, as `Retry-After` says: until the window resets, or for a sliding window or a GCRA bucket until the cost fits again |
/// | `reset` | when that wait ends, in Unix seconds |
/// | `never_fits` | `true` when the cost is above the rule's max, or a GCRA rule's burst (then no `retry_after` or `reset`) |
///
/// A call whose cost is above the limit's max (a GCRA limit's burst:
/// `"detail": "… 20 per 1m, at most 5 at once"`)
/// ([`RateLimited::never_fits`]) would be refused in every window: its body
/// says so, with `"never_fits": true` and no `retry_after` or `reset`, and
/// the response has no `Retry-After`; the caller must ask for less:
///
/// ```json
/// {"type": "tag:tollgate,2025:rate-limited", "title": "Too Many Requests", "status": 429,
///  "detail": "a cost of 250000 tokens never fits rate limit `ask-tokens`: 200000 tokens per 1d",
///  "limit": "ask-tokens", "algorithm": "fixed", "unit": "tokens", "never_fits": true}
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

    /// What went wrong, for the caller: the problem's `detail`, a gRPC
    /// status's message. It never names a storage key or a store.
    pub fn detail(&self) -> String {
        match self {
            Rejection::Limited { limited, .. } => limited.to_string(),
            Rejection::Unavailable => {
                "rate limits cannot be checked right now; try again shortly".into()
            }
            Rejection::BadRequest(detail) => detail.clone(),
            Rejection::Internal => "the request could not be checked".into(),
        }
    }

    /// The problem body and `Retry-After` of the response.
    pub fn problem(&self) -> Problem {
        let status = self.status();
        match self {
            Rejection::Limited { limited, .. } => {
                let problem = Problem::new(status, problem::RATE_LIMITED, "Too Many Requests")
                    .detail(self.detail())
                    .member("limit", limited.limit())
                    .member("algorithm", limited.algorithm().as_str());
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
                    .detail(self.detail())
                    .member("retry_after", UNAVAILABLE_RETRY_AFTER)
                    .retry_after(UNAVAILABLE_RETRY_AFTER)
            }
            Rejection::BadRequest(_) => {
                Problem::new(status, problem::BAD_REQUEST, "Bad Request").detail(self.detail())
            }
            Rejection::Internal => Problem::new(status, problem::INTERNAL, "Internal Server Error")
                .detail(self.detail()),
        }
    }
}

impl Rejection {
    /// The response (the table above): the [`problem`](Rejection::problem)
    /// and, for a limited call, the `RateLimit-Policy` and `RateLimit`
    /// fields.
    pub fn into_http(self) -> http::Response<String> {
        let mut response = self.problem().into_http();
        if let Rejection::Limited { usage, .. } = &self {
            fields::insert_usage(usage, response.headers_mut());
        }
        response
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for Rejection {
    fn into_response(self) -> axum::response::Response {
        self.into_http().into_response()
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
                tracing::error!(error = %other, "the guard is misconfigured");
                Rejection::Internal
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate_core::{Algorithm, Limiter, ManualClock, Rule, Window};
    use tollgate_memory::MemoryStore;

    use super::*;

    /// 2025-11-29T23:00:00Z, on a minute boundary.
    const NOW: u64 = 20_421 * 86_400 + 23 * 3_600;

    /// The rejection of the second call of `cost` to a rule of max 1 a
    /// minute counting as `algorithm`, the first made `after` seconds
    /// into the minute and the second a second later.
    async fn second_call(algorithm: Algorithm, after: u64, cost: u64) -> Rejection {
        let clock = ManualClock::new(Duration::from_secs(NOW + after));
        let store = MemoryStore::with_clock(clock.clone());
        let limiter = Limiter::builder(store).clock(clock.clone()).build();
        let rule = Rule::new("ask", 1, Window::MINUTE)
            .unwrap_or_else(|e| panic!("{e}"))
            .with_algorithm(algorithm);
        let limit = rule.limit::<&str>(&[]).unwrap_or_else(|e| panic!("{e}"));
        let first = limiter.reserve(std::slice::from_ref(&limit)).await;
        assert!(first.is_ok_and(|v| v.is_allowed()));
        clock.advance(Duration::from_secs(1));
        refused(&limiter, limit, cost).await
    }

    /// The rejection of a call of `cost` to `limit`, which must refuse it.
    async fn refused(limiter: &Limiter, limit: tollgate_core::Limit, cost: u64) -> Rejection {
        let limit = limit.with_cost(cost).unwrap_or_else(|e| panic!("{e}"));
        let verdict = limiter.reserve(&[limit]).await;
        let verdict = verdict.unwrap_or_else(|e| panic!("{e}"));
        Rejection::from_verdict(&verdict).unwrap_or_else(|| panic!("allowed"))
    }

    #[tokio::test]
    async fn a_limited_body_names_the_shape_next_to_the_limit() {
        let fixed = second_call(Algorithm::Fixed, 0, 1).await.problem();
        assert_eq!(
            fixed.to_json(),
            r#"{"type":"tag:tollgate,2025:rate-limited","title":"Too Many Requests","status":429,"#
                .to_owned()
                + r#""detail":"rate limit `ask` reached: 1 per 1m; retry in 59 s","#
                + r#""limit":"ask","algorithm":"fixed","retry_after":59,"reset":1764457260}"#
        );
        // The call in the last second of a minute still weighs in the next
        // one's first second; a second later it has gone.
        let sliding = second_call(Algorithm::Sliding, 59, 1).await.problem();
        assert_eq!(
            sliding.to_json(),
            r#"{"type":"tag:tollgate,2025:rate-limited","title":"Too Many Requests","status":429,"#
                .to_owned()
                + r#""detail":"rate limit `ask` reached: 1 per 1m; retry in 1 s","#
                + r#""limit":"ask","algorithm":"sliding","retry_after":1,"reset":1764457261}"#
        );
    }

    #[tokio::test]
    async fn a_cost_that_never_fits_names_the_shape_too() {
        let body = second_call(Algorithm::Sliding, 0, 2).await.problem().body();
        assert_eq!(body["algorithm"], "sliding");
        assert_eq!(body["never_fits"], true);
        assert!(body.get("retry_after").is_none() && body.get("reset").is_none());
    }

    /// The rejection of the call of `cost` after `calls` calls at once, at
    /// `NOW`, to a GCRA rule of 20 a minute with a burst of 5 (one unit
    /// back every 3 s).
    async fn gcra_call(calls: u64, cost: u64) -> Rejection {
        let clock = ManualClock::new(Duration::from_secs(NOW));
        let store = MemoryStore::with_clock(clock.clone());
        let limiter = Limiter::builder(store).clock(clock).build();
        let rule = Rule::new("ask-burst", 20, Window::MINUTE)
            .map(|r| r.with_algorithm(Algorithm::Gcra))
            .and_then(|r| r.with_burst(5))
            .unwrap_or_else(|e| panic!("{e}"));
        let limit = rule.limit::<&str>(&[]).unwrap_or_else(|e| panic!("{e}"));
        for i in 0..calls {
            let verdict = limiter.reserve(std::slice::from_ref(&limit)).await;
            assert!(verdict.is_ok_and(|v| v.is_allowed()), "call {i}");
        }
        refused(&limiter, limit, cost).await
    }

    #[tokio::test]
    async fn a_gcra_body_names_its_shape_and_the_wait_for_one_unit() {
        // Five at once empty the bucket; one unit comes back in 3 s.
        let problem = gcra_call(5, 1).await.problem();
        assert_eq!(
            problem.to_json(),
            r#"{"type":"tag:tollgate,2025:rate-limited","title":"Too Many Requests","status":429,"#
                .to_owned()
                + r#""detail":"rate limit `ask-burst` reached: 20 per 1m; retry in 3 s","#
                + r#""limit":"ask-burst","algorithm":"gcra","retry_after":3,"reset":1764457203}"#
        );
        assert_eq!(NOW + 3, 1_764_457_203);
        // The fields say the same: the burst over the time it takes to
        // come back, nothing left now, one unit back in 3 s.
        let response = gcra_call(5, 1).await.into_http();
        let header = |name: &str| {
            let value = response.headers().get(name);
            value.and_then(|v| v.to_str().ok()).map(str::to_owned)
        };
        assert_eq!(header("retry-after").as_deref(), Some("3"));
        assert_eq!(
            header("ratelimit-policy").as_deref(),
            Some(r#""ask-burst";q=5;w=15"#)
        );
        assert_eq!(
            header("ratelimit").as_deref(),
            Some(r#""ask-burst";r=0;t=3"#)
        );
    }

    #[tokio::test]
    async fn a_cost_above_a_gcra_burst_never_fits_and_says_so() {
        // 6 is within the max (20) but above the burst (5): no wait helps,
        // even on a full bucket.
        let rejection = gcra_call(0, 6).await;
        let body = rejection.problem().body();
        assert_eq!(body["algorithm"], "gcra");
        assert_eq!(body["never_fits"], true);
        assert_eq!(
            body["detail"],
            "a cost of 6 calls never fits rate limit `ask-burst`: 20 per 1m, at most 5 at once"
        );
        assert!(body.get("retry_after").is_none() && body.get("reset").is_none());
        let response = rejection.into_http();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(response.headers().get(http::header::RETRY_AFTER).is_none());
    }

    #[test]
    fn other_rejections_name_no_shape() {
        for rejection in [
            Rejection::Unavailable,
            Rejection::BadRequest("missing client address".into()),
            Rejection::Internal,
        ] {
            assert!(rejection.problem().body().get("algorithm").is_none());
        }
    }
}
