//! Failure policies and the retry bound of the limiter, over the memory
//! store wrapped to fail on demand. Tests that wait for time (retries,
//! the once-a-second log) run on tokio's paused clock: no real waiting.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use tollgate_core::{Deliveries, Fault, Faulty};
use tollgate_core::{Error, Limit, Limiter, ManualClock, RetryPolicy, Rule, StoreError, Window};
use tollgate_memory::MemoryStore;
use tollgate_test_support::{Logs, unique};

fn clock() -> ManualClock {
    ManualClock::new(Duration::from_secs(20_421 * 86_400 + 43_200))
}

fn ok<T, E: std::fmt::Display>(result: Result<T, E>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// A limit of rule `name` (one key part, a day) for a fresh principal.
fn limit(name: &str, max: u64) -> Limit {
    let rule = Rule::new(name, max, Window::DAY).and_then(|r| r.with_key(&["id"]));
    ok(rule.and_then(|r| r.limit(&[unique()])), "limit")
}

/// Fail-open: a store failure is logged as a warning naming the limits and
/// the error kind, and the call is allowed with a degraded verdict.
#[tokio::test(start_paused = true)]
async fn fail_open_allows_and_logs() {
    let store = Arc::new(Faulty::new(MemoryStore::new()));
    let limiter = Limiter::builder(store.clone()).clock(clock()).build();
    let limits = [limit("docs-run", 1), limit("publish", 1)];
    let healthy = limiter.within(&limits).await;
    assert!(healthy.is_allowed() && !healthy.is_degraded());
    assert!(
        !limiter.within(&limits).await.is_allowed(),
        "over the limit while healthy"
    );

    for fault in [Fault::Transient, Fault::Permanent] {
        store.set(fault);
        // A new limiter: warnings are rate-limited per limiter.
        let limiter = Limiter::builder(store.clone()).clock(clock()).build();
        let logs = Logs::default();
        let verdict = logs.capture(limiter.within(&limits)).await;
        assert!(verdict.is_allowed(), "fail-open must allow on {fault:?}");
        assert!(
            verdict.is_degraded(),
            "fail-open must mark the verdict degraded"
        );
        assert!(verdict.usage().is_empty());
        let text = logs.text();
        assert!(text.contains("WARN"), "no warning logged: {text:?}");
        assert!(
            text.contains("docs-run,publish") && !text.contains(",docs-run"),
            "warning lacks the limit names, joined by commas: {text}"
        );
        let kind = if fault == Fault::Transient {
            "connection"
        } else {
            "backend"
        };
        assert!(text.contains(kind), "warning lacks the error kind: {text}");
    }
    store.set(Fault::None);
    assert!(
        !limiter.within(&limits).await.is_degraded(),
        "healthy again"
    );
}

/// An outage writes one warning per rule list per second, however many
/// checks fail, with the cause chain and the count of suppressed lines.
#[tokio::test(start_paused = true)]
async fn fail_open_warnings_are_rate_limited_and_carry_the_cause() {
    let store = Arc::new(Faulty::new(MemoryStore::new()));
    let limiter = Limiter::builder(store.clone())
        .clock(clock())
        .retry(RetryPolicy {
            retries: 0,
            ..RetryPolicy::default()
        })
        .build();
    let limits = [limit("docs-run", 10)];
    store.set(Fault::Transient);
    let logs = Logs::default();
    logs.capture(async {
        for _ in 0..200 {
            assert!(limiter.within(&limits).await.is_degraded());
            // Over 600 ms: the breaker opens after 500 ms of failures.
            tokio::time::advance(Duration::from_millis(3)).await;
        }
    })
    .await;
    let text = logs.text();
    assert_eq!(text.matches("allowing the call").count(), 1, "{text}");
    assert_eq!(
        text.matches("keeps failing").count(),
        1,
        "the breaker's opening is not logged once: {text}"
    );
    assert!(
        text.contains("connection refused (injected)"),
        "the cause chain is missing: {text}"
    );
    let started = Instant::now();
    let logs = Logs::default();
    logs.capture(async {
        while started.elapsed() < Duration::from_millis(1_100) {
            let _ = limiter.within(&limits).await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    let text = logs.text();
    assert_eq!(text.matches("allowing the call").count(), 1, "{text}");
    let suppressed: u64 = text
        .split("suppressed=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no suppressed count: {text}"));
    assert!(
        suppressed >= 199,
        "the 199 quiet failures were not counted: {text}"
    );
}

/// Fail-closed: a store failure is the typed `Unavailable` error, whose
/// message tells nothing about the store.
#[tokio::test(start_paused = true)]
async fn fail_closed_returns_unavailable() {
    let store = Arc::new(Faulty::new(MemoryStore::new()));
    let limiter = Limiter::builder(store.clone()).clock(clock()).build();
    let limits = [limit("ask", 15)];
    for fault in [Fault::Transient, Fault::Permanent] {
        store.set(fault);
        for result in [
            limiter.count(&limits).await,
            limiter.reserve(&limits).await,
            limiter.remaining(&limits).await.map(|_| Default::default()),
        ] {
            match result {
                Err(err @ Error::Unavailable(_)) => {
                    let text = err.to_string();
                    assert!(
                        !text.contains("limit:") && !text.contains("secret"),
                        "{text}"
                    );
                }
                other => panic!("fail-closed must be Unavailable on {fault:?}, got {other:?}"),
            }
        }
        let deliveries = ok(Deliveries::new(store.clone(), "hook:"), "deliveries");
        let dedup = deliveries.begin("abc").await.map(|d| d.is_some());
        assert!(matches!(dedup, Err(Error::Unavailable(_))), "{dedup:?}");
    }
    store.set(Fault::None);
    assert!(ok(limiter.count(&limits).await, "count").is_allowed());
}

/// A limiter makes at most 3 attempts (2 retries 100 ms apart) on
/// transient failures, 1 on permanent ones, and awaits a hanging store's
/// one attempt until the check's deadline: 350 ms at worst.
#[tokio::test(start_paused = true)]
async fn retry_stops_after_three_attempts() {
    let policy = RetryPolicy::default();
    assert_eq!(
        (policy.retries, policy.delay),
        (2, Duration::from_millis(100))
    );
    assert_eq!(policy.worst_case(), Duration::from_millis(350));
    let store = Arc::new(Faulty::new(MemoryStore::new()));
    let limiter = Limiter::builder(store.clone()).clock(clock()).build();
    let limits = [limit("retry", 10)];

    store.set(Fault::Transient);
    let started = Instant::now();
    let result = limiter.count(&limits).await;
    assert!(
        matches!(result, Err(Error::Unavailable(StoreError::Connection(_)))),
        "{result:?}"
    );
    assert_eq!(store.calls(), 3, "2 retries after the first attempt");
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "retries are 100 ms apart"
    );

    store.set(Fault::Permanent);
    let before = store.calls();
    assert!(limiter.reserve(&limits).await.is_err());
    assert_eq!(
        store.calls() - before,
        1,
        "a permanent failure is not retried"
    );

    store.set(Fault::Hang);
    let before = store.calls();
    let started = Instant::now();
    let result = limiter.remaining(&limits).await;
    let elapsed = started.elapsed();
    assert!(
        matches!(result, Err(Error::Unavailable(StoreError::Timeout(_)))),
        "{result:?}"
    );
    assert_eq!(
        store.calls() - before,
        1,
        "an attempt without answer is awaited to the check's deadline, not retried"
    );
    assert!(elapsed >= policy.worst_case(), "{elapsed:?}");
    assert!(
        elapsed < Duration::from_secs(2),
        "a hanging store held the call {elapsed:?}"
    );

    store.set(Fault::None);
    assert!(ok(limiter.count(&limits).await, "count").is_allowed());
}

/// A refund is retried with its call's id: applied by the store, its reply
/// lost, the retry is recognised, and the cost goes back once.
#[tokio::test(start_paused = true)]
async fn a_refund_whose_reply_was_lost_gives_back_once() {
    let store = Arc::new(Faulty::new(MemoryStore::new()));
    let limiter = Limiter::builder(store.clone()).clock(clock()).build();
    let spend = limit("refund-lost", 100);
    let five = ok(spend.clone().with_cost(5), "cost");
    let spent = ok(limiter.reserve(&[five]).await, "reserve");
    let three = ok(spend.clone().with_cost(3), "cost");
    ok(limiter.count(&[three]).await, "count");
    store.set(Fault::LoseReply);
    let calls = store.calls();
    ok(
        limiter.refund(&spent, spend.rule().name(), 5).await,
        "refund",
    );
    assert_eq!(store.calls() - calls, 2, "the lost refund was not retried");
    let left = ok(
        limiter.remaining(std::slice::from_ref(&spend)).await,
        "remaining",
    );
    assert_eq!(
        left[0].remaining(),
        97,
        "the refund was not given back exactly once"
    );
}
