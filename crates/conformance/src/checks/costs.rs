//! Costs: mixed costs racing, costs above max, partial fits and the bounds.

use std::time::Duration;

use tollgate_core::{CheckId, Counter, CounterStore, Limit, MAX_COUNT, MAX_MAX, Window};

use super::concurrency::race_all;
use crate::support::{clock, deadline, limiter, ok, rule, unique};
use crate::{Expiry, Harness};

fn counter(key: &str, cost: u64, max: u64) -> Counter {
    Counter {
        key: key.to_owned(),
        ttl: Duration::from_secs(3_600),
        cost,
        max,
        floor: 0,
        prior: None,
        lease: false,
    }
}

fn costed(limit: &Limit, cost: u64) -> Limit {
    ok(limit.clone().with_cost(cost), "cost")
}

/// Reservations of mixed costs (1 to 7) racing on one shared max of 200,
/// over two limiters: the costs allowed never sum past the max, every
/// counter of a reservation gets every allowed cost, the room left is less
/// than any refused cost, and callers of cost 1 then fill it exactly.
pub async fn racing_mixed_costs_never_exceed_max<H: Harness>(harness: &H) {
    const MAX: u64 = 200;
    const CALLERS: usize = 100;
    let clock = clock(harness);
    let limiters = [
        limiter(harness.open().await, &clock),
        limiter(harness.open().await, &clock),
    ];
    let id = unique();
    let pool = ok(rule("mixed", MAX, Window::HOUR, 1).limit(&[&id]), "limit");
    let roomy = ok(
        rule("roomy", 10_000, Window::HOUR, 1).limit(&[&id]),
        "limit",
    );
    let next = std::sync::atomic::AtomicU64::new(0);
    let outcomes = race_all(&limiters, CALLERS, |limiter| {
        let cost = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 7 + 1;
        let limits = [costed(&pool, cost), costed(&roomy, cost)];
        async move {
            (
                cost,
                ok(limiter.reserve(&limits).await, "reserve").is_allowed(),
            )
        }
    })
    .await;
    let spent: u64 = outcomes.iter().filter(|(_, a)| *a).map(|(c, _)| c).sum();
    assert!(
        spent <= MAX,
        "racing reservations spent {spent} of a max of {MAX}"
    );
    let left = ok(
        limiters[0].remaining(&[pool.clone(), roomy.clone()]).await,
        "remaining",
    );
    assert_eq!(
        left[0].remaining(),
        (MAX - spent) as i64,
        "the pool must hold exactly what was allowed"
    );
    assert_eq!(
        left[1].remaining(),
        (10_000 - spent) as i64,
        "every counter gets every allowed cost"
    );
    let room = MAX - spent;
    for (cost, allowed) in &outcomes {
        assert!(
            *allowed || room < *cost,
            "a cost of {cost} was refused with {room} left"
        );
    }

    let ones = race_all(&limiters, room as usize + 10, |limiter| {
        let limits = [pool.clone(), roomy.clone()];
        async move { ok(limiter.reserve(&limits).await, "reserve").is_allowed() }
    })
    .await;
    let filled = ones.iter().filter(|a| **a).count() as u64;
    assert_eq!(
        filled, room,
        "{room} left: cost-1 callers must fill it exactly"
    );
    let left = ok(
        limiters[1].remaining(std::slice::from_ref(&pool)).await,
        "remaining",
    );
    assert_eq!(
        left[0].remaining(),
        0,
        "the pool must end exactly at its max"
    );
}

