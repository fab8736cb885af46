//! The `RateLimit-Policy` and `RateLimit` header fields of
//! draft-ietf-httpapi-ratelimit-headers, in structured-field form.
//!
//! ```
//! # async fn demo(limiter: tollgate_core::Limiter, limit: tollgate_core::Limit) -> Result<(), tollgate_core::Error> {
//! let verdict = limiter.count(&[limit]).await?;
//! let mut headers = http::HeaderMap::new();
//! tollgate_tower::fields::insert(&verdict, &mut headers);
//! // RateLimit-Policy: "ask";q=15;w=86400
//! // RateLimit: "ask";r=14;t=3600
//! # Ok(()) }
//! ```
//!
//! The draft mandates no algorithm: a policy is a quota `q` over a time
//! window of `w` seconds; `r` is the quota available now and `t` the
//! effective window, the seconds within which the client should spend no
//! more than `r` (a client that does is never refused for it). Each shape of
//! [`Algorithm`] says so truthfully (`T` is a
//! GCRA rule's emission interval, `⌈window / max⌉`: one unit comes back
//! every `T`; `b` its burst):
//!
//! | | fixed | sliding | gcra |
//! |---|---|---|---|
//! | `RateLimit-Policy` `q`, `w` | `max` units in each window of `w` seconds | `max` units in any `w` seconds (the window's length): the same item | `q` = `b`, the most units spent at once; `w` = `b·T` rounded up to whole seconds, the time an emptied bucket takes to fill up again. `q / w` is the rule's rate (`max` per window) or, where `b·T` is not whole seconds, below it |
//! | `RateLimit` `r` | `max − count` | `max −` the estimate (the previous window's count, weighted by the part of it still inside the last `w` seconds, plus the current one's) | the units one call may spend now: `b` less what has not come back yet |
//! | `RateLimit` `t`, limit over | until the window resets | the exact wait until the call's cost fits again, as `Retry-After` says (not the window's end) | the exact wait until the call's cost fits again, as `Retry-After` says |
//! | `RateLimit` `t`, limit not over | until the window resets | until the current window ends, by when the previous window's weight has all come back (quota comes back gradually before then) | until the bucket is full again (quota comes back one unit every `T` before then) |
//!
//! For GCRA the draft's own reading of a policy decides the item (section
//! numbers of draft -11): `q` is the quota allocated over the time window
//! `w` (§3.1), and a client may take `q / w` as the average throughput the
//! policy conveys (§8.5, which warns against fields that suggest more).
//! `q = max, w = window` would tell a client that `max` units at once are
//! fine, when the bucket refuses the unit after the `b`-th: a more
//! permissive policy than the one enforced (what §7.2 forbids an
//! intermediary to convey). `q = b` over the time those `b` units take to
//! come back says both what may be spent at once and, as `q / w`, the
//! rule's sustained rate, as the draft's own example pairs a short
//! `"burst";q=100;w=60` policy with a `"daily"` one (§3). `w` is whole
//! seconds, never 0 (§3.1.3): rounding it up only ever understates the
//! rate (`q=1;w=1` for 10 a second with a burst of 1, `T` = 100 ms). No
//! vendor parameter (§3.1's `acme-burst`) is added: `q` already is the
//! burst.
//!
//! The shape itself is not a field parameter (the draft defines none); the
//! 429 body names it ([`Rejection`](crate::Rejection)). As the draft
//! warns, a client must not take `t` to mean that all of its quota is back
//! by then: for a sliding window the current window's count still weighs
//! in the next one. Both windowed shapes and GCRA keep `r` within `t` on
//! the safe side: before a sliding window's `t` ends quota comes back
//! gradually, and before a GCRA bucket's `t` one unit comes back every
//! `T`, so a client may in fact spend more than `r` by then, never less.
//!
//! A concurrency limit (leases in flight) is the draft's quota unit
//! `concurrent-requests` (§3.1.2): `q` is its leases, without `w` (a
//! lease's lifetime is not a window the quota comes back in; `w` is
//! optional), `r` the leases free, and `t` until the first lease held
//! ends, at most its lifetime (a holder usually ends it sooner; 1 when
//! none is held).

