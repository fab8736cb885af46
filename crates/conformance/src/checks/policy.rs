//! Failure policies and the retry bound, over a store that fails on demand.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tollgate_core::{
    Counter, CounterStore, Error, Limiter, Retry, RetryPolicy, StoreError, Window,
};

use crate::support::{clock, ok, rule, unique};
use crate::{Fault, Faulty, Harness, Logs};

/// Fail-open: a store failure is logged as a warning naming the limits and
/// the error kind, and the call is allowed with a degraded verdict.
pub async fn fail_open_allows_and_logs<H: Harness>(harness: &H) {
    let store = Arc::new(Faulty::new(harness.open().await));
    let limiter = Limiter::with_parts(store.clone(), clock());
    let id = unique();
    let limits = [
        ok(rule("docs-run", 1, Window::DAY).limit(&[&id]), "limit"),
        ok(rule("publish", 1, Window::DAY).limit(&[&id]), "limit"),
    ];
    let healthy = limiter.within(&limits).await;
    assert!(healthy.is_allowed() && !healthy.is_degraded());
    assert!(
        !limiter.within(&limits).await.is_allowed(),
        "over the limit while healthy"
    );

    for fault in [Fault::Transient, Fault::Permanent] {
        store.set(fault);
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
            text.contains("docs-run,publish"),
            "warning lacks the limit names: {text}"
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

/// Fail-closed: a store failure is the typed `Unavailable` error, whose
/// message tells nothing about the store.
pub async fn fail_closed_returns_unavailable<H: Harness>(harness: &H) {
    let store = Arc::new(Faulty::new(harness.open().await));
    let limiter = Limiter::with_parts(store.clone(), clock());
    let limits = [ok(rule("ask", 15, Window::DAY).limit(&[unique()]), "limit")];
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
        let dedup = limiter.deliveries().first_delivery("abc").await;
        assert!(matches!(dedup, Err(Error::Unavailable(_))), "{dedup:?}");
    }
    store.set(Fault::None);
    assert!(ok(limiter.count(&limits).await, "count").is_allowed());
}

/// The retry wrapper makes at most 3 attempts (2 retries 100 ms apart) on
/// transient failures, 1 on permanent ones, bounds a hanging store by the
/// per-attempt timeout, and never retries `set_if_absent`.
pub async fn retry_stops_after_three_attempts<H: Harness>(harness: &H) {
    let policy = RetryPolicy::default();
    assert_eq!(
        (policy.retries, policy.delay),
        (2, Duration::from_millis(100))
    );
    assert_eq!(policy.worst_case(), Duration::from_millis(350));
    let store = Arc::new(Faulty::new(harness.open().await));
    let retry = Retry::new(store.clone(), policy);
    let counters = [Counter {
        key: format!("limit:retry:{}:1", unique()),
        ttl: Duration::from_secs(60),
        max: 10,
    }];

    store.set(Fault::Transient);
    let started = Instant::now();
    let result = retry.increment(&counters).await;
    assert!(
        matches!(result, Err(StoreError::Connection(_))),
        "{result:?}"
    );
    assert_eq!(store.calls(), 3, "2 retries after the first attempt");
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "retries are 100 ms apart"
    );

    store.set(Fault::Permanent);
    let before = store.calls();
    assert!(retry.increment_within(&counters).await.is_err());
    assert_eq!(
        store.calls() - before,
        1,
        "a permanent failure is not retried"
    );

    store.set(Fault::Transient);
    let before = store.calls();
    assert!(
        retry
            .set_if_absent("dedup:retry", Duration::from_secs(5))
            .await
            .is_err()
    );
    assert_eq!(store.calls() - before, 1, "set_if_absent is never retried");

    store.set(Fault::Hang);
    let before = store.calls();
    let started = Instant::now();
    let result = retry.get(&[counters[0].key.clone()]).await;
    let elapsed = started.elapsed();
    assert!(matches!(result, Err(StoreError::Timeout(_))), "{result:?}");
    assert_eq!(store.calls() - before, 3);
    assert!(elapsed >= policy.worst_case(), "{elapsed:?}");
    assert!(
        elapsed < Duration::from_secs(2),
        "a hanging store held the call {elapsed:?}"
    );

    store.set(Fault::None);
    assert_eq!(ok(retry.increment(&counters).await, "increment"), [1]);
}
