//! A sliding check's previous window: read by the store with the check (a
//! [`Prior`](tollgate_core::Prior) on its counter, one store call) until
//! its count is final, then kept; and a retried check is answered the
//! count its first attempt read: when that attempt was applied and its
//! answer lost, and a late write then grew the previous window, the retry
//! is answered what the first attempt applied, against the max it was
//! applied with.
#![allow(clippy::unwrap_used)]
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use tollgate_core::{
    Algorithm, CheckId, Counter, CounterStore, Deadline, Limiter, ManualClock, Mode, Named, Policy,
    Reservation, RetryPolicy, Rule, StoreError, Window,
};
use tollgate_memory::MemoryStore;

/// Applies the first reservation, then (as a late write from a check begun
/// before the boundary) adds `late` to `previous_key`, and loses the answer.
#[derive(Debug)]
struct LoseFirst {
    inner: MemoryStore,
    previous_key: String,
    late: u64,
    reserves: AtomicU32,
    /// Counters with a prior, over every reservation.
    priors: AtomicUsize,
    /// Calls of `get`.
    gets: AtomicUsize,
}
impl Named for LoseFirst {
    fn name(&self) -> &'static str {
        "lose-first"
    }
}
#[async_trait]
impl CounterStore for LoseFirst {
    async fn count(&self, c: &[Counter], id: CheckId, d: Deadline) -> Result<Vec<u64>, StoreError> {
        self.inner.count(c, id, d).await
    }
    async fn reserve(
        &self,
        c: &[Counter],
        id: CheckId,
        d: Deadline,
    ) -> Result<Reservation, StoreError> {
        let priors = c.iter().filter(|c| c.prior.is_some()).count();
        self.priors.fetch_add(priors, Ordering::SeqCst);
        let r = self.inner.reserve(c, id, d).await?;
        if self.reserves.fetch_add(1, Ordering::SeqCst) == 0 && self.late > 0 {
            let late = Counter {
                key: self.previous_key.clone(),
                ttl: Duration::from_secs(120),
                cost: self.late,
                max: 1 << 53,
                floor: 0,
                prior: None,
                lease: false,
            };
            self.inner.count(&[late], CheckId::new(), d).await?;
            return Err(StoreError::Connection("lost".into()));
        }
        Ok(r)
    }
    async fn refund(
        &self,
        c: &[Counter],
        id: CheckId,
        d: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        self.inner.refund(c, id, d).await
    }
    async fn get(&self, k: &[String], d: Deadline) -> Result<Vec<u64>, StoreError> {
        self.gets.fetch_add(1, Ordering::SeqCst);
        self.inner.get(k, d).await
    }
    async fn delete(&self, k: &str, d: Deadline) -> Result<bool, StoreError> {
        self.inner.delete(k, d).await
    }
}