use std::fmt::Write as _;

use http::{HeaderMap, HeaderName, HeaderValue};
use tollgate_core::{Algorithm, Usage, Verdict};

/// `RateLimit-Policy`: the quota and window of each limit.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// `RateLimit`: what is left of each limit and when it resets.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The `RateLimit-Policy` value: one `"name";q=MAX;w=WINDOW_SECS` per public
/// limit (with `;qu="UNIT"` when the limit counts a quota unit the draft
/// defines, such as `content-bytes`), comma-separated; `None` when no limit
/// is public. A sliding window's item is a fixed one's: `max` units in
/// `w` seconds, which a sliding window holds for any `w` seconds. A GCRA
/// limit's is its burst over the time the burst takes to come back,
/// `"name";q=BURST;w=SECS` (the module's table). A concurrency limit's is
/// its leases in the draft's unit, without a window (a lease's lifetime is
/// none): `"name";q=N;qu="concurrent-requests"`.
pub fn policy(usage: &[Usage]) -> Option<HeaderValue> {
    list(usage, |out, u| {
        if u.algorithm() == Algorithm::Concurrency {
            let _ = write!(out, ";q={};qu=\"concurrent-requests\"", u.max());
            return;
        }
        let (q, w) = quota(u);
        let _ = write!(out, ";q={q};w={w}");
        if let Some(unit) = u.unit().quota_unit() {
            let _ = write!(out, ";qu=\"{unit}\"");
        }
    })
}

/// The `q` and `w` of `usage`'s policy item: the rule's `max` and window
/// length in seconds; for GCRA, its burst `b` and `b·T` rounded up to
/// whole seconds (at least 1), `T = ⌈window / max⌉` µs the emission
/// interval: 5 and 15 for 20 a minute with a burst of 5.
fn quota(usage: &Usage) -> (u64, u64) {
    let window = usage.window().secs();
    if usage.algorithm() != Algorithm::Gcra {
        return (usage.max(), window);
    }
    let burst = usage.burst();
    let interval = (u128::from(window) * 1_000_000)
        .div_ceil(u128::from(usage.max().max(1)))
        .max(1);
    let refill = (u128::from(burst) * interval).div_ceil(1_000_000).max(1);
    (burst, u64::try_from(refill).unwrap_or(u64::MAX))
}

/// The `RateLimit` value: one `"name";r=REMAINING;t=SECS` per public
/// limit, comma-separated, remaining never below 0; `None` when no limit is
/// public. `t` is [`Usage::retry_after`]: until the window resets, or for
/// a sliding window or a GCRA bucket that is over, the exact wait until
/// the cost fits again; for a GCRA bucket that is not, until it is full
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
    if !verdict.is_degraded() {
        insert_usage(verdict.usage(), headers);
    }
}

