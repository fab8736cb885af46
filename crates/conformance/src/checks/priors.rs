//! Priors: a counter whose max makes room for part of another counter's
//! count (a sliding window's previous window), read in the same atomic step
//! and answered after the counts.

use std::time::Duration;

use tollgate_core::{Algorithm, CheckId, Clock, Counter, CounterStore, MAX_COUNT, Prior, Window};

use crate::Harness;
use crate::support::{clock, deadline, limiter, ok, rule, unique, window};

/// A counter at `key` of `cost` within `max`, with a prior at `prior`
/// weighed `part / whole`.
fn counter(key: &str, cost: u64, max: u64, prior: Option<(&str, u64, u64)>) -> Counter {
    Counter {
        key: key.to_owned(),
        ttl: Duration::from_secs(3_600),
        cost,
        max,
        floor: 0,
        prior: prior.map(|(key, part, whole)| Prior {
            key: key.to_owned(),
            part,
            whole,
        }),
        lease: false,
    }
}

async fn get(store: &impl CounterStore, key: &str) -> u64 {
    ok(store.get(&[key.to_owned()], deadline()).await, "get")[0]
}

/// Counts and reservations check a counter against its max less its
/// prior's weighed count, answer each prior's count after the counts (an
/// absent prior reads 0), never write a prior, and refuse all or nothing
/// with the batch's other counters; a refund ignores priors.
pub async fn a_prior_lowers_the_max_by_its_weighed_count<H: Harness>(harness: &H) {
    let store = harness.open().await;
    let id = unique();
    let [previous, current, plain, other, absent] =
        ["p", "c", "plain", "o", "absent"].map(|k| format!("limit:prior:{id}:{k}"));
    // The previous window holds 10; 3/10 of it weighs 3.
    let ten = counter(&previous, 10, MAX_COUNT, None);
    assert_eq!(
        ok(
            store.count(&[ten], CheckId::new(), deadline()).await,
            "count"
        ),
        [10]
    );
    let weighed = |cost, max| counter(&current, cost, max, Some((&previous, 3, 10)));
    // 8 does not fit 10 − 3.
    let refused = ok(
        store
            .reserve(&[weighed(8, 10)], CheckId::new(), deadline())
            .await,
        "reserve",
    );
    assert_eq!(
        (refused.applied, refused.counts),
        (false, vec![0, 10]),
        "8 fits a max of 10 less 3 of the prior's 10, or the prior's count is not answered"
    );
    let applied = ok(
        store
            .reserve(&[weighed(7, 10)], CheckId::new(), deadline())
            .await,
        "reserve",
    );
    assert_eq!((applied.applied, applied.counts), (true, vec![7, 10]));
    // A count adds regardless, and answers the prior too.
    let counted = ok(
        store
            .count(&[weighed(1, 10)], CheckId::new(), deadline())
            .await,
        "count",
    );
    assert_eq!(counted, [8, 10]);
    assert_eq!(get(&store, &previous).await, 10, "the prior was written");
    // Priors answered in counter order, after every count; all or nothing
    // with a counter that has none; an absent prior reads 0 and stays absent.
    let batch = [
        counter(&other, 2, 2, Some((&absent, 1, 1))),
        counter(&plain, 1, 5, None),
        counter(&current, 1, 20, Some((&previous, 10, 10))),
    ];
    let mixed = ok(
        store.reserve(&batch, CheckId::new(), deadline()).await,
        "reserve",
    );
    assert_eq!(
        (mixed.applied, mixed.counts),
        (true, vec![2, 1, 9, 0, 10]),
        "counts in order, then each prior's count in order"
    );
    let blocked = [
        counter(&plain, 1, 5, None),
        counter(&current, 2, 20, Some((&previous, 10, 10))),
    ];
    let no = ok(
        store.reserve(&blocked, CheckId::new(), deadline()).await,
        "reserve",
    );
    assert_eq!(
        (no.applied, no.counts),
        (false, vec![1, 9, 10]),
        "9 + 2 fits 20 less all of 10"
    );
    assert_eq!(get(&store, &plain).await, 1, "a refused batch added a cost");
    assert!(
        !ok(store.delete(&absent, deadline()).await, "delete"),
        "reading an absent prior created it"
    );
    // A refund ignores priors: one count per counter.
    let back = ok(
        store
            .refund(&[weighed(1, 10)], CheckId::new(), deadline())
            .await,
        "refund",
    );
    assert_eq!(
        back,
        [8],
        "a refund answered a prior or moved the counter otherwise"
    );
}