/// A cost above the max is refused by a reservation, which changes
/// nothing (no counter is created), and counted as over by a count.
pub async fn a_cost_above_max_is_refused_and_counted_over<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let store = harness.open().await;
    let id = unique();
    let big = ok(
        rule("big", 10, Window::HOUR, 2).limit(&[&id, "fresh"]),
        "limit",
    );
    let big = costed(&big, 11);
    let verdict = ok(limiter.reserve(std::slice::from_ref(&big)).await, "reserve");
    let limited = verdict
        .limited()
        .unwrap_or_else(|| panic!("a cost of 11 over a max of 10"));
    assert_eq!(limited.limit(), "big");
    assert!(!verdict.has_spent());
    let key = big.counter(tollgate_core::Clock::now(&clock).as_secs()).key;
    assert_eq!(
        harness.expiry(&key).await,
        Expiry::Absent,
        "a refused reservation created a counter"
    );

    let direct = format!("limit:big:{id}:direct:1");
    ok(
        store
            .count(&[counter(&direct, 3, 10)], CheckId::new(), deadline())
            .await,
        "count",
    );
    let reply = ok(
        store
            .reserve(&[counter(&direct, 11, 10)], CheckId::new(), deadline())
            .await,
        "reserve",
    );
    assert!(!reply.applied, "a cost above max never fits");
    assert_eq!(
        reply.counts,
        [3],
        "a refused reservation reports the current count"
    );
    let fresh = format!("limit:big:{id}:direct-fresh:1");
    let reply = ok(
        store
            .reserve(&[counter(&fresh, 11, 10)], CheckId::new(), deadline())
            .await,
        "reserve",
    );
    assert_eq!((reply.applied, reply.counts), (false, vec![0]));
    assert_eq!(
        ok(store.get(&[direct, fresh.clone()], deadline()).await, "get"),
        [3, 0]
    );
    assert_eq!(harness.expiry(&fresh).await, Expiry::Absent);

    let verdict = ok(limiter.count(std::slice::from_ref(&big)).await, "count");
    assert!(
        !verdict.is_allowed(),
        "a counted cost of 11 is over a max of 10"
    );
    assert_eq!(
        verdict.usage()[0].remaining(),
        -1,
        "a count takes the whole cost"
    );
}

/// A reservation in which one counter cannot fit its cost changes no
/// counter, whether the others exist or not; once that counter fits
/// exactly, every cost is added.
pub async fn a_reservation_that_cannot_fit_one_cost_changes_nothing<H: Harness>(harness: &H) {
    let _ = clock(harness);
    let store = harness.open().await;
    let id = unique();
    let [a, b, c] = ["a", "b", "c"].map(|k| format!("limit:fit:{id}:{k}:1"));
    ok(
        store
            .count(
                &[counter(&a, 5, 10), counter(&b, 8, 10)],
                CheckId::new(),
                deadline(),
            )
            .await,
        "count",
    );
    let batch = [counter(&a, 5, 10), counter(&b, 3, 10), counter(&c, 1, 10)];
    for _ in 0..3 {
        let reply = ok(
            store.reserve(&batch, CheckId::new(), deadline()).await,
            "reserve",
        );
        assert!(!reply.applied, "8 + 3 does not fit in 10");
        assert_eq!(
            reply.counts,
            [5, 8, 0],
            "a refused reservation reports the current counts"
        );
    }
    let keys = [a.clone(), b.clone(), c.clone()];
    assert_eq!(
        ok(store.get(&keys, deadline()).await, "get"),
        [5, 8, 0],
        "a refused reservation changed a counter"
    );
    assert_eq!(
        harness.expiry(&c).await,
        Expiry::Absent,
        "a refused reservation created a counter"
    );

    let fits = [counter(&a, 5, 10), counter(&b, 2, 10), counter(&c, 1, 10)];
    let reply = ok(
        store.reserve(&fits, CheckId::new(), deadline()).await,
        "reserve",
    );
    assert_eq!(
        (reply.applied, reply.counts),
        (true, vec![10, 10, 1]),
        "every cost fits exactly"
    );
    assert_eq!(ok(store.get(&keys, deadline()).await, "get"), [10, 10, 1]);
}

