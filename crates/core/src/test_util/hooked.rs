//! [`Hooked`]: a store wrapper that runs a test's [`Hook`] around every
//! call of the store it wraps, so that a test states only what it changes.

use std::fmt::Debug;
use std::time::Duration;

use async_trait::async_trait;

use crate::observe::Op;
use crate::{
    CheckId, Claim, Counter, CounterStore, Deadline, Leases, MarkStore, Named, Reservation,
    StoreError,
};

/// What a [`Hooked`] store does around each call; both steps do nothing
/// unless a hook says otherwise.
#[async_trait]
pub trait Hook: Debug + Send + Sync + 'static {
    /// Before `call` reaches the store; an error answers the call instead.
    async fn before(&self, _call: Op) -> Result<(), StoreError> {
        Ok(())
    }

    /// Once the store answered `call`, with `error` when it failed. An
    /// error answers the call instead of the store's answer: the store
    /// applied the call, and its reply was lost.
    async fn after(&self, _call: Op, _error: Option<&StoreError>) -> Result<(), StoreError> {
        Ok(())
    }
}

#[async_trait]
impl<H: Hook> Hook for std::sync::Arc<H> {
    async fn before(&self, call: Op) -> Result<(), StoreError> {
        (**self).before(call).await
    }

    async fn after(&self, call: Op, error: Option<&StoreError>) -> Result<(), StoreError> {
        (**self).after(call, error).await
    }
}

/// A store that runs `hook` around every call of `store` (counters and
/// marks alike), and is named as it.
#[derive(Debug)]
pub struct Hooked<S, H> {
    /// The wrapped store.
    pub store: S,
    /// What runs around its calls.
    pub hook: H,
}

impl<S, H> Hooked<S, H> {
    /// `store` with `hook` around its calls.
    pub fn around(store: S, hook: H) -> Hooked<S, H> {
        Hooked { store, hook }
    }

    /// Runs `call` on the store, with the hook before and after: the store
    /// is not called at all when `before` fails.
    async fn run<'a, T, F>(
        &'a self,
        call: Op,
        answer: impl FnOnce(&'a S) -> F,
    ) -> Result<T, StoreError>
    where
        H: Hook,
        F: Future<Output = Result<T, StoreError>>,
    {
        self.hook.before(call).await?;
        let result = answer(&self.store).await;
        self.hook.after(call, result.as_ref().err()).await?;
        result
    }
}

impl<S: Named, H: Hook> Named for Hooked<S, H> {
    fn name(&self) -> &'static str {
        self.store.name()
    }
}

#[async_trait]
impl<S: CounterStore, H: Hook> CounterStore for Hooked<S, H> {
    async fn count(&self, c: &[Counter], id: CheckId, d: Deadline) -> Result<Vec<u64>, StoreError> {
        self.run(Op::Count, |s| s.count(c, id, d)).await
    }

    async fn reserve(
        &self,
        c: &[Counter],
        id: CheckId,
        d: Deadline,
    ) -> Result<Reservation, StoreError> {
        self.run(Op::Reserve, |s| s.reserve(c, id, d)).await
    }

    async fn refund(
        &self,
        c: &[Counter],
        id: CheckId,
        d: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        self.run(Op::Refund, |s| s.refund(c, id, d)).await
    }

    async fn get(&self, k: &[String], d: Deadline) -> Result<Vec<u64>, StoreError> {
        self.run(Op::Get, |s| s.get(k, d)).await
    }

    async fn delete(&self, k: &str, d: Deadline) -> Result<bool, StoreError> {
        self.run(Op::Delete, |s| s.delete(k, d)).await
    }
    async fn end_lease(&self, k: &str, id: CheckId, d: Deadline) -> Result<bool, StoreError> {
        self.run(Op::EndLease, |s| s.end_lease(k, id, d)).await
    }
    async fn renew_lease(
        &self,
        k: &str,
        id: CheckId,
        lifetime: Duration,
        d: Deadline,
    ) -> Result<bool, StoreError> {
        self.run(Op::RenewLease, |s| s.renew_lease(k, id, lifetime, d))
            .await
    }
    async fn leases(&self, k: &str, d: Deadline) -> Result<Leases, StoreError> {
        self.run(Op::Leases, |s| s.leases(k, d)).await
    }
}

#[async_trait]
impl<S: MarkStore, H: Hook> MarkStore for Hooked<S, H> {
    async fn claim(
        &self,
        k: &str,
        t: &str,
        ttl: Duration,
        d: Deadline,
    ) -> Result<Claim, StoreError> {
        self.run(Op::Claim, |s| s.claim(k, t, ttl, d)).await
    }

    async fn finish(
        &self,
        k: &str,
        t: &str,
        ttl: Duration,
        d: Deadline,
    ) -> Result<bool, StoreError> {
        self.run(Op::Finish, |s| s.finish(k, t, ttl, d)).await
    }

    async fn release(&self, k: &str, t: &str, d: Deadline) -> Result<bool, StoreError> {
        self.run(Op::Release, |s| s.release(k, t, d)).await
    }
}