/// The weighed count is exact at the bounds: a prior at 2^53 weighed by a
/// year's window less a second (products far past 2^64) leaves room for
/// exactly `2^53 − floor(2^53 × (W − 1) / W)`.
pub async fn a_prior_is_weighed_exactly_at_the_bounds<H: Harness>(harness: &H) {
    let store = harness.open().await;
    let id = unique();
    let [previous, current] = ["p", "c"].map(|k| format!("limit:prior:{id}:{k}"));
    let full = counter(&previous, MAX_COUNT, MAX_COUNT, None);
    ok(
        store.count(&[full], CheckId::new(), deadline()).await,
        "count",
    );
    let whole = Window::MAX_SECS;
    for part in [whole - 1, 1, whole / 3] {
        let prior = Prior {
            key: previous.clone(),
            part,
            whole,
        };
        let room = MAX_COUNT - prior.weighed(MAX_COUNT);
        let at = |cost| counter(&current, cost, MAX_COUNT, Some((&previous, part, whole)));
        let over = ok(
            store
                .reserve(&[at(room + 1)], CheckId::new(), deadline())
                .await,
            "reserve",
        );
        assert!(
            !over.applied,
            "{part}/{whole}: {} fit a room of {room}",
            room + 1
        );
        let fits = ok(
            store.reserve(&[at(room)], CheckId::new(), deadline()).await,
            "reserve",
        );
        assert_eq!(
            (fits.applied, fits.counts),
            (true, vec![room, MAX_COUNT]),
            "{part}/{whole}: the room of {room} was not exact"
        );
        ok(store.delete(&current, deadline()).await, "delete");
    }
}

/// A retried count or reservation answers the prior's count its first
/// attempt read, even after the prior moved since.
pub async fn a_retry_answers_the_prior_it_read<H: Harness>(harness: &H) {
    let store = harness.open().await;
    let id = unique();
    let [previous, current] = ["p", "c"].map(|k| format!("limit:prior:{id}:{k}"));
    let prior = |cost| counter(&previous, cost, MAX_COUNT, None);
    ok(
        store.count(&[prior(4)], CheckId::new(), deadline()).await,
        "count",
    );
    let weighed = counter(&current, 1, 10, Some((&previous, 1, 2)));
    let batch = std::slice::from_ref(&weighed);
    let (reserved, counted, at) = (CheckId::new(), CheckId::new(), deadline());
    let first = ok(store.reserve(batch, reserved, at).await, "reserve");
    assert_eq!((first.applied, &first.counts[..]), (true, &[1, 4][..]));
    let count = ok(store.count(batch, counted, at).await, "count");
    assert_eq!(count, [2, 4]);
    ok(
        store.count(&[prior(6)], CheckId::new(), deadline()).await,
        "count",
    );
    let again = ok(store.reserve(batch, reserved, at).await, "retry");
    assert_eq!(again, first, "a retried reservation answered another prior");
    let again = ok(store.count(batch, counted, at).await, "retry");
    assert_eq!(again, count, "a retried count answered another prior");
    assert_eq!(get(&store, &current).await, 2, "a retry was applied twice");
}

/// A sliding window right after a full previous window admits, `e`
/// seconds into it, exactly what the previous window's weight `(W − e) / W`
/// leaves: nothing at its start, `e` units of 10 in a 10 s window (each
/// check by a new limiter, which keeps no count: the store reads the
/// previous window with the reservation).
pub async fn a_sliding_window_weighs_its_previous_window_by_the_time_left<H: Harness>(harness: &H) {
    const MAX: u64 = 10;
    let clock = clock(harness);
    let sliding = rule("prior-sliding", MAX, window(10), 1).with_algorithm(Algorithm::Sliding);
    let start = clock.now();
    for elapsed in [0, 1, 3, 6, 9] {
        let limit = ok(sliding.limit(&[unique()]), "limit");
        // The previous window's last second: a whole budget.
        clock.set(start + Duration::from_secs(9));
        let full = ok(limit.clone().with_cost(MAX), "cost");
        let spent = ok(
            limiter(harness.open().await, &clock).reserve(&[full]).await,
            "reserve",
        );
        assert!(spent.is_allowed(), "an empty window refused its max");
        clock.set(start + Duration::from_secs(10 + elapsed));
        let mut admitted = 0;
        while admitted <= MAX {
            let fresh = limiter(harness.open().await, &clock);
            let verdict = ok(fresh.reserve(std::slice::from_ref(&limit)).await, "reserve");
            if !verdict.is_allowed() {
                break;
            }
            admitted += 1;
        }
        assert_eq!(
            admitted, elapsed,
            "{elapsed} s into the window after a full one, (10 − {elapsed}) / 10 of 10 weighs"
        );
    }
    clock.set(start);
}
