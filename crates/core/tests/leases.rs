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

#[tokio::test]
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
