//! Floors: a counter that holds a time (a GCRA limit's arrival time) is
//! raised to its floor (the check's time) before a cost is added, checked or
//! given back, and lives its ttl past that time from every count or
//! reservation.

use std::time::Duration;

use tollgate_core::{CheckId, Counter, CounterStore, MAX_COUNT, Reservation};

use crate::Harness;
use crate::support::{assert_fresh_lifetime, deadline, ok, unique};

/// A counter at `key` with a floor.
fn floored(key: &str, ttl: Duration, cost: u64, max: u64, floor: u64) -> Counter {
    Counter {
        key: key.to_owned(),
        ttl,
        cost,
        max,
        floor,
        prior: None,
        lease: false,
    }
}

async fn count(store: &impl CounterStore, counters: &[Counter]) -> Vec<u64> {
    ok(
        store.count(counters, CheckId::new(), deadline()).await,
        "count",
    )
}

async fn reserve(store: &impl CounterStore, counters: &[Counter]) -> Reservation {
    ok(
        store.reserve(counters, CheckId::new(), deadline()).await,
        "reserve",
    )
}

async fn refund(store: &impl CounterStore, counters: &[Counter]) -> Vec<u64> {
    ok(
        store.refund(counters, CheckId::new(), deadline()).await,
        "refund",
    )
}

async fn get(store: &impl CounterStore, key: &str) -> u64 {
    ok(store.get(&[key.to_owned()], deadline()).await, "get")[0]
}

/// Counts, reservations and refunds raise a count to its floor first; a
/// reservation decides on the raised count, all or nothing with the
/// counters of the batch that have none; a refund never goes below the
/// floor and leaves an absent counter absent; sums near 2^53 saturate.
pub async fn a_floor_raises_the_count_before_the_cost<H: Harness>(harness: &H) {
    let store = harness.open().await;
    let id = unique();
    let (a, b, plain) = (
        format!("limit:floor:{id}:a"),
        format!("limit:floor:{id}:b"),
        format!("limit:floor:{id}:plain"),
    );
    let minute = Duration::from_secs(60);
    // Absent: raised to the floor, then the cost.
    let at = |cost, max, floor| floored(&a, minute, cost, max, floor);
    assert_eq!(count(&store, &[at(3, 0, 1_000)]).await, [1_003]);
    // At or above the floor: as it is.
    assert_eq!(count(&store, &[at(4, 0, 900)]).await, [1_007]);
    // Below a later floor: raised first.
    assert_eq!(count(&store, &[at(5, 0, 2_000)]).await, [2_005]);
    // A reservation decides on the raised count: 3_000 + 10 fits 3_010, not 3_009.
    let refused = reserve(&store, &[at(10, 3_009, 3_000)]).await;
    assert_eq!((refused.applied, get(&store, &a).await), (false, 2_005));
    let applied = reserve(&store, &[at(10, 3_010, 3_000)]).await;
    assert_eq!((applied.applied, applied.counts), (true, vec![3_010]));
    // All or nothing across floored and plain counters.
    let plain_one = |cost, max| floored(&plain, minute, cost, max, 0);
    let b_one = |cost, max, floor| floored(&b, minute, cost, max, floor);
    assert_eq!(count(&store, &[plain_one(7, 0)]).await, [7]);
    let mixed = reserve(&store, &[b_one(5, 505, 500), plain_one(4, 10)]).await;
    assert!(!mixed.applied, "the plain counter cannot take 4 more");
    assert_eq!(
        get(&store, &b).await,
        0,
        "a refused reservation creates nothing"
    );
    assert_eq!(get(&store, &plain).await, 7);
    let mixed = reserve(&store, &[b_one(5, 505, 500), plain_one(3, 10)]).await;
    assert_eq!((mixed.applied, mixed.counts), (true, vec![505, 10]));
    // A refund never goes below the floor.
    assert_eq!(refund(&store, &[at(8, 0, 3_000)]).await, [3_002]);
    assert_eq!(refund(&store, &[at(8, 0, 3_000)]).await, [3_000]);
    assert_eq!(refund(&store, &[at(1, 0, 3_500)]).await, [3_500]);
    // An absent counter stays absent.
    let absent = format!("limit:floor:{id}:absent");
    assert_eq!(
        refund(&store, &[floored(&absent, minute, 1, 0, 10)]).await,
        [0]
    );
    assert_eq!(get(&store, &absent).await, 0);
    // Near 2^53: exact, then saturating.
    let top = format!("limit:floor:{id}:top");
    let near = |cost| floored(&top, minute, cost, MAX_COUNT, MAX_COUNT - 10);
    assert_eq!(count(&store, &[near(10)]).await, [MAX_COUNT]);
    assert!(!reserve(&store, &[near(1)]).await.applied);
    assert_eq!(count(&store, &[near(1)]).await, [MAX_COUNT]);
}

/// A count or reservation of a counter with a floor gives it a lifetime
/// from then of its ttl past the time it holds (`ttl` + `count − floor`
/// µs): its value is a time, pushed forward by every call. A counter
/// without a floor may keep the lifetime it was created with.
pub async fn a_floored_counter_lives_its_ttl_from_every_write<H: Harness>(harness: &H) {
    let store = harness.open().await;
    let key = format!("limit:floor:{}:life", unique());
    let floor = 1_000_000;
    let at = |ttl, cost| floored(&key, ttl, cost, MAX_COUNT, floor);
    // 1_000_000 + 5 s: 5 s ahead of the floor, so 60 + 5 s.
    count(&store, &[at(Duration::from_secs(60), 5_000_000)]).await;
    assert_fresh_lifetime(harness, &key, Duration::from_secs(65)).await;
    // 10 s ahead: 3_600 + 10 s.
    count(&store, &[at(Duration::from_secs(3_600), 5_000_000)]).await;
    assert_fresh_lifetime(harness, &key, Duration::from_secs(3_610)).await;
    // Shorter than before: the lifetime is set, not only extended.
    assert!(
        reserve(&store, &[at(Duration::from_secs(600), 1_000_000)])
            .await
            .applied
    );
    assert_fresh_lifetime(harness, &key, Duration::from_secs(611)).await;
    // Ahead by a part of a ms: the lifetime is set (within the suite's slack;
    // that the part rounds up is `Counter::lifetime_at`'s unit test).
    let part = format!("limit:floor:{}:part", unique());
    count(
        &store,
        &[floored(
            &part,
            Duration::from_secs(60),
            1_500,
            MAX_COUNT,
            floor,
        )],
    )
    .await;
    assert_fresh_lifetime(harness, &part, Duration::from_millis(60_002)).await;
}