/// Inserts both fields for the limits of a check, `usage` (a refusal's
/// too); nothing when no limit is public.
pub fn insert_usage(usage: &[Usage], headers: &mut HeaderMap) {
    if let (Some(policy), Some(rate_limit)) = (policy(usage), rate_limit(usage)) {
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

    /// A GCRA rule of `max` a minute with a burst of `burst`.
    fn gcra(name: &str, max: u64, burst: u64) -> Rule {
        rule(name, max, Algorithm::Gcra)
            .with_burst(burst)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[tokio::test]
    async fn a_gcra_bucket_is_described_by_its_burst_and_its_rate() {
        let (limiter, clock) = limiter();
        // 20 a minute, 5 at once: one unit back every 3 s.
        let bucket = gcra("ask-burst", 20, 5);
        let fixed = rule("fixed", 10, Algorithm::Fixed);
        let sliding = rule("sliding", 10, Algorithm::Sliding);
        let all = [&bucket, &fixed, &sliding];
        // Five at once: each takes one unit; the bucket is full again
        // 3 s after the last unit taken for each one spent.
        for i in 1..=5 {
            let verdict = check(&limiter, &all, Mode::Reserve).await;
            assert!(verdict.is_allowed(), "call {i}");
            assert_eq!(
                text(rate_limit(verdict.usage())),
                format!(
                    r#""ask-burst";r={};t={}, "fixed";r={};t=60, "sliding";r={};t=60"#,
                    5 - i,
                    3 * i,
                    10 - i,
                    10 - i
                )
            );
        }
        // The sixth is refused: nothing left at once, one unit back in 3 s,
        // as Retry-After says.
        let verdict = check(&limiter, &all, Mode::Reserve).await;
        let limited = verdict.limited().unwrap_or_else(|| panic!("allowed"));
        assert_eq!((limited.limit(), limited.retry_after()), ("ask-burst", 3));
        assert_eq!(
            text(policy(verdict.usage())),
            r#""ask-burst";q=5;w=15, "fixed";q=10;w=60, "sliding";q=10;w=60"#,
            "the burst over the 5 × 3 s it takes to come back: 20 a minute"
        );
        assert_eq!(
            text(rate_limit(verdict.usage())),
            r#""ask-burst";r=0;t=3, "fixed";r=5;t=60, "sliding";r=5;t=60"#
        );
        // 3 s later one unit is back: taken, the bucket is full in 15 s.
        clock.advance(Duration::from_secs(3));
        let verdict = check(&limiter, &[&bucket], Mode::Reserve).await;
        assert!(verdict.is_allowed());
        assert_eq!(text(rate_limit(verdict.usage())), r#""ask-burst";r=0;t=15"#);
        // The policy item never changes with the bucket's state.
        assert_eq!(text(policy(verdict.usage())), r#""ask-burst";q=5;w=15"#);
    }

    #[tokio::test]
    async fn a_gcra_policy_rounds_its_window_up_and_shows_no_debt() {
        let (limiter, _) = limiter();
        // The default burst of 1: one unit every 3 s.
        let one = rule("one", 20, Algorithm::Gcra);
        // 7 a minute: T = 8.571428… s; 3 units take 25.7 s to come back.
        let odd = gcra("odd", 7, 3);
        // 10 a second, 1 at once (T = 100 ms): rounding up understates the rate.
        let fast = Rule::new("fast", 10, Window::SECOND)
            .unwrap_or_else(|e| panic!("{e}"))
            .with_algorithm(Algorithm::Gcra);
        let fast_burst = fast
            .clone()
            .with_burst(10)
            .unwrap_or_else(|e| panic!("{e}"));
        let verdict = check(&limiter, &[&one, &odd, &fast], Mode::Reserve).await;
        assert_eq!(
            text(policy(verdict.usage())),
            r#""one";q=1;w=3, "odd";q=3;w=26, "fast";q=1;w=1"#
        );
        let verdict = check(&limiter, &[&fast_burst], Mode::Reserve).await;
        assert_eq!(text(policy(verdict.usage())), r#""fast";q=10;w=1"#);
        // A count with a GCRA limit is a reservation: refused, never in
        // debt, and `r` reads 0.
        let mut verdict = check(&limiter, &[&one], Mode::Count).await;
        for _ in 0..2 {
            verdict = check(&limiter, &[&one], Mode::Count).await;
        }
        let usage = verdict
            .usage()
            .first()
            .unwrap_or_else(|| panic!("no usage"));
        assert!(usage.is_over() && !verdict.has_spent(), "{usage:?}");
        assert_eq!(usage.remaining(), 0, "{usage:?}");
        assert!(text(rate_limit(verdict.usage())).starts_with(r#""one";r=0;t="#));
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
