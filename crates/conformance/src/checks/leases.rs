//! Leases: a concurrency limit's set of lease ids, taken with the rate
//! limits in one all-or-nothing reservation, renewed, released by id, and
//! lost by a crashed holder at its expiry.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use tollgate_core::{CheckId, CounterStore, Limit, Limiter, ManualClock, Rule, Verdict, Window};

use crate::Harness;
use crate::checks::concurrency::race_all;
use crate::support::{clock, deadline, limiter, ok, rule, unique};

/// A concurrency rule of `n` leases of `lease` seconds, one key part.
fn leases(name: &str, n: u64, lease: u64) -> Rule {
    let window = ok(Window::from_secs(lease), "lease");
    let rule = ok(Rule::concurrency(name, n, window), "rule");
    ok(rule.with_key(&["id"]), "key")
}

/// Moves the store's time on by `by`: its clock when the harness has one,
/// else real time.
async fn pass(harness_clock: Option<&ManualClock>, by: Duration) {
    match harness_clock {
        Some(clock) => clock.advance(by),
        None => tokio::time::sleep(by).await,
    }
}

async fn held(store: &impl CounterStore, limit: &Limit) -> u64 {
    let key = limit.current_key(0);
    ok(store.leases(&key, deadline()).await, "leases").held
}

async fn take(limiter: &Limiter, limits: &[Limit]) -> Verdict {
    ok(limiter.reserve(limits).await, "reserve")
}

/// 200 callers racing over two limiters for 5 leases, each holding its
/// lease a moment and releasing it: no instant sees more than 5 held (the
/// oracle counts a lease from its acquire's answer to its release's call,
/// inside the time the store holds it), and leases come back to be taken
/// again.
pub async fn racing_acquirers_never_hold_more_than_the_concurrency<H: Harness>(harness: &H) {
    const N: u64 = 5;
    let clock = clock(harness);
    let limiters = [
        limiter(harness.open().await, &clock),
        limiter(harness.open().await, &clock),
    ];
    let limit = ok(leases("race-leases", N, 60).limit(&[unique()]), "limit");
    let limit_again = limit.clone();
    let now = Arc::new(AtomicI64::new(0));
    let most = Arc::new(AtomicI64::new(0));
    let taken = Arc::new(AtomicUsize::new(0));
    let calls = {
        let (now, most, taken) = (now.clone(), most.clone(), taken.clone());
        race_all(&limiters, 200, move |limiter: Limiter| {
            let (limit, now, most, taken) =
                (limit.clone(), now.clone(), most.clone(), taken.clone());
            async move {
                let verdict = ok(limiter.reserve(&[limit]).await, "reserve");
                if !verdict.is_allowed() {
                    return;
                }
                let holding = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(holding, Ordering::SeqCst);
                taken.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                for lease in verdict.leases() {
                    ok(lease.release().await, "release");
                }
            }
        })
    };
    calls.await;
    let most = most.load(Ordering::SeqCst);
    assert!(most <= N as i64, "{most} leases held at once, of {N}");
    let taken = taken.load(Ordering::SeqCst);
    assert!(
        taken >= N as usize,
        "{taken} leases of {N} taken by 200 callers"
    );
    // Every lease was released: all are free again.
    assert_eq!(held(&harness.open().await, &limit_again).await, 0);
    let again = race_all(&limiters, N as usize, move |limiter: Limiter| {
        let limit = limit_again.clone();
        async move { ok(limiter.reserve(&[limit]).await, "reserve") }
    })
    .await;
    assert!(
        again.iter().all(Verdict::is_allowed),
        "released leases were not free again"
    );
}

