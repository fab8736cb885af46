//! Refunds and settles: giving back what a call did not use.

use std::time::Duration;

use tollgate_core::{CheckId, Clock, Counter, CounterStore, Error, Limit, Window};

use crate::support::{clock, deadline, limiter, ok, rule, unique};
use crate::{Expiry, Harness};

fn counter(key: &str, cost: u64) -> Counter {
    Counter {
        key: key.to_owned(),
        ttl: Duration::from_secs(3_600),
        cost,
        max: 100,
        floor: 0,
        prior: None,
        lease: false,
    }
}

fn costed(limit: &Limit, cost: u64) -> Limit {
    ok(limit.clone().with_cost(cost), "cost")
}

/// Refunds floor at zero: the store gives back at most the count (a batch
/// refund of more than the count reads 0, and the next count starts from
/// 0), and `Limiter::refund` gives back at most what the check spent, even
/// when other calls counted since.
pub async fn refunds_floor_at_zero<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let store = harness.open().await;
    let id = unique();
    let [a, b] = ["a", "b"].map(|k| format!("limit:refund:{id}:{k}:1"));
    ok(
        store
            .count(
                &[counter(&a, 5), counter(&b, 2)],
                CheckId::new(),
                deadline(),
            )
            .await,
        "count",
    );
    let refunded = ok(
        store
            .refund(
                &[counter(&a, 3), counter(&b, 7)],
                CheckId::new(),
                deadline(),
            )
            .await,
        "refund",
    );
    assert_eq!(
        refunded,
        [2, 0],
        "a refund of more than the count floors at 0"
    );
    let refunded = ok(
        store
            .refund(
                &[counter(&a, 3), counter(&b, 1)],
                CheckId::new(),
                deadline(),
            )
            .await,
        "refund",
    );
    assert_eq!(refunded, [0, 0], "a refund of a counter at 0 stays at 0");
    let read = ok(store.get(&[a.clone(), b.clone()], deadline()).await, "get");
    assert_eq!(read, [0, 0], "a refund went below zero");
    for key in [&a, &b] {
        assert_ne!(
            harness.expiry(key).await,
            Expiry::Never,
            "{key} lost its lifetime in a refund"
        );
    }
    assert_eq!(
        ok(
            store
                .count(&[counter(&a, 1)], CheckId::new(), deadline())
                .await,
            "count"
        ),
        [1],
        "a refund left a debt"
    );

    let limit = ok(rule("spend", 100, Window::HOUR, 1).limit(&[&id]), "limit");
    let spent = ok(limiter.reserve(&[costed(&limit, 5)]).await, "reserve");
    ok(limiter.count(&[costed(&limit, 3)]).await, "count");
    ok(limiter.refund(&spent, "spend", 100).await, "refund");
    let left = ok(
        limiter.remaining(std::slice::from_ref(&limit)).await,
        "remaining",
    );
    assert_eq!(
        left[0].remaining(),
        97,
        "a refund gives back at most the 5 its check spent"
    );
    let spent = ok(limiter.count(&[costed(&limit, 4)]).await, "count");
    ok(limiter.refund(&spent, "spend", 1).await, "refund");
    ok(limiter.refund(&spent, "spend", 100).await, "refund");
    let left = ok(
        limiter.remaining(std::slice::from_ref(&limit)).await,
        "remaining",
    );
    assert_eq!(
        left[0].remaining(),
        97,
        "1, then the other 3 of the 4 spent, given back"
    );
    ok(limiter.refund(&spent, "spend", 100).await, "refund");
    let clone = spent.clone();
    ok(limiter.refund(&clone, "spend", 100).await, "refund");
    let left = ok(
        limiter.remaining(std::slice::from_ref(&limit)).await,
        "remaining",
    );
    assert_eq!(
        left[0].remaining(),
        97,
        "a verdict (or a clone of it) gave back more than it spent"
    );

    let small = ok(
        rule("spend-small", 2, Window::HOUR, 1).limit(&[&id]),
        "limit",
    );
    let refused = ok(limiter.reserve(&[costed(&small, 3)]).await, "reserve");
    ok(limiter.count(std::slice::from_ref(&small)).await, "count");
    ok(limiter.refund(&refused, "spend-small", 3).await, "refund");
    let left = ok(
        limiter.remaining(std::slice::from_ref(&small)).await,
        "remaining",
    );
    assert_eq!(
        left[0].remaining(),
        1,
        "a refused reservation gives nothing back"
    );
    let missing = limiter.refund(&spent, "no-such-rule", 1).await;
    assert!(matches!(missing, Err(Error::NotSpent(_))), "{missing:?}");
}

