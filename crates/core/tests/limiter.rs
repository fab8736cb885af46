//! The limiter's settings and its read-only view, through the public API
//! over the memory store: a limiter without a cache sends every check to
//! the store, one with a cache answers repeated refusals itself, the retry
//! policy is the one given, and `remaining` calls a limit over exactly when
//! one more call of its cost would be refused, and settling at the estimate
//! asks the store nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use tollgate_core::Faulty;
use tollgate_core::observe::Op;
use tollgate_core::{Clock, Limit, Limiter, RetryPolicy, Rule, Window};
use tollgate_memory::MemoryStore;

/// 2026-06-15T12:00:30Z.
const NOON: u64 = 20_619 * 86_400 + 43_230;

#[derive(Debug)]
struct Stopped;

impl Clock for Stopped {
    fn now(&self) -> Duration {
        Duration::from_secs(NOON)
    }
}

/// The memory store, counting the calls it receives.
type Counted = Faulty<MemoryStore>;

fn counted() -> Arc<Counted> {
    Arc::new(Faulty::new(MemoryStore::default()))
}

fn limit(max: u64, cost: u64) -> Limit {
    Rule::new("ask", max, Window::HOUR)
        .and_then(|r| r.with_key(&["id"]))
        .and_then(|r| r.limit(&["a"]))
        .and_then(|l| l.with_cost(cost))
        .unwrap()
}

/// Refuses one reservation at the store, then tries `again` more; how many
/// of those the limiter answered itself, and how many reached the store.
async fn refusals_after_a_full_counter(
    limiter: &Limiter,
    store: &Counted,
    again: usize,
) -> (usize, usize) {
    let full = [limit(1, 1)];
    assert!(limiter.reserve(&full).await.unwrap().is_allowed());
    let refused = limiter.reserve(&full).await.unwrap();
    assert!(
        !refused.is_allowed() && !refused.is_local(),
        "the store refuses first"
    );
    let before = store.calls_to(Op::Reserve);
    let mut local = 0;
    for _ in 0..again {
        let verdict = limiter.reserve(&full).await.unwrap();
        assert!(!verdict.is_allowed());
        local += usize::from(verdict.is_local());
    }
    (local, store.calls_to(Op::Reserve) - before)
}

/// Capacity 0 is no cache: every refusal is the store's. Any other capacity
/// (1 or the default) answers the refusals of a counter seen full locally.
#[tokio::test]
async fn a_cache_of_capacity_zero_is_none_and_any_other_answers_refusals_locally() {
    for (capacity, cached) in [
        (Some(0), false),
        (Some(1), true),
        (Some(8), true),
        (None, true),
    ] {
        let store = counted();
        let builder = Limiter::builder(store.clone()).clock(Stopped);
        let limiter = match capacity {
            Some(capacity) => builder.cache(capacity).build(),
            None => builder.build(),
        };
        let (local, reached) = refusals_after_a_full_counter(&limiter, &store, 5).await;
        if cached {
            assert_eq!(
                (local, reached),
                (5, 0),
                "capacity {capacity:?}: answered locally"
            );
        } else {
            assert_eq!(
                (local, reached),
                (0, 5),
                "capacity {capacity:?}: every check to the store"
            );
        }
    }
}

/// The retry policy a limiter reports is the one it was given (the default
/// otherwise).
#[test]
fn the_retry_policy_is_the_one_given() {
    let limiter = Limiter::new(MemoryStore::new());
    assert_eq!(limiter.retry_policy(), RetryPolicy::default());
    let patient = RetryPolicy {
        retries: 5,
        delay: Duration::from_millis(7),
        timeout: Duration::from_millis(300),
    };
    let limiter = Limiter::builder(MemoryStore::new()).retry(patient).build();
    assert_eq!(limiter.retry_policy(), patient);
}

/// Reading without spending calls a limit over exactly when one more call
/// of its cost would be refused: at `count + cost == max` it still fits.
#[tokio::test]
async fn remaining_is_over_only_when_the_next_call_would_not_fit() {
    let limiter = Limiter::builder(MemoryStore::new()).clock(Stopped).build();
    let spend = [limit(5, 3)];
    assert!(limiter.count(&spend).await.unwrap().is_allowed());
    // 3 of 5 spent: a call of 2 fits exactly, a call of 3 does not.
    let fits = limiter.remaining(&[limit(5, 2)]).await.unwrap();
    assert_eq!(fits[0].remaining(), 2);
    assert!(!fits[0].is_over(), "3 + 2 = 5 fits a max of 5");
    let over = limiter.remaining(&[limit(5, 3)]).await.unwrap();
    assert!(over[0].is_over(), "3 + 3 = 6 does not");
    assert_eq!(over[0].remaining(), 2, "reading spends nothing");
}

/// Settling at the estimate gives nothing back and asks the store nothing;
/// settling below it refunds the difference in one call.
#[tokio::test]
async fn settling_at_the_estimate_asks_the_store_nothing() {
    let store = counted();
    let limiter = Limiter::builder(store.clone()).clock(Stopped).build();
    let estimate = [limit(10, 4)];
    let spent = limiter.reserve(&estimate).await.unwrap();
    assert!(spent.is_allowed());
    limiter.settle(&spent, "ask", 4).await.unwrap();
    assert_eq!(store.calls_to(Op::Refund), 0, "nothing to give back");
    let read = limiter.remaining(&[limit(10, 1)]).await.unwrap();
    assert_eq!(read[0].remaining(), 6);

    let spent = limiter.reserve(&estimate).await.unwrap();
    limiter.settle(&spent, "ask", 1).await.unwrap();
    assert_eq!(store.calls_to(Op::Refund), 1);
    let read = limiter.remaining(&[limit(10, 1)]).await.unwrap();
    assert_eq!(read[0].remaining(), 5, "4 + 1 spent of 10");
}

/// Sub-second GCRA rates work: 10 a second, one at a time, is one call
/// every 100 ms on the limiter's clock; a refused call is told to retry in
/// a whole second (the least `Retry-After` says) and is charged nothing.
#[tokio::test]
async fn a_gcra_limit_of_ten_a_second_admits_one_call_per_100_ms() {
    use tollgate_core::{Algorithm, ManualClock};
    let store = counted();
    let clock = ManualClock::new(Duration::from_secs(NOON));
    let limiter = Limiter::builder(store.clone())
        .clock(clock.clone())
        .cache(0)
        .build();
    let fast = [Rule::new("fast", 10, Window::SECOND)
        .map(|r| r.with_algorithm(Algorithm::Gcra))
        .and_then(|r| r.limit::<&str>(&[]))
        .unwrap()];
    for step in 0..12 {
        let verdict = limiter.count(&fast).await.unwrap();
        assert!(verdict.is_allowed(), "call {step} at {step}00 ms");
        clock.advance(Duration::from_millis(40));
        let early = limiter.count(&fast).await.unwrap();
        assert!(
            !early.is_allowed() && !early.has_spent(),
            "40 ms after call {step}"
        );
        assert_eq!(early.limited().unwrap().retry_after(), 1);
        clock.advance(Duration::from_millis(60));
    }
}