/// A holder that crashes (its handle never dropped nor released) keeps its
/// lease until the lease expires, never longer: a caller refused meanwhile
/// is told to wait at most the lease's lifetime; at the expiry the lease
/// is free, and the set of leases has a lifetime of its own.
pub async fn a_crashed_holders_lease_is_free_at_its_expiry<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let store_clock = harness.store_clock();
    let limiter = limiter(harness.open().await, &clock);
    let limit = ok(leases("crash-lease", 1, 2).limit(&[unique()]), "limit");
    let crashed = take(&limiter, std::slice::from_ref(&limit)).await;
    assert!(crashed.is_allowed(), "a free lease was refused");
    // The holder is gone: nothing releases its lease.
    std::mem::forget(crashed);
    let refused = take(&limiter, std::slice::from_ref(&limit)).await;
    let limited = refused.limited();
    assert!(limited.is_some(), "a second lease of one was taken");
    let wait = limited.map_or(0, |l| l.retry_after());
    assert!(
        (1..=2).contains(&wait),
        "told to wait {wait} s for a 2 s lease"
    );
    let key = limit.current_key(0);
    match harness.expiry(&key).await {
        crate::Expiry::In(left) => assert!(
            left <= Duration::from_secs(2),
            "the set of leases outlives its only lease: {left:?}"
        ),
        other => panic!("the set of a held lease has no lifetime: {other:?}"),
    }
    pass(store_clock.as_ref(), Duration::from_millis(2_100)).await;
    let again = take(&limiter, std::slice::from_ref(&limit)).await;
    assert!(
        again.is_allowed(),
        "a crashed holder's lease outlived its expiry"
    );
    for lease in again.leases() {
        ok(lease.release().await, "release");
    }
    pass(store_clock.as_ref(), Duration::from_millis(100)).await;
    assert_eq!(held(&harness.open().await, &limit).await, 0);
}

/// Renewing a lease keeps it past its first expiry; a lease that expired
/// is not taken back by a renewal.
pub async fn renewing_a_lease_keeps_it<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let store_clock = harness.store_clock();
    let limiter = limiter(harness.open().await, &clock);
    let limit = ok(leases("renew-lease", 1, 2).limit(&[unique()]), "limit");
    let first = take(&limiter, std::slice::from_ref(&limit)).await;
    let lease = first.leases().first().cloned();
    let lease = lease.unwrap_or_else(|| panic!("an allowed check took no lease"));
    pass(store_clock.as_ref(), Duration::from_millis(1_500)).await;
    assert!(
        ok(lease.renew().await, "renew"),
        "a held lease was not renewed"
    );
    pass(store_clock.as_ref(), Duration::from_millis(1_000)).await;
    let meanwhile = take(&limiter, std::slice::from_ref(&limit)).await;
    assert!(
        !meanwhile.is_allowed(),
        "a renewed lease ended at its first expiry"
    );
    pass(store_clock.as_ref(), Duration::from_millis(1_200)).await;
    assert!(
        !ok(lease.renew().await, "renew"),
        "an expired lease was renewed"
    );
    let after = take(&limiter, std::slice::from_ref(&limit)).await;
    assert!(
        after.is_allowed(),
        "a renewed lease outlived its new expiry"
    );
    std::mem::forget(first);
    for lease in after.leases() {
        ok(lease.release().await, "release");
    }
}

/// Releasing is by id and idempotent: a second release, a release after
/// expiry, and a release of an id that holds nothing change nothing.
pub async fn releases_are_idempotent_and_by_id<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let store_clock = harness.store_clock();
    let store = harness.open().await;
    let limiter = limiter(harness.open().await, &clock);
    let limit = ok(leases("release-lease", 2, 2).limit(&[unique()]), "limit");
    let one = std::slice::from_ref(&limit);
    let (a, b) = (take(&limiter, one).await, take(&limiter, one).await);
    assert!(
        a.is_allowed() && b.is_allowed(),
        "two of two leases refused"
    );
    assert!(
        !take(&limiter, one).await.is_allowed(),
        "a third lease of two"
    );
    let key = limit.current_key(0);
    let stranger = CheckId::new();
    assert!(
        !ok(store.end_lease(&key, stranger, deadline()).await, "end"),
        "an id that holds nothing released a lease"
    );
    assert_eq!(
        held(&store, &limit).await,
        2,
        "another holder's lease ended"
    );
    let lease_a = &a.leases()[0];
    assert!(ok(lease_a.release().await, "release"), "a held lease");
    assert!(!ok(lease_a.release().await, "release"), "released twice");
    assert!(
        !ok(store.end_lease(&key, lease_a.id(), deadline()).await, "end"),
        "a released lease released again"
    );
    assert_eq!(
        held(&store, &limit).await,
        1,
        "a second release freed another"
    );
    let c = take(&limiter, one).await;
    assert!(c.is_allowed(), "a released lease was not free");
    pass(store_clock.as_ref(), Duration::from_millis(2_100)).await;
    let lease_b = &b.leases()[0];
    assert!(!ok(lease_b.release().await, "release"), "an expired lease");
    assert_eq!(held(&store, &limit).await, 0);
    std::mem::forget((a, b, c));
}