/// A refund of an absent counter keeps it absent: it reads 0 and has no
/// lifetime, alone or in a batch with a counter that exists, and after an
/// operator reset the limiter's refund creates nothing either.
pub async fn refunding_an_absent_counter_keeps_it_absent<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let store = harness.open().await;
    let id = unique();
    let [absent, present] = ["absent", "present"].map(|k| format!("limit:refund:{id}:{k}:1"));
    assert_eq!(
        ok(
            store
                .refund(&[counter(&absent, 3)], CheckId::new(), deadline())
                .await,
            "refund"
        ),
        [0]
    );
    ok(
        store
            .count(&[counter(&present, 5)], CheckId::new(), deadline())
            .await,
        "count",
    );
    let both = [counter(&absent, 3), counter(&present, 2)];
    assert_eq!(
        ok(
            store.refund(&both, CheckId::new(), deadline()).await,
            "refund"
        ),
        [0, 3]
    );
    assert_eq!(
        ok(
            store.get(&[absent.clone(), present], deadline()).await,
            "get"
        ),
        [0, 3]
    );
    assert_eq!(
        harness.expiry(&absent).await,
        Expiry::Absent,
        "a refund created a counter"
    );

    let limit = ok(
        rule("reset-refund", 10, Window::HOUR, 1).limit(&[&id]),
        "limit",
    );
    let spent = ok(limiter.count(&[costed(&limit, 4)]).await, "count");
    assert!(ok(limiter.reset(&limit).await, "reset"));
    ok(limiter.refund(&spent, "reset-refund", 4).await, "refund");
    let key = limit.counter(clock.now().as_secs()).key;
    assert_eq!(
        harness.expiry(&key).await,
        Expiry::Absent,
        "a refund after a reset created a counter"
    );
}

/// A refund (or settle) after the window rolled over changes nothing: the
/// new window's counter is untouched and the old one keeps its count, while
/// a settle's excess is counted on the current window.
pub async fn a_refund_after_the_window_rolled_over_changes_nothing<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let store = harness.open().await;
    let id = unique();
    let limit = ok(
        rule("rollover", 100, Window::HOUR, 1).limit(&[&id]),
        "limit",
    );
    let old = ok(limiter.count(&[costed(&limit, 3)]).await, "count");
    let old_key = limit.counter(clock.now().as_secs()).key;
    clock.set(Duration::from_secs(
        Window::HOUR.reset(clock.now().as_secs()),
    ));
    let new_key = limit.counter(clock.now().as_secs()).key;
    assert_ne!(old_key, new_key);
    ok(limiter.count(&[costed(&limit, 2)]).await, "count");
    ok(limiter.refund(&old, "rollover", 3).await, "refund");
    ok(limiter.settle(&old, "rollover", 1).await, "settle");
    let read = ok(
        store
            .get(&[old_key.clone(), new_key.clone()], deadline())
            .await,
        "get",
    );
    assert_eq!(
        read,
        [3, 2],
        "a refund after the window rolled over changed a counter"
    );
    ok(limiter.settle(&old, "rollover", 5).await, "settle");
    let read = ok(store.get(&[old_key, new_key], deadline()).await, "get");
    assert_eq!(
        read,
        [3, 4],
        "a settle's excess is counted on the current window only"
    );
}

/// Settling an estimate: below it refunds the difference, above it counts
/// the excess (which may take the counter past its max), equal changes
/// nothing; a refused reservation settles nothing.
pub async fn settle_refunds_or_counts_the_difference<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let id = unique();
    let tokens = ok(rule("tokens", 100, Window::DAY, 1).limit(&[&id]), "limit");
    let calls = ok(rule("calls", 10, Window::DAY, 1).limit(&[&id]), "limit");
    let left = async |limiter: &tollgate_core::Limiter| {
        let usage = ok(
            limiter.remaining(&[tokens.clone(), calls.clone()]).await,
            "remaining",
        );
        (usage[0].remaining(), usage[1].remaining())
    };
    let spent = ok(
        limiter.reserve(&[costed(&tokens, 40), calls.clone()]).await,
        "reserve",
    );
    assert!(spent.is_allowed());
    ok(limiter.settle(&spent, "tokens", 25).await, "settle");
    assert_eq!(
        left(&limiter).await,
        (75, 9),
        "a settle below the estimate refunds the difference"
    );
    let spent = ok(
        limiter.reserve(&[costed(&tokens, 40), calls.clone()]).await,
        "reserve",
    );
    ok(limiter.settle(&spent, "tokens", 40).await, "settle");
    assert_eq!(
        left(&limiter).await,
        (35, 8),
        "a settle equal to the estimate changes nothing"
    );
    let spent = ok(
        limiter.reserve(&[costed(&tokens, 30), calls.clone()]).await,
        "reserve",
    );
    ok(limiter.settle(&spent, "tokens", 57).await, "settle");
    assert_eq!(
        left(&limiter).await,
        (-22, 7),
        "a settle above the estimate counts the excess, past max"
    );
    let refused = ok(
        limiter.reserve(&[costed(&tokens, 1), calls.clone()]).await,
        "reserve",
    );
    assert!(!refused.is_allowed());
    ok(limiter.settle(&refused, "tokens", 50).await, "settle");
    assert_eq!(
        left(&limiter).await,
        (-22, 7),
        "a refused reservation settles nothing"
    );
    let counted = ok(limiter.count(&[costed(&tokens, 10)]).await, "count");
    ok(limiter.settle(&counted, "tokens", 4).await, "settle");
    assert_eq!(
        left(&limiter).await,
        (-26, 7),
        "a counted estimate settles like a reserved one"
    );
}
