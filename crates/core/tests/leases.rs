//! A check that fails after the store took its lease (the answer lost on
//! every attempt) leaves no lease held: nobody holds a handle to it, so the
//! limiter ends it.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tollgate_core::observe::Op;
use tollgate_core::{
    Error, Hook, Hooked, Limiter, RetryPolicy, Rule, StoreError, Window, async_trait,
};
use tollgate_memory::MemoryStore;

/// Loses every reservation's answer while `lose` is set.
#[derive(Debug, Default)]
struct LoseAnswers {
    lose: AtomicBool,
}

#[async_trait]
impl Hook for LoseAnswers {
    async fn after(&self, call: Op, _: Option<&StoreError>) -> Result<(), StoreError> {
        if call == Op::Reserve && self.lose.load(Ordering::SeqCst) {
            return Err(StoreError::Timeout(Duration::from_millis(1)));
        }
        Ok(())
    }
}

// Paused time: the retry's pause and the polls wait for this runtime only.
#[tokio::test(start_paused = true)]
async fn a_failed_check_ends_the_lease_the_store_took() {
    let hook = Arc::new(LoseAnswers::default());
    let store = Hooked::around(MemoryStore::new(), hook.clone());
    let limiter = Limiter::builder(store)
        .retry(RetryPolicy {
            retries: 1,
            delay: Duration::from_millis(1),
            timeout: Duration::from_millis(200),
        })
        .cache(0)
        .build();
    let rule = Rule::concurrency("one", 1, Window::MINUTE).unwrap();
    let one = [rule.limit::<&str>(&[]).unwrap()];
    hook.lose.store(true, Ordering::SeqCst);
    let failed = limiter.reserve(&one).await;
    assert!(matches!(failed, Err(Error::Unavailable(_))), "{failed:?}");
    hook.lose.store(false, Ordering::SeqCst);
    // Ended in the background: the one lease is free again.
    let mut admitted = false;
    for _ in 0..100 {
        let verdict = limiter.reserve(&one).await.unwrap();
        if verdict.is_allowed() {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(admitted, "a failed check's lease stayed held");
}

/// Every lease event is counted by rule: acquired, refused (none free),
/// renewed, released, and reclaimed (found expired by an acquire).
#[test]
fn metrics_count_every_lease_event() {
    use tollgate_core::ManualClock;
    use tollgate_test_support::metrics::{counters, recorded};

    let recorded = recorded(|| async {
        let clock = ManualClock::new(Duration::from_secs(1_781_524_800));
        let limiter = Limiter::builder(MemoryStore::with_clock(clock.clone()))
            .clock(clock.clone())
            .cache(0)
            .build();
        let rule = Rule::concurrency("events", 1, Window::MINUTE).unwrap();
        let one = [rule.limit::<&str>(&[]).unwrap()];
        let first = limiter.reserve(&one).await.unwrap();
        assert!(!limiter.reserve(&one).await.unwrap().is_allowed());
        let lease = &first.leases()[0];
        assert!(lease.renew().await.unwrap());
        assert!(lease.release().await.unwrap());
        // A holder that crashes: its lease is reclaimed once expired.
        let crashed = limiter.reserve(&one).await.unwrap();
        std::mem::forget(crashed);
        clock.advance(Duration::from_secs(61));
        let after = limiter.reserve(&one).await.unwrap();
        assert!(after.leases()[0].release().await.unwrap());
    });
    let events = counters(&recorded, "tollgate_leases_total");
    let expected = [
        ("rule=events,event=acquired", 3),
        ("rule=events,event=refused", 1),
        ("rule=events,event=renewed", 1),
        ("rule=events,event=released", 2),
        ("rule=events,event=reclaimed", 1),
    ];
    for (labels, n) in expected {
        assert_eq!(events.get(labels), Some(&n), "{labels}: {events:?}");
    }
}

/// A lease's handle: clones are the same lease (equal), leases of two
/// checks are not (on one key), nor are one check's leases of two keys;
/// it shows its rule and whether it was released; dropping every handle
/// of a lease releases it in the background.
#[tokio::test(start_paused = true)]
async fn a_lease_handle_is_one_lease_and_dropping_it_releases_it() {
    let limiter = Limiter::builder(MemoryStore::new()).cache(0).build();
    let rule = Rule::concurrency("two", 2, Window::MINUTE).unwrap();
    let two = [rule.limit::<&str>(&[]).unwrap()];
    let other = Rule::concurrency("other", 2, Window::MINUTE).unwrap();
    let both = [two[0].clone(), other.limit::<&str>(&[]).unwrap()];
    let first = limiter.reserve(&two).await.unwrap();
    let second = limiter.reserve(&both).await.unwrap();
    let (a, b) = (first.leases()[0].clone(), second.leases()[0].clone());
    assert_eq!(a, first.leases()[0], "a clone is the same lease");
    assert_ne!(a, b, "two checks' leases on one key");
    assert_ne!(a.id(), b.id());
    assert_eq!(second.leases()[1].id(), b.id(), "one check, one id");
    assert_ne!(b, second.leases()[1], "one check's leases on two keys");
    let shown = format!("{a:?}");
    assert!(
        shown.contains("\"two\"") && shown.contains("released: false"),
        "{shown}"
    );

    assert!(!a.is_released());
    assert!(a.release().await.unwrap());
    assert!(a.is_released(), "released by this handle");
    assert!(format!("{a:?}").contains("released: true"));
    // Every handle of the second check's leases dropped: released in the
    // background, so both of "two" are free again.
    drop((b, second));
    tokio::time::sleep(Duration::from_millis(10)).await;
    for i in 0..2 {
        let verdict = limiter.reserve(&two).await.unwrap();
        assert!(
            verdict.is_allowed(),
            "lease {i}: a dropped lease is still held"
        );
        std::mem::forget(verdict);
    }
}

/// A refused lease says to wait until the first lease held ends.
#[tokio::test]
async fn a_refused_lease_waits_until_the_first_one_held_ends() {
    use tollgate_core::ManualClock;

    let clock = ManualClock::new(Duration::from_secs(1_781_524_800));
    let limiter = Limiter::builder(MemoryStore::with_clock(clock.clone()))
        .clock(clock.clone())
        .cache(0)
        .build();
    let rule = Rule::concurrency("one", 1, Window::MINUTE).unwrap();
    let one = [rule.limit::<&str>(&[]).unwrap()];
    let held = limiter.reserve(&one).await.unwrap();
    assert!(held.is_allowed());
    clock.advance(Duration::from_secs(20));
    let refused = limiter.reserve(&one).await.unwrap();
    assert!(!refused.is_allowed());
    assert_eq!(refused.usage()[0].retry_after(), 40);
    assert!(held.leases()[0].release().await.unwrap());
}