/// A call refused for want of a lease spends none of its rate limits, and
/// a call its rate limit refuses takes no lease.
pub async fn a_refused_acquire_spends_no_rate_budget_and_vice_versa<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let store = harness.open().await;
    let limiter = limiter(harness.open().await, &clock);
    let id = unique();
    let rate = ok(
        rule("lease-rate", 10, Window::MINUTE, 1).limit(&[&id]),
        "limit",
    );
    let lease = ok(leases("lease-one", 1, 60).limit(&[&id]), "limit");
    let both = [rate.clone(), lease.clone()];
    let first = take(&limiter, &both).await;
    assert!(first.is_allowed());
    let refused = take(&limiter, &both).await;
    assert_eq!(
        refused.limited().map(|l| l.limit().to_owned()).as_deref(),
        Some("lease-one"),
        "refused by another limit than the lease"
    );
    assert!(refused.leases().is_empty(), "a refused check holds a lease");
    let spent = ok(
        limiter.remaining(std::slice::from_ref(&rate)).await,
        "remaining",
    );
    assert_eq!(
        spent[0].remaining(),
        9,
        "a call refused a lease spent its rate budget"
    );
    // The other way: a rate limit of 1, already spent, refuses the call
    // before any lease is taken.
    let other = unique();
    let tight = ok(
        rule("lease-tight", 1, Window::MINUTE, 1).limit(&[&other]),
        "limit",
    );
    let many = ok(leases("lease-many", 5, 60).limit(&[&other]), "limit");
    let pair = [tight, many.clone()];
    let allowed = take(&limiter, &pair).await;
    assert!(allowed.is_allowed());
    assert!(!take(&limiter, &pair).await.is_allowed(), "past its rate");
    assert_eq!(
        held(&store, &many).await,
        1,
        "a rate-refused call took a lease"
    );
    std::mem::forget((first, allowed));
}

/// Acquires and releases of one lease racing over two limiters, so that a
/// set loses its last lease (and goes) while another call takes one: no
/// call fails, and leases keep being taken.
pub async fn acquires_racing_the_end_of_a_sets_last_lease_never_fail<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiters = [
        limiter(harness.open().await, &clock),
        limiter(harness.open().await, &clock),
    ];
    let limit = ok(leases("churn-lease", 1, 60).limit(&[unique()]), "limit");
    let taken = Arc::new(AtomicUsize::new(0));
    let churn = |limiter: Limiter| {
        let (limit, taken) = (limit.clone(), taken.clone());
        tokio::spawn(async move {
            for _ in 0..150 {
                let verdict = ok(
                    limiter.reserve(std::slice::from_ref(&limit)).await,
                    "reserve",
                );
                for lease in verdict.leases() {
                    taken.fetch_add(1, Ordering::SeqCst);
                    ok(lease.release().await, "release");
                }
            }
        })
    };
    let [a, b] = limiters;
    let (a, b) = tokio::join!(churn(a), churn(b));
    ok(a, "a churning task");
    ok(b, "another churning task");
    let taken = taken.load(Ordering::SeqCst);
    // Each call finds the lease free unless the other task holds it.
    assert!(taken >= 10, "{taken} leases taken in 300 calls");
    assert_eq!(held(&harness.open().await, &limit).await, 0);
}
