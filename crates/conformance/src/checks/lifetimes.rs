//! Lifetimes: a counter lives until its window ends and no longer than its
//! ttl after its latest increment; a mark lives as long as it was asked to.

use std::time::Duration;

use tollgate_core::{
    Algorithm, CheckId, Claim, Clock, Counter, CounterStore, Limit, MarkStore, Window,
};

use crate::support::{
    SLACK, assert_fresh_lifetime, assert_gone, clock, deadline, lifetime, lifetime_windows,
    limiter, ok, rule, unique,
};
use crate::{Expiry, Harness};

/// A limit of a one-part rule named after `window`, for principal `who`.
fn limit(window: Window, who: &str, cost: u64) -> Limit {
    let limit = rule(&format!("life{}", window.secs()), 100, window, 1).limit(&[who]);
    ok(ok(limit, "limit").with_cost(cost), "cost")
}

fn counter(key: &str, ttl: Duration, cost: u64) -> Counter {
    Counter {
        key: key.to_owned(),
        ttl,
        cost,
        max: 100,
        floor: 0,
        prior: None,
        lease: false,
    }
}

/// Every counter lives at least until its window ends and at most two
/// windows (never more than its ttl after its latest write), whichever way it
/// was written: counted, reserved or refunded, through the limiter or
/// directly, on windows of an hour, a day and a long custom window. A store
/// that ignores `ttl` (say, always 60 s) fails here.
pub async fn every_counter_lives_until_its_window_ends_within_two_windows<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let store = harness.open().await;
    let id = unique();
    for window in lifetime_windows() {
        let now = clock.now().as_secs();
        let index = window.index(now);
        let left_in_window = Duration::from_secs(window.end(index) - now);
        let ttl = window.duration();
        assert!(
            ttl >= left_in_window + SLACK,
            "premise: the check starts after its windows do"
        );
        let counted = limit(window, &format!("{id}-count"), 3);
        let reserved = limit(window, &format!("{id}-reserve"), 3);
        let refunded = limit(window, &format!("{id}-refund"), 5);
        ok(limiter.count(std::slice::from_ref(&counted)).await, "count");
        assert!(
            ok(
                limiter.reserve(std::slice::from_ref(&reserved)).await,
                "reserve"
            )
            .is_allowed()
        );
        let spent = ok(
            limiter.count(std::slice::from_ref(&refunded)).await,
            "count",
        );
        ok(
            limiter.refund(&spent, refunded.rule().name(), 2).await,
            "refund",
        );
        for limit in [&counted, &reserved, &refunded] {
            let key = limit.counter_key(index);
            assert_fresh_lifetime(harness, &key, ttl).await;
            let left = lifetime(harness, &key).await;
            assert!(
                left + SLACK >= left_in_window,
                "{key} expires before its window ends"
            );
            assert!(
                left <= ttl * 2,
                "{key} lives {left:?}, over two windows of {window}"
            );
        }

        let direct = format!("limit:life:{id}:direct:{}", window.secs());
        let [c, r, f] =
            ["count", "reserve", "refund"].map(|how| counter(&format!("{direct}:{how}"), ttl, 4));
        assert_eq!(
            ok(
                store
                    .count(std::slice::from_ref(&c), CheckId::new(), deadline())
                    .await,
                "count"
            ),
            [4]
        );
        let reservation = ok(
            store
                .reserve(std::slice::from_ref(&r), CheckId::new(), deadline())
                .await,
            "reserve",
        );
        assert!(
            reservation.applied,
            "a reservation of 4 of 100 on a fresh counter"
        );
        ok(
            store
                .count(std::slice::from_ref(&f), CheckId::new(), deadline())
                .await,
            "count",
        );
        let back = counter(&f.key, ttl, 1);
        assert_eq!(
            ok(
                store.refund(&[back], CheckId::new(), deadline()).await,
                "refund"
            ),
            [3]
        );
        for key in [&c.key, &r.key, &f.key] {
            assert_fresh_lifetime(harness, key, ttl).await;
        }
    }
}

