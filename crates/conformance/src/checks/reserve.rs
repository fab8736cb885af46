//! All-or-nothing reservations.

use tollgate_core::{Limit, Window};

use super::concurrency::race;
use crate::Harness;
use crate::support::{clock, limiter, ok, rule, unique};

/// A refused reservation changes no counter: a caller hammering past their
/// own limit cannot drain a shared one.
pub async fn refused_reservation_changes_no_counter<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let id = unique();
    let own = ok(
        rule("own", 2, Window::DAY, 2).limit(&[&id, "visitor"]),
        "limit",
    );
    let shared = ok(rule("shared", 100, Window::DAY, 1).limit(&[&id]), "limit");
    let limits = [own.clone(), shared.clone()];
    for _ in 0..2 {
        assert!(ok(limiter.reserve(&limits).await, "reserve").is_allowed());
    }
    for _ in 0..10 {
        let verdict = ok(limiter.reserve(&limits).await, "reserve");
        let limited = verdict
            .limited()
            .unwrap_or_else(|| panic!("own limit of 2 is full"));
        assert_eq!(limited.limit(), "own");
        assert!(
            !verdict.usage()[1].is_over(),
            "the shared limit is not over"
        );
    }
    let left = ok(limiter.remaining(&[own, shared]).await, "remaining");
    assert_eq!(left[0].remaining(), 0);
    assert_eq!(
        left[1].remaining(),
        98,
        "refused reservations spent shared budget"
    );

    // Refused because the shared limit is full: the caller's own counter is untouched.
    let tight = ok(rule("tight", 1, Window::DAY, 1).limit(&[&id]), "limit");
    let fresh = ok(
        rule("own", 2, Window::DAY, 2).limit(&[&id, "newcomer"]),
        "limit",
    );
    assert!(
        ok(
            limiter.reserve(std::slice::from_ref(&tight)).await,
            "reserve"
        )
        .is_allowed()
    );
    assert!(!ok(limiter.reserve(&[fresh.clone(), tight]).await, "reserve").is_allowed());
    let left = ok(limiter.remaining(&[fresh]).await, "remaining");
    assert_eq!(
        left[0].remaining(),
        2,
        "a refused reservation spent the caller's own budget"
    );
}

/// Reservations racing on a shared limit are allowed exactly `max` times,
/// and the shared counter ends at `max`, across two limiters on one store.
pub async fn racing_reservations_allow_exactly_max<H: Harness>(harness: &H) {
    const MAX: u64 = 20;
    const CALLERS: usize = 100;
    let clock = clock(harness);
    let limiters = [
        limiter(harness.open().await, &clock),
        limiter(harness.open().await, &clock),
    ];
    let id = unique();
    let shared = ok(rule("pool", MAX, Window::HOUR, 1).limit(&[&id]), "limit");
    let own_rule = rule("each", 3, Window::HOUR, 2);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let allowed = race(&limiters, CALLERS, |limiter| {
        let n = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let own: Limit = ok(own_rule.limit(&[id.clone(), n.to_string()]), "limit");
        let limits = [own, shared.clone()];
        async move { ok(limiter.reserve(&limits).await, "reserve").is_allowed() }
    })
    .await;
    assert_eq!(
        allowed, MAX as usize,
        "{CALLERS} racing reservations with max {MAX}"
    );
    let left = ok(limiters[0].remaining(&[shared]).await, "remaining");
    assert_eq!(
        left[0].remaining(),
        0,
        "the shared counter must end exactly at max"
    );
}
