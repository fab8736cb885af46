//! The `RateLimit-Policy` and `RateLimit` header fields of
//! draft-ietf-httpapi-ratelimit-headers, in structured-field form.
//!
//! ```
//! # async fn demo(limiter: tollgate_core::Limiter, limit: tollgate_core::Limit) -> Result<(), tollgate_core::Error> {
//! let verdict = limiter.count(&[limit]).await?;
//! let mut headers = http::HeaderMap::new();
//! tollgate_axum::fields::insert(&verdict, &mut headers);
//! // RateLimit-Policy: "ask";q=15;w=86400
//! // RateLimit: "ask";r=14;t=3600
//! # Ok(()) }
//! ```
//!
//! The draft mandates no algorithm: a policy is a quota `q` over a time
//! window of `w` seconds, and `t` is how many seconds until quota comes
//! back. Both shapes of [`Algorithm`](tollgate_core::Algorithm) say so
//! truthfully:
//!
//! | | fixed | sliding |
//! |---|---|---|
//! | `RateLimit-Policy` `q`, `w` | `max` units in each window of `w` seconds | `max` units in any `w` seconds (the window's length): the same item |
//! | `RateLimit` `r` | `max − count` | `max −` the estimate (the previous window's count, weighted by the part of it still inside the last `w` seconds, plus the current one's) |
//! | `RateLimit` `t`, limit over | until the window resets | the exact wait until the call's cost fits again, as `Retry-After` says (not the window's end) |
//! | `RateLimit` `t`, limit not over | until the window resets | until the current window ends, by when the previous window's weight has all come back (quota comes back gradually before then) |
//!
//! The shape itself is not a field parameter (the draft defines none); the
//! 429 body names it ([`Rejection`](crate::Rejection)). As the draft
//! warns, a client must not take `t` to mean that all of its quota is back
//! by then: for a sliding window the current window's count still weighs
//! in the next one.

use std::fmt::Write as _;

use http::{HeaderMap, HeaderName, HeaderValue};
use tollgate_core::{Usage, Verdict};

/// `RateLimit-Policy`: the quota and window of each limit.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// `RateLimit`: what is left of each limit and when it resets.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The `RateLimit-Policy` value: one `"name";q=MAX;w=WINDOW_SECS` per public
/// limit (with `;qu="UNIT"` when the limit counts a quota unit the draft
/// defines, such as `content-bytes`), comma-separated; `None` when no limit
/// is public. A sliding window's item is a fixed one's: `max` units in
/// `w` seconds, which a sliding window holds for any `w` seconds.
pub fn policy(usage: &[Usage]) -> Option<HeaderValue> {
    list(usage, |out, u| {
        let _ = write!(out, ";q={};w={}", u.max(), u.window().secs());
        if let Some(unit) = u.unit().quota_unit() {
            let _ = write!(out, ";qu=\"{unit}\"");
        }
    })
}

/// The `RateLimit` value: one `"name";r=REMAINING;t=SECS` per public
/// limit, comma-separated, remaining never below 0; `None` when no limit is
/// public. `t` is [`Usage::retry_after`]: until the window resets, or for
/// a sliding window that is over, the exact wait until the cost fits
/// again (the module's table). A rule that is not public
/// ([`Rule::with_public`](tollgate_core::Rule::with_public)) never shows its
/// budget here.
pub fn rate_limit(usage: &[Usage]) -> Option<HeaderValue> {
    list(usage, |out, u| {
        let _ = write!(out, ";r={};t={}", u.remaining().max(0), u.retry_after());
    })
}

/// Inserts both fields for `verdict`; nothing when it is degraded or has no limits.
pub fn insert(verdict: &Verdict, headers: &mut HeaderMap) {
    if verdict.is_degraded() {
        return;
    }
    if let (Some(policy), Some(rate_limit)) = (policy(verdict.usage()), rate_limit(verdict.usage()))
    {
        headers.insert(RATELIMIT_POLICY, policy);
        headers.insert(RATELIMIT, rate_limit);
    }
}

fn list(usage: &[Usage], params: impl Fn(&mut String, &Usage)) -> Option<HeaderValue> {
    let mut out = String::new();
    for u in usage.iter().filter(|u| u.is_public()) {
        if !out.is_empty() {
            out.push_str(", ");
        }
        string_item(&mut out, u.name());
        params(&mut out, u);
    }
    if out.is_empty() {
        return None;
    }
    HeaderValue::from_str(&out).ok()
}