/// Moving the store's own clock (when the harness can): a counter still
/// counts 1 ms before its window ends, and is gone once its ttl has passed
/// after its latest increment; a refund does not extend it. A store may
/// give a counter its lifetime when it creates it (Redis) or again at every
/// increment (the others): both live past their window's end, and neither
/// outlives the ttl after the latest increment, which is all this asserts.
/// Without a store clock, the store keeps real time: a refund made 1.5 s
/// after the count must leave 1.5 s less to live than the ttl.
pub async fn counters_expire_ttl_after_their_latest_increment<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let store = harness.open().await;
    let id = unique();
    let Some(store_clock) = harness.store_clock() else {
        return refund_keeps_lifetime_in_real_time(harness, &store, &id).await;
    };
    for window in lifetime_windows() {
        let ttl = window.duration();
        let start = store_clock.now();
        let index = window.index(start.as_secs());
        let end = Duration::from_secs(window.end(index));
        let twice = limit(window, &format!("{id}-twice"), 2);
        let once = limit(window, &format!("{id}-once"), 2);
        let refunded = limit(window, &format!("{id}-refunded"), 5);
        ok(limiter.count(std::slice::from_ref(&twice)).await, "count");
        assert!(
            ok(
                limiter.reserve(std::slice::from_ref(&once)).await,
                "reserve"
            )
            .is_allowed()
        );
        let spent = ok(
            limiter.count(std::slice::from_ref(&refunded)).await,
            "count",
        );

        let middle = start + (end - start) / 2;
        store_clock.set(middle);
        ok(limiter.count(std::slice::from_ref(&twice)).await, "count");
        ok(
            limiter.refund(&spent, refunded.rule().name(), 2).await,
            "refund",
        );

        store_clock.set(end - Duration::from_millis(1));
        let keys: Vec<String> = [&twice, &once, &refunded]
            .iter()
            .map(|l| l.counter_key(index))
            .collect();
        assert_eq!(
            ok(store.get(&keys, deadline()).await, "get"),
            [4, 2, 3],
            "counters of a {window} window must count until it ends"
        );
        let left = ok(
            limiter.remaining(std::slice::from_ref(&twice)).await,
            "remaining",
        );
        assert_eq!(
            left[0].remaining(),
            96,
            "the limiter reads the counter 1 ms before the end"
        );

        store_clock.set(start + ttl + Duration::from_millis(1));
        assert_gone(harness, &store, &keys[1]).await;
        assert_gone(harness, &store, &keys[2]).await;
        store_clock.set(middle + ttl + Duration::from_millis(1));
        assert_gone(harness, &store, &keys[0]).await;
    }
}

/// The real-time half of [`counters_expire_ttl_after_their_latest_increment`].
async fn refund_keeps_lifetime_in_real_time<H: Harness>(
    harness: &H,
    store: &impl CounterStore,
    id: &str,
) {
    const PAUSE: Duration = Duration::from_millis(1_500);
    let ttl = Window::HOUR.duration();
    let counted = counter(&format!("limit:life:{id}:refund-later:1"), ttl, 5);
    ok(
        store
            .count(std::slice::from_ref(&counted), CheckId::new(), deadline())
            .await,
        "count",
    );
    tokio::time::sleep(PAUSE).await;
    let back = counter(&counted.key, ttl, 2);
    assert_eq!(
        ok(
            store.refund(&[back], CheckId::new(), deadline()).await,
            "refund"
        ),
        [3]
    );
    let left = lifetime(harness, &counted.key).await;
    assert!(
        left + PAUSE <= ttl + Duration::from_millis(1_250),
        "{} lives {left:?} after a refund {PAUSE:?} after its count: the refund extended it",
        counted.key
    );
}