#[tokio::test]
async fn a_retry_reuses_the_previous_counts_its_first_attempt_read() {
    // 60.2 s: window 1 just began; window 0 may still grow.
    let clock = ManualClock::new(Duration::from_millis(1_000 * 60 * 1000 + 200));
    let rule = Rule::new("s", 10, Window::MINUTE)
        .unwrap()
        .with_algorithm(Algorithm::Sliding);
    let limit = rule.limit::<&str>(&[]).unwrap();
    let index = 1000u64;
    let store = Arc::new(LoseFirst {
        inner: MemoryStore::with_clock(clock.clone()),
        previous_key: limit.counter_key(index - 1),
        late: 5,
        reserves: AtomicU32::new(0),
        priors: AtomicUsize::new(0),
        gets: AtomicUsize::new(0),
    });
    let limiter = Limiter::builder(store.clone())
        .clock(clock.clone())
        .retry(RetryPolicy {
            retries: 2,
            delay: Duration::from_millis(1),
            timeout: Duration::from_millis(200),
        })
        .build();
    let busy = limit.clone().with_cost(9).unwrap();
    // 9 in the current window (window 1) first, with a plain count.
    store
        .inner
        .count(
            &[busy.counter(60_000)],
            CheckId::new(),
            Deadline::after(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    let got = limiter
        .check(
            std::slice::from_ref(&limit),
            Mode::Reserve,
            Policy::FailClosed,
        )
        .await;
    let verdict =
        got.unwrap_or_else(|e| panic!("a lost answer + a late write to the previous window: {e}"));
    assert!(verdict.is_allowed() && verdict.has_spent());
    assert_eq!(store.reserves.load(Ordering::SeqCst), 2, "retried once");
}

/// A sliding limit sends its previous window as a prior with the check
/// (one store call, no `get`) until that count is final, then keeps it: a
/// later check of the key sends none; a fixed window never does.
#[tokio::test]
async fn a_sliding_limit_has_the_store_read_its_previous_window_until_the_count_is_final() {
    // Half a second into window 1000: window 999 may still grow.
    let clock = ManualClock::new(Duration::from_millis(1_000 * 60 * 1000 + 500));
    let rule = Rule::new("smooth", 5, Window::MINUTE)
        .unwrap()
        .with_algorithm(Algorithm::Sliding);
    let sliding = [rule.limit::<&str>(&[]).unwrap()];
    let store = Arc::new(LoseFirst {
        inner: MemoryStore::with_clock(clock.clone()),
        previous_key: sliding[0].counter_key(999),
        late: 0,
        reserves: AtomicU32::new(0),
        priors: AtomicUsize::new(0),
        gets: AtomicUsize::new(0),
    });
    // The previous window holds 4: at 0.5 s, all of it still weighs.
    let four = Counter {
        cost: 4,
        ..sliding[0].counter(999 * 60)
    };
    let at = Deadline::after(Duration::from_secs(1));
    store
        .inner
        .count(&[four], CheckId::new(), at)
        .await
        .unwrap();
    let limiter = Limiter::builder(store.clone())
        .clock(clock.clone())
        .cache(0)
        .build();
    let first = limiter.reserve(&sliding).await.unwrap();
    assert!(first.is_allowed(), "4 + 1 fits 5");
    assert!(
        !limiter.reserve(&sliding).await.unwrap().is_allowed(),
        "4 + 1 + 1 does not"
    );
    assert_eq!(
        store.priors.load(Ordering::SeqCst),
        2,
        "sent with each check"
    );
    // Five seconds (more than the default check budget) and a second after
    // the window's end: read once more, then kept (a twelfth of 4 has gone).
    clock.advance(Duration::from_millis(5_500));
    for _ in 0..3 {
        limiter.reserve(&sliding).await.unwrap();
    }
    assert_eq!(
        store.priors.load(Ordering::SeqCst),
        3,
        "kept after one more read"
    );
    assert_eq!(store.reserves.load(Ordering::SeqCst), 5);
    assert_eq!(
        store.gets.load(Ordering::SeqCst),
        0,
        "a check never reads apart"
    );
    let fixed = Rule::new("fixed", 5, Window::MINUTE).unwrap();
    limiter
        .reserve(&[fixed.limit::<&str>(&[]).unwrap()])
        .await
        .unwrap();
    assert_eq!(
        store.priors.load(Ordering::SeqCst),
        3,
        "a fixed window has none"
    );
}

/// A reset of a sliding limit (an operator action) forgets the previous
/// window's count the limiter kept, as well as deleting it: the caller
/// starts afresh, with the whole max.
#[tokio::test]
async fn a_reset_forgets_the_kept_previous_count() {
    // Ten seconds into window 1000: window 999's count is final, and kept.
    let clock = ManualClock::new(Duration::from_millis(1_000 * 60 * 1000 + 10_000));
    let rule = Rule::new("smooth", 5, Window::MINUTE)
        .unwrap()
        .with_algorithm(Algorithm::Sliding);
    let sliding = [rule.limit::<&str>(&[]).unwrap()];
    let store = MemoryStore::with_clock(clock.clone());
    let four = Counter {
        cost: 4,
        ..sliding[0].counter(999 * 60)
    };
    let at = Deadline::after(Duration::from_secs(1));
    store.count(&[four], CheckId::new(), at).await.unwrap();
    let limiter = Limiter::builder(store)
        .clock(clock.clone())
        .cache(0)
        .build();
    // 4 × 50/60 of the previous window weighs 3: two fit, a third does not.
    for _ in 0..2 {
        assert!(limiter.reserve(&sliding).await.unwrap().is_allowed());
    }
    assert!(!limiter.reserve(&sliding).await.unwrap().is_allowed());
    assert!(limiter.reset(&sliding[0]).await.unwrap());
    for i in 0..5 {
        assert!(
            limiter.reserve(&sliding).await.unwrap().is_allowed(),
            "check {i} after the reset: the previous window still weighs"
        );
    }
    assert!(!limiter.reserve(&sliding).await.unwrap().is_allowed());
}
