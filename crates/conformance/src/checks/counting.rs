//! Plain counting: batches, reads, resets and lifetimes.

use std::time::Duration;

use tollgate_core::{CheckId, Counter, CounterStore, Window};

use crate::Harness;
use crate::support::{clock, deadline, limiter, ok, rule, unique};

fn counter(key: &str, ttl: u64) -> Counter {
    Counter {
        key: key.to_owned(),
        ttl: Duration::from_secs(ttl),
        cost: 1,
        max: 1_000,
        floor: 0,
        prior: None,
        lease: false,
    }
}

/// One `count` call counts every counter of its batch and returns each
/// new count in order; `get` reads them back and reads 0 for an absent key.
pub async fn increment_counts_each_counter_of_a_batch<H: Harness>(harness: &H) {
    let store = harness.open().await;
    let id = unique();
    let keys: Vec<String> = (0..4).map(|i| format!("limit:batch:{id}:{i}:1")).collect();
    let one = [counter(&keys[0], 60)];
    assert_eq!(
        ok(store.count(&one, CheckId::new(), deadline()).await, "count"),
        [1]
    );
    assert_eq!(
        ok(store.count(&one, CheckId::new(), deadline()).await, "count"),
        [2]
    );
    let all: Vec<Counter> = keys.iter().map(|k| counter(k, 60)).collect();
    assert_eq!(
        ok(store.count(&all, CheckId::new(), deadline()).await, "count"),
        [3, 1, 1, 1]
    );
    assert_eq!(
        ok(
            store.count(&all[2..], CheckId::new(), deadline()).await,
            "count"
        ),
        [2, 2]
    );
    let mut read = keys.clone();
    read.push(format!("limit:batch:{id}:absent:1"));
    assert_eq!(
        ok(store.get(&read, deadline()).await, "get"),
        [3, 1, 2, 2, 0]
    );
    assert_eq!(
        ok(store.get(&[], deadline()).await, "get"),
        Vec::<u64>::new()
    );
}

/// `remaining` reports what is left without spending anything.
pub async fn remaining_reads_without_spending<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let limits = [ok(
        rule("peek", 5, Window::HOUR, 1).limit(&[unique()]),
        "limit",
    )];
    let fresh = ok(limiter.remaining(&limits).await, "remaining");
    assert_eq!((fresh[0].remaining(), fresh[0].is_over()), (5, false));
    for _ in 0..2 {
        ok(limiter.count(&limits).await, "count");
    }
    for _ in 0..3 {
        let left = ok(limiter.remaining(&limits).await, "remaining");
        assert_eq!(left[0].remaining(), 3, "reading must not spend");
    }
    for _ in 0..3 {
        ok(limiter.count(&limits).await, "count");
    }
    let full = ok(limiter.remaining(&limits).await, "remaining");
    assert_eq!((full[0].remaining(), full[0].is_over()), (0, true));
}

/// `reset` clears one principal's counter for the current window, and only it.
pub async fn reset_clears_the_current_window<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let r = rule("operator", 2, Window::DAY, 2);
    let id = unique();
    let mine = [ok(r.limit(&[id.as_str(), "me"]), "limit")];
    let other = [ok(r.limit(&[id.as_str(), "other"]), "limit")];
    for _ in 0..3 {
        ok(limiter.count(&mine).await, "count");
    }
    ok(limiter.count(&other).await, "count");
    assert!(!ok(limiter.count(&mine).await, "count").is_allowed());
    assert!(
        ok(limiter.reset(&mine[0]).await, "reset"),
        "a counter existed"
    );
    assert!(!ok(limiter.reset(&mine[0]).await, "reset"), "it is gone");
    assert!(ok(limiter.count(&mine).await, "count").is_allowed());
    let left = ok(limiter.remaining(&other).await, "remaining");
    assert_eq!(
        left[0].remaining(),
        1,
        "another principal's counter was touched"
    );
}
