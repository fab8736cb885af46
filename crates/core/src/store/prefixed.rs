//! [`Prefixed`]: any store with its keys under a prefix.

use std::time::Duration;

use async_trait::async_trait;

use crate::{
    CheckId, Claim, Counter, CounterStore, Deadline, Leases, MarkStore, Named, Prior, Reservation,
    StoreError,
};

/// A store that writes `prefix` before every key, counters and marks alike,
/// of the store it wraps: several applications or environments share one
/// server without sharing a count.
///
/// ```
/// # fn demo(store: impl tollgate_core::Store) {
/// use tollgate_core::{Limiter, Prefixed};
/// // `limit:ask:docs:20421` is stored as `staging:limit:ask:docs:20421`.
/// let limiter = Limiter::new(Prefixed::new("staging:", store));
/// # let _ = limiter;
/// # }
/// ```
///
/// A prefix is part of every stored key, so on Redis Cluster a prefix
/// holding a hash tag (`{tenant}:`) puts all of a store's keys in one slot.
#[derive(Clone, Debug)]
pub struct Prefixed<S> {
    prefix: Box<str>,
    store: S,
}

impl<S> Prefixed<S> {
    /// `store` with `prefix` before every key.
    pub fn new(prefix: impl Into<String>, store: S) -> Prefixed<S> {
        Prefixed {
            prefix: prefix.into().into_boxed_str(),
            store,
        }
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.store
    }

    fn key(&self, key: &str) -> String {
        let mut prefixed = String::with_capacity(self.prefix.len() + key.len());
        prefixed.push_str(&self.prefix);
        prefixed.push_str(key);
        prefixed
    }

    fn counters(&self, counters: &[Counter]) -> Vec<Counter> {
        counters
            .iter()
            .map(|counter| Counter {
                key: self.key(&counter.key),
                ttl: counter.ttl,
                cost: counter.cost,
                max: counter.max,
                floor: counter.floor,
                prior: counter.prior.as_ref().map(|prior| Prior {
                    key: self.key(&prior.key),
                    ..prior.clone()
                }),
                lease: counter.lease,
            })
            .collect()
    }
}

impl<S: Named> Named for Prefixed<S> {
    fn name(&self) -> &'static str {
        self.store.name()
    }
}

#[async_trait]
impl<S: CounterStore> CounterStore for Prefixed<S> {
    async fn count(&self, c: &[Counter], id: CheckId, d: Deadline) -> Result<Vec<u64>, StoreError> {
        self.store.count(&self.counters(c), id, d).await
    }

    async fn reserve(
        &self,
        c: &[Counter],
        id: CheckId,
        d: Deadline,
    ) -> Result<Reservation, StoreError> {
        self.store.reserve(&self.counters(c), id, d).await
    }

    async fn refund(
        &self,
        c: &[Counter],
        id: CheckId,
        d: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        self.store.refund(&self.counters(c), id, d).await
    }

    async fn get(&self, keys: &[String], d: Deadline) -> Result<Vec<u64>, StoreError> {
        let keys: Vec<String> = keys.iter().map(|key| self.key(key)).collect();
        self.store.get(&keys, d).await
    }

    async fn end_lease(&self, key: &str, id: CheckId, d: Deadline) -> Result<bool, StoreError> {
        self.store.end_lease(&self.key(key), id, d).await
    }
    async fn renew_lease(
        &self,
        key: &str,
        id: CheckId,
        lifetime: Duration,
        d: Deadline,
    ) -> Result<bool, StoreError> {
        self.store
            .renew_lease(&self.key(key), id, lifetime, d)
            .await
    }
    async fn leases(&self, key: &str, d: Deadline) -> Result<Leases, StoreError> {
        self.store.leases(&self.key(key), d).await
    }
    async fn delete(&self, key: &str, d: Deadline) -> Result<bool, StoreError> {
        self.store.delete(&self.key(key), d).await
    }
}

#[async_trait]
impl<S: MarkStore> MarkStore for Prefixed<S> {
    async fn claim(
        &self,
        k: &str,
        t: &str,
        ttl: Duration,
        d: Deadline,
    ) -> Result<Claim, StoreError> {
        self.store.claim(&self.key(k), t, ttl, d).await
    }

    async fn finish(
        &self,
        k: &str,
        t: &str,
        ttl: Duration,
        d: Deadline,
    ) -> Result<bool, StoreError> {
        self.store.finish(&self.key(k), t, ttl, d).await
    }

    async fn release(&self, k: &str, t: &str, d: Deadline) -> Result<bool, StoreError> {
        self.store.release(&self.key(k), t, d).await
    }
}
