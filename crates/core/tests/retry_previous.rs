//! A retried sliding check reads its previous window once: when the first
//! attempt was applied and its answer lost, and a late write then grew the
//! previous window, the retry is answered what the first attempt applied,
//! against the maxes it was applied with.
#![allow(clippy::unwrap_used)]
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
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
        let r = self.inner.reserve(c, id, d).await?;
        if self.reserves.fetch_add(1, Ordering::SeqCst) == 0 {
            let late = Counter {
                key: self.previous_key.clone(),
                ttl: Duration::from_secs(120),
                cost: self.late,
                max: 1 << 53,
                floor: 0,
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