/// A mark lives as long as it was asked to: a claim's lease ends at its
/// ttl, and then another token claims the id; a done mark ends at its own
/// ttl. Read from the storage, and by moving the store's clock when the
/// harness can.
pub async fn a_mark_lease_ends_at_its_ttl<H: Harness>(harness: &H) {
    const LEASE: Duration = Duration::from_secs(90);
    const DONE: Duration = Duration::from_secs(600);
    let _ = clock(harness);
    let store = harness.open().await;
    let id = unique();
    let leased = format!("mark:{id}:leased");
    let done = format!("mark:{id}:done");
    let claim = store.claim(&leased, "first", LEASE, deadline()).await;
    assert_eq!(ok(claim, "claim"), Claim::Acquired);
    assert_fresh_lifetime(harness, &leased, LEASE).await;
    assert!(ok(
        store.finish(&done, "first", DONE, deadline()).await,
        "finish"
    ));
    assert_fresh_lifetime(harness, &done, DONE).await;
    assert_eq!(
        harness.expiry(&format!("mark:{id}:absent")).await,
        Expiry::Absent
    );

    let Some(store_clock) = harness.store_clock() else {
        return;
    };
    let start = store_clock.now();
    store_clock.set(start + LEASE - Duration::from_millis(1));
    let early = store.claim(&leased, "second", LEASE, deadline()).await;
    assert_eq!(
        ok(early, "claim"),
        Claim::Held,
        "a lease must hold until its ttl"
    );
    store_clock.set(start + LEASE + Duration::from_millis(1));
    let late = store.claim(&leased, "second", LEASE, deadline()).await;
    assert_eq!(
        ok(late, "claim"),
        Claim::Acquired,
        "a lease must end at its ttl"
    );

    store_clock.set(start + DONE - Duration::from_millis(1));
    let early = store.claim(&done, "second", LEASE, deadline()).await;
    assert_eq!(
        ok(early, "claim"),
        Claim::Held,
        "a done mark must hold until its ttl"
    );
    store_clock.set(start + DONE + Duration::from_millis(1));
    let late = store.claim(&done, "second", LEASE, deadline()).await;
    assert_eq!(
        ok(late, "claim"),
        Claim::Acquired,
        "a done mark must end at its ttl"
    );
}

/// A sliding window's counters live two windows (the next window still
/// reads them), however written through the limiter: counted, reserved,
/// settled past the estimate. A GCRA counter lives until its bucket is
/// full again and then its rule's ttl: counted or reserved, its lifetime
/// runs from the time it holds.
pub async fn sliding_and_gcra_counters_live_as_long_as_they_count<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let id = unique();
    let now = clock.now().as_secs();
    let sliding = rule("life-sliding", 100, Window::HOUR, 1).with_algorithm(Algorithm::Sliding);
    let [counted, reserved, settled] = ["count", "reserve", "settle"].map(|how| {
        ok(
            ok(sliding.limit(&[format!("{id}-{how}")]), "limit").with_cost(3),
            "cost",
        )
    });
    ok(limiter.count(std::slice::from_ref(&counted)).await, "count");
    assert!(
        ok(
            limiter.reserve(std::slice::from_ref(&reserved)).await,
            "reserve"
        )
        .is_allowed()
    );
    let spent = ok(
        limiter.reserve(std::slice::from_ref(&settled)).await,
        "reserve",
    );
    ok(limiter.settle(&spent, sliding.name(), 5).await, "settle");
    for limit in [&counted, &reserved, &settled] {
        let key = limit.current_key(now);
        assert_fresh_lifetime(harness, &key, 2 * Window::HOUR.duration()).await;
    }
    // 60 an hour: one a minute; 5 at once puts the bucket 5 minutes ahead.
    let gcra = rule("life-gcra", 60, Window::HOUR, 1).with_algorithm(Algorithm::Gcra);
    let gcra = ok(gcra.with_burst(10), "burst");
    let ahead = Duration::from_secs(5 * 60);
    for (how, reserve) in [("count", false), ("reserve", true)] {
        let limit = ok(
            ok(gcra.limit(&[format!("{id}-{how}")]), "limit").with_cost(5),
            "cost",
        );
        let verdict = if reserve {
            limiter.reserve(std::slice::from_ref(&limit)).await
        } else {
            limiter.count(std::slice::from_ref(&limit)).await
        };
        assert!(ok(verdict, how).is_allowed());
        let key = limit.current_key(now);
        assert_fresh_lifetime(harness, &key, gcra.counter_ttl() + ahead).await;
    }
}
