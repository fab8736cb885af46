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