/// Costs near the bounds: with max = MAX_MAX (2^53 - 1) a reservation
/// fills the counter exactly and never over-admits; counts saturate at
/// MAX_COUNT (2^53) and never wrap; a refund from the top floors at zero.
pub async fn costs_near_the_bounds_never_wrap<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let store = harness.open().await;
    let id = unique();
    let key = format!("limit:bounds:{id}:top:1");
    let reserve = |cost| {
        let batch = [counter(&key, cost, MAX_MAX)];
        let store = &store;
        async move {
            ok(
                store.reserve(&batch, CheckId::new(), deadline()).await,
                "reserve",
            )
        }
    };
    let reply = reserve(MAX_MAX - 1).await;
    assert_eq!((reply.applied, reply.counts), (true, vec![MAX_MAX - 1]));
    let reply = reserve(2).await;
    assert_eq!(
        (reply.applied, reply.counts),
        (false, vec![MAX_MAX - 1]),
        "over-admitted past MAX_MAX"
    );
    let reply = reserve(MAX_COUNT).await;
    assert_eq!(
        (reply.applied, reply.counts),
        (false, vec![MAX_MAX - 1]),
        "over-admitted past MAX_MAX"
    );
    let reply = reserve(1).await;
    assert_eq!(
        (reply.applied, reply.counts),
        (true, vec![MAX_MAX]),
        "the last unit fits exactly"
    );
    let reply = reserve(1).await;
    assert_eq!(
        (reply.applied, reply.counts),
        (false, vec![MAX_MAX]),
        "a full counter admitted one more"
    );

    let top = [counter(&key, 1, MAX_MAX)];
    assert_eq!(
        ok(store.count(&top, CheckId::new(), deadline()).await, "count"),
        [MAX_COUNT]
    );
    assert_eq!(
        ok(store.count(&top, CheckId::new(), deadline()).await, "count"),
        [MAX_COUNT],
        "a count wrapped past 2^53"
    );
    let huge = [counter(&key, MAX_COUNT, MAX_MAX)];
    assert_eq!(
        ok(
            store.count(&huge, CheckId::new(), deadline()).await,
            "count"
        ),
        [MAX_COUNT],
        "a count wrapped past 2^53"
    );
    assert_eq!(
        reserve(1).await,
        tollgate_core::Reservation {
            applied: false,
            counts: vec![MAX_COUNT]
        }
    );
    assert_eq!(
        ok(
            store.get(std::slice::from_ref(&key), deadline()).await,
            "get"
        ),
        [MAX_COUNT]
    );
    assert_eq!(
        ok(
            store
                .refund(
                    &[counter(&key, MAX_COUNT - 2, MAX_MAX)],
                    CheckId::new(),
                    deadline()
                )
                .await,
            "refund"
        ),
        [2]
    );
    assert_eq!(
        ok(
            store.refund(&huge, CheckId::new(), deadline()).await,
            "refund"
        ),
        [0]
    );

    let fresh = format!("limit:bounds:{id}:fresh:1");
    let once = [counter(&fresh, MAX_COUNT, MAX_MAX)];
    assert_eq!(
        ok(
            store.count(&once, CheckId::new(), deadline()).await,
            "count"
        ),
        [MAX_COUNT]
    );
    assert_eq!(
        ok(
            store.count(&once, CheckId::new(), deadline()).await,
            "count"
        ),
        [MAX_COUNT],
        "a count wrapped past 2^53"
    );

    let all = ok(
        rule("bounds", MAX_MAX, Window::DAY, 1).limit(&[&id]),
        "limit",
    );
    let verdict = ok(limiter.reserve(&[costed(&all, MAX_MAX)]).await, "reserve");
    assert!(
        verdict.is_allowed(),
        "a cost of exactly the max fits an empty counter"
    );
    assert_eq!(verdict.usage()[0].remaining(), 0);
    assert!(!ok(limiter.reserve(std::slice::from_ref(&all)).await, "reserve").is_allowed());
    let verdict = ok(limiter.count(&[costed(&all, MAX_COUNT)]).await, "count");
    assert_eq!(
        verdict.usage()[0].remaining(),
        -1,
        "a count saturates at 2^53, one past MAX_MAX"
    );
    assert!(!verdict.is_allowed());
}