/// Writes `text` as a structured-field string: quoted, `"` and `\` escaped,
/// anything outside printable ASCII dropped (rule names never hold any).
fn string_item(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars().filter(|c| (' '..='~').contains(c)) {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tollgate_core::{Algorithm, Limiter, ManualClock, Mode, Rule, Unit, Verdict, Window};
    use tollgate_memory::MemoryStore;

    use super::*;

    /// 2025-11-29T23:00:00Z, on a minute boundary.
    const NOW: u64 = 20_421 * 86_400 + 23 * 3_600;

    fn rule(name: &str, max: u64, algorithm: Algorithm) -> Rule {
        Rule::new(name, max, Window::MINUTE)
            .unwrap_or_else(|e| panic!("{e}"))
            .with_algorithm(algorithm)
    }

    /// A limiter over a fresh memory store, and its clock at `NOW`.
    fn limiter() -> (Limiter, ManualClock) {
        let clock = ManualClock::new(Duration::from_secs(NOW));
        let store = MemoryStore::with_clock(clock.clone());
        (Limiter::builder(store).clock(clock.clone()).build(), clock)
    }

    async fn check(limiter: &Limiter, rules: &[&Rule], mode: Mode) -> Verdict {
        let limits: Vec<_> = rules
            .iter()
            .map(|r| r.limit::<&str>(&[]).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        let verdict = match mode {
            Mode::Count => limiter.count(&limits).await,
            _ => limiter.reserve(&limits).await,
        };
        verdict.unwrap_or_else(|e| panic!("{e}"))
    }

    fn text(value: Option<HeaderValue>) -> String {
        let value = value.unwrap_or_else(|| panic!("no field"));
        value.to_str().unwrap_or_default().to_owned()
    }

    #[tokio::test]
    async fn a_sliding_window_is_described_as_a_quota_over_its_window() {
        let (limiter, _) = limiter();
        let fixed = rule("fixed", 10, Algorithm::Fixed);
        let sliding = rule("sliding", 10, Algorithm::Sliding);
        let verdict = check(&limiter, &[&fixed, &sliding], Mode::Reserve).await;
        assert_eq!(
            text(policy(verdict.usage())),
            r#""fixed";q=10;w=60, "sliding";q=10;w=60"#
        );
        assert_eq!(
            text(rate_limit(verdict.usage())),
            r#""fixed";r=9;t=60, "sliding";r=9;t=60"#
        );
    }

    #[tokio::test]
    async fn a_sliding_window_shows_its_estimate_and_its_exact_wait() {
        let (limiter, clock) = limiter();
        let fixed = rule("fixed", 10, Algorithm::Fixed);
        let sliding = rule("sliding", 10, Algorithm::Sliding);
        // A full budget in the last second of a minute…
        clock.advance(Duration::from_secs(59));
        for _ in 0..10 {
            check(&limiter, &[&fixed, &sliding], Mode::Count).await;
        }
        // …resets for the fixed window and still weighs on the sliding one.
        clock.advance(Duration::from_secs(1));
        let verdict = check(&limiter, &[&fixed, &sliding], Mode::Reserve).await;
        let limited = verdict.limited().unwrap_or_else(|| panic!("allowed"));
        assert_eq!(limited.limit(), "sliding");
        assert_eq!(
            text(rate_limit(verdict.usage())),
            r#""fixed";r=10;t=60, "sliding";r=0;t=1"#,
            "at 0 s into the minute the estimate is 10; at 1 s, floor(10 × 59/60) = 9"
        );
        // One call fits a second later; the next must wait until the
        // previous minute's weight has fallen by one more unit: at 7 s,
        // floor(10 × 53/60) = 8, plus the 1 counted.
        clock.advance(Duration::from_secs(1));
        let allowed = check(&limiter, &[&sliding], Mode::Reserve).await;
        assert!(allowed.is_allowed());
        assert_eq!(
            text(rate_limit(allowed.usage())),
            r#""sliding";r=0;t=59"#,
            "not over: until the minute ends"
        );
        let refused = check(&limiter, &[&sliding], Mode::Reserve).await;
        assert_eq!(text(rate_limit(refused.usage())), r#""sliding";r=0;t=6"#);
        let limited = refused.limited().unwrap_or_else(|| panic!("allowed"));
        assert_eq!(limited.retry_after(), 6, "as Retry-After says");
        clock.advance(Duration::from_secs(5));
        assert!(
            !check(&limiter, &[&sliding], Mode::Reserve)
                .await
                .is_allowed()
        );
        clock.advance(Duration::from_secs(1));
        assert!(
            check(&limiter, &[&sliding], Mode::Reserve)
                .await
                .is_allowed()
        );
    }

    #[tokio::test]
    async fn fixed_windows_read_as_they_always_have() {
        let (limiter, clock) = limiter();
        clock.advance(Duration::from_secs(20));
        let calls = rule("calls", 2, Algorithm::Fixed);
        let bytes = rule("bytes", 1_000, Algorithm::Fixed)
            .with_unit(Unit::new("content-bytes").unwrap_or_else(|e| panic!("{e}")));
        let hidden = rule("hidden", 5, Algorithm::Fixed).with_public(false);
        let mut verdict = check(&limiter, &[&calls, &bytes, &hidden], Mode::Count).await;
        for _ in 0..2 {
            verdict = check(&limiter, &[&calls, &bytes, &hidden], Mode::Count).await;
        }
        assert_eq!(
            text(policy(verdict.usage())),
            r#""calls";q=2;w=60, "bytes";q=1000;w=60;qu="content-bytes""#
        );
        assert_eq!(
            text(rate_limit(verdict.usage())),
            r#""calls";r=0;t=40, "bytes";r=997;t=40"#
        );
        let mut headers = HeaderMap::new();
        insert(&verdict, &mut headers);
        assert_eq!(headers.len(), 2);
        let mut none = HeaderMap::new();
        insert(&Verdict::default(), &mut none);
        assert!(none.is_empty(), "no limits, no fields");
    }
}
