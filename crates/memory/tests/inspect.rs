//! What the memory store shows the tests that inspect it (the core's tests
//! read it to prove nothing reached the store): `len` and `is_empty` count
//! live keys only, a key dropping out at the instant it expires, and
//! `expiry` is the remaining lifetime.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tollgate_core::{CheckId, Clock, Counter, CounterStore, Deadline, ManualClock};
use tollgate_memory::MemoryStore;

fn counter(key: &str, ttl_secs: u64) -> Counter {
    Counter {
        key: key.to_owned(),
        ttl: Duration::from_secs(ttl_secs),
        cost: 1,
        max: 10,
        floor: 0,
        prior: None,
        lease: false,
    }
}

#[tokio::test]
async fn len_counts_live_keys_and_a_key_leaves_when_it_expires() {
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let store = MemoryStore::with_clock(clock.clone());
    assert!(store.is_empty());
    assert_eq!(store.len(), 0);

    let deadline = Deadline::after(Duration::from_secs(5));
    let batch = [counter("a", 10), counter("b", 20), counter("c", 20)];
    assert_eq!(
        store.count(&batch, CheckId::new(), deadline).await.unwrap(),
        [1, 1, 1]
    );
    assert_eq!(store.len(), 3);
    assert!(!store.is_empty());
    assert_eq!(store.expiry("a"), Some(Duration::from_secs(10)));

    clock.advance(Duration::from_secs(9));
    assert_eq!(store.len(), 3, "one second before its end, `a` still lives");
    clock.advance(Duration::from_secs(1));
    assert_eq!(store.len(), 2, "`a` is gone at the instant it expires");
    assert_eq!(store.expiry("a"), None);
    assert!(!store.is_empty());

    clock.advance(Duration::from_secs(10));
    assert_eq!(store.len(), 0);
    assert!(store.is_empty());
}

/// A counter counted at the very instant it expires is a new counter: it
/// starts again from the call's cost, with a full lifetime.
#[tokio::test]
async fn a_count_at_the_instant_of_expiry_starts_a_new_counter() {
    let clock = ManualClock::new(Duration::from_secs(1_000));
    let store = MemoryStore::with_clock(clock.clone());
    let deadline = Deadline::after(Duration::from_secs(5));
    let a = [counter("a", 10)];
    assert_eq!(
        store.count(&a, CheckId::new(), deadline).await.unwrap(),
        [1]
    );
    clock.advance(Duration::from_secs(9));
    assert_eq!(
        store.count(&a, CheckId::new(), deadline).await.unwrap(),
        [2],
        "still live"
    );
    clock.advance(Duration::from_secs(1));
    assert_eq!(
        store.count(&a, CheckId::new(), deadline).await.unwrap(),
        [1],
        "expired: anew"
    );
    assert_eq!(store.expiry("a"), Some(Duration::from_secs(10)));
}

#[test]
fn a_manual_clock_starting_now_reads_the_system_time() {
    let manual = tollgate_core::ManualClock::starting_now().now();
    let system = tollgate_core::SystemClock.now();
    assert!(
        system.abs_diff(manual) < Duration::from_secs(5),
        "{manual:?} vs {system:?}"
    );
}

#[test]
fn its_metrics_and_logs_name_it_memory() {
    let store = MemoryStore::new();
    assert_eq!(tollgate_core::Named::name(&store), "memory");
}

/// De-duplication marks its deliveries under the caller's prefix, for the
/// caller's lifetimes: the processing lease while one runs, the done
/// lifetime once it is complete.
#[tokio::test]
async fn deliveries_mark_under_the_callers_prefix_for_the_callers_lifetimes() {
    let clock = ManualClock::starting_now();
    let store = MemoryStore::with_clock(clock.clone());
    let lease = Duration::from_secs(7);
    let done = Duration::from_secs(90);
    let deliveries = tollgate_core::Deliveries::new(store.clone(), "hook:")
        .unwrap()
        .lease(lease)
        .done(done);
    let delivery = deliveries.begin("d-1").await.unwrap().unwrap();
    assert_eq!(deliveries.key("d-1").unwrap(), "hook:d-1");
    assert_eq!(
        store.expiry("hook:d-1"),
        Some(lease),
        "the processing lease"
    );
    delivery.complete().await.unwrap();
    assert_eq!(store.expiry("hook:d-1"), Some(done), "the done lifetime");
    clock.advance(done);
    assert_eq!(
        store.expiry("hook:d-1"),
        None,
        "forgotten after its lifetime"
    );
}
