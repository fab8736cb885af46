//! [`Hooked`]: a store wrapper that runs a test's [`Hook`] around every
//! call of the store it wraps, so that a test states only what it changes.

use std::fmt::Debug;
use std::time::Duration;

use tollgate_core::{Claim, Counter, CounterStore, Deadline, Reservation, StoreError, async_trait};

/// A store operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// [`CounterStore::count`].
    Count,
    /// [`CounterStore::reserve`].
    Reserve,
    /// [`CounterStore::refund`].
    Refund,
    /// [`CounterStore::get`].
    Get,
    /// [`CounterStore::delete`].
    Delete,
    /// [`CounterStore::claim`].
    Claim,
    /// [`CounterStore::finish`].
    Finish,
    /// [`CounterStore::release`].
    Release,
}

/// What a [`Hooked`] store does around each call; both steps do nothing
/// unless a hook says otherwise.
#[async_trait]
pub trait Hook: Debug + Send + Sync + 'static {
    /// Before `call` reaches the store; an error answers the call instead.
    async fn before(&self, _call: Call) -> Result<(), StoreError> {
        Ok(())
    }

    /// Once the store answered `call`, with `error` when it failed.
    async fn after(&self, _call: Call, _error: Option<&StoreError>) {}
}

#[async_trait]
impl<H: Hook> Hook for std::sync::Arc<H> {
    async fn before(&self, call: Call) -> Result<(), StoreError> {
        (**self).before(call).await
    }

    async fn after(&self, call: Call, error: Option<&StoreError>) {
        (**self).after(call, error).await;
    }
}

/// A store that runs `hook` around every call of `store`, and is named
/// as it.
#[derive(Debug)]
pub struct Hooked<S, H> {
    /// The wrapped store.
    pub store: S,
    /// What runs around its calls.
    pub hook: H,
}

impl<S, H> Hooked<S, H> {
    async fn around<T>(
        &self,
        call: Call,
        answer: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError>
    where
        H: Hook,
    {
        self.hook.before(call).await?;
        let result = answer.await;
        self.hook.after(call, result.as_ref().err()).await;
        result
    }
}

#[async_trait]
impl<S: CounterStore, H: Hook> CounterStore for Hooked<S, H> {
    fn name(&self) -> &'static str {
        self.store.name()
    }

    async fn count(&self, c: &[Counter], d: Deadline) -> Result<Vec<u64>, StoreError> {
        self.around(Call::Count, self.store.count(c, d)).await
    }

    async fn reserve(&self, c: &[Counter], d: Deadline) -> Result<Reservation, StoreError> {
        self.around(Call::Reserve, self.store.reserve(c, d)).await
    }

    async fn refund(&self, c: &[Counter], d: Deadline) -> Result<Vec<u64>, StoreError> {
        self.around(Call::Refund, self.store.refund(c, d)).await
    }

    async fn get(&self, k: &[String], d: Deadline) -> Result<Vec<u64>, StoreError> {
        self.around(Call::Get, self.store.get(k, d)).await
    }

    async fn delete(&self, k: &str, d: Deadline) -> Result<bool, StoreError> {
        self.around(Call::Delete, self.store.delete(k, d)).await
    }

    async fn claim(
        &self,
        k: &str,
        t: &str,
        ttl: Duration,
        d: Deadline,
    ) -> Result<Claim, StoreError> {
        self.around(Call::Claim, self.store.claim(k, t, ttl, d))
            .await
    }

    async fn finish(
        &self,
        k: &str,
        t: &str,
        ttl: Duration,
        d: Deadline,
    ) -> Result<bool, StoreError> {
        self.around(Call::Finish, self.store.finish(k, t, ttl, d))
            .await
    }

    async fn release(&self, k: &str, t: &str, d: Deadline) -> Result<bool, StoreError> {
        self.around(Call::Release, self.store.release(k, t, d))
            .await
    }
}
