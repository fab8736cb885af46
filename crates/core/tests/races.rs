//! Races between the local cache, refunds and resets, and settling a
//! verdict more than once (each found by review, failing before the fix).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tollgate_core::observe::Op;
use tollgate_core::{Clock, Limiter, Rule, StoreError, Window, async_trait};
use tollgate_core::{Hook, Hooked};
use tollgate_memory::MemoryStore;

#[derive(Clone, Debug)]
struct Fixed(Arc<AtomicU64>);
impl Clock for Fixed {
    fn now(&self) -> Duration {
        Duration::from_secs(self.0.load(Ordering::SeqCst))
    }
}

/// Around the memory store: when armed, a reserve applies at once but its
/// reply is held until `open` is notified (a slow reply on the wire).
#[derive(Debug, Default)]
struct Gate {
    armed: AtomicBool,
    open: Notify,
    applied: Notify,
}

#[async_trait]
impl Hook for Gate {
    async fn after(&self, call: Op, _: Option<&StoreError>) -> Result<(), StoreError> {
        if call == Op::Reserve && self.armed.swap(false, Ordering::SeqCst) {
            self.applied.notify_one();
            self.open.notified().await;
        }
        Ok(())
    }
}

type Gated = Hooked<MemoryStore, Gate>;

const NOON: u64 = 20_619 * 86_400 + 43_230;

fn setup() -> (Limiter, Arc<Gated>) {
    let clock = Fixed(Arc::new(AtomicU64::new(NOON)));
    let store = Arc::new(Gated::around(
        MemoryStore::with_clock(clock.clone()),
        Gate::default(),
    ));
    let limiter = Limiter::builder(store.clone())
        .clock(clock)
        .retry(tollgate_core::RetryPolicy {
            retries: 0,
            delay: Duration::from_millis(1),
            timeout: Duration::from_secs(5),
        })
        .build();
    (limiter, store)
}

/// A reservation refused by the store before a local refund, whose reply
/// arrives after the refund, does not leave a stale "full" entry: the next
/// call the store would admit is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_reply_racing_a_refund_leaves_no_stale_full_entry() {
    let (limiter, store) = setup();
    let rule = Rule::new("tokens", 10, Window::DAY)
        .unwrap()
        .with_key(&["p"])
        .unwrap();
    let limit = |cost| rule.limit(&["docs"]).unwrap().with_cost(cost).unwrap();
    let a = limiter.reserve(&[limit(10)]).await.unwrap();
    assert!(a.is_allowed());
    // B: refused by the store (10 + 1 > 10); its reply is slow.
    store.hook.armed.store(true, Ordering::SeqCst);
    let l2 = limiter.clone();
    let lim_b = limit(1);
    let b = tokio::spawn(async move { l2.reserve(&[lim_b]).await.unwrap() });
    store.hook.applied.notified().await;
    // A settles: 9 of its 10 tokens back (the store now holds 1).
    limiter.settle(&a, "tokens", 1).await.unwrap();
    store.hook.open.notify_one();
    let b = b.await.unwrap();
    assert!(!b.is_allowed());
    let stored = limiter.remaining(&[limit(1)]).await.unwrap();
    assert_eq!(stored[0].remaining(), 9, "the store has room for 9");
    // C: the store would admit it; the cache refuses it locally.
    let c = limiter.reserve(&[limit(1)]).await.unwrap();
    assert!(
        c.is_allowed(),
        "refused locally (is_local = {}) with 9 of 10 free in the store",
        c.is_local()
    );
}

/// The same with an operator reset through this limiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_reply_racing_a_reset_leaves_no_stale_full_entry() {
    let (limiter, store) = setup();
    let rule = Rule::new("ask", 1, Window::DAY)
        .unwrap()
        .with_key(&["v"])
        .unwrap();
    let limit = || rule.limit(&["203.0.113.9"]).unwrap();
    assert!(limiter.reserve(&[limit()]).await.unwrap().is_allowed());
    store.hook.armed.store(true, Ordering::SeqCst);
    let l2 = limiter.clone();
    let lim_b = limit();
    let b = tokio::spawn(async move { l2.reserve(&[lim_b]).await.unwrap() });
    store.hook.applied.notified().await;
    assert!(limiter.reset(&limit()).await.unwrap());
    store.hook.open.notify_one();
    assert!(!b.await.unwrap().is_allowed());
    let c = limiter.reserve(&[limit()]).await.unwrap();
    assert!(
        c.is_allowed(),
        "refused after a reset (is_local = {})",
        c.is_local()
    );
}

/// A verdict refunded twice gives back once: other callers' spend is never
/// erased (which would over-admit).
#[tokio::test]
async fn a_verdict_refunded_twice_gives_back_once() {
    let (limiter, _) = setup();
    let rule = Rule::new("tokens", 15, Window::DAY).unwrap();
    let limit = |cost| rule.limit::<&str>(&[]).unwrap().with_cost(cost).unwrap();
    let mine = limiter.reserve(&[limit(10)]).await.unwrap();
    let theirs = limiter.reserve(&[limit(5)]).await.unwrap();
    assert!(mine.is_allowed() && theirs.is_allowed());
    limiter.refund(&mine, "tokens", 10).await.unwrap();
    limiter.refund(&mine, "tokens", 10).await.unwrap();
    let left = limiter.remaining(&[limit(1)]).await.unwrap();
    assert_eq!(
        left[0].remaining(),
        10,
        "5 are still spent by the other caller"
    );
}

/// Fail-open counts a check whose two limits share a key (a caller error)
/// as one limit of their summed cost, instead of allowing it uncounted.
#[tokio::test]
async fn within_counts_a_duplicate_key_check() {
    let (limiter, _) = setup();
    let rule = Rule::new("github", 3, Window::HOUR)
        .unwrap()
        .with_key(&["org"])
        .unwrap();
    let org = |o: &str| rule.limit(&[o]).unwrap();
    let first = limiter.within(&[org("a"), org("a")]).await;
    assert!(first.is_allowed() && !first.is_degraded());
    assert_eq!(first.usage().len(), 1);
    assert_eq!(first.usage()[0].remaining(), 1, "counted once, at cost 2");
    let second = limiter.within(&[org("a"), org("a")]).await;
    assert!(!second.is_allowed(), "over its max of 3");
    assert!(
        limiter.count(&[org("a"), org("a")]).await.is_err(),
        "check refuses it"
    );
}
