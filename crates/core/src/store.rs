//! The storage contract: [`CounterStore`].

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::StoreError;

/// One counter of a batch: its stored key, its lifetime and the most the
/// all-or-nothing increment may bring it to.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Counter {
    /// The stored key, e.g. `limit:ask:docs:203.0.113.9:20421`.
    pub key: String,
    /// The counter's lifetime: it expires at most this long after an increment.
    pub ttl: Duration,
    /// The ceiling checked by [`CounterStore::increment_within`]; ignored by
    /// [`CounterStore::increment`].
    pub max: u64,
}

/// What [`CounterStore::increment_within`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Whether every counter was incremented (otherwise none was).
    pub applied: bool,
    /// Per counter, in order: the new count when applied, else the current count.
    pub counts: Vec<u64>,
}

/// The remaining lifetime of a stored key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// No such key (or it has expired).
    Absent,
    /// The key exists without a lifetime: a broken store contract for counters.
    Never,
    /// The key expires after this long.
    In(Duration),
}

/// Storage for counters. A store only keeps integers; all rules, windows and
/// policies stay in the core.
///
/// # Contract
///
/// Every store must pass `tollgate-conformance`, which is the definition of
/// this contract. In short:
///
/// - Each method is one round trip to the store, whatever the batch size.
/// - Increment and expiry are atomic per counter: a counter is never visible
///   without a lifetime, and that lifetime never reaches past `ttl` after its
///   latest increment (a store may set it on every increment, as Redis does,
///   or only when the counter starts, as SQLite does).
/// - [`increment_within`](CounterStore::increment_within) is atomic across
///   the whole batch: it increments every counter or none.
/// - Concurrent callers (tasks, processes, machines sharing the store) never
///   lose or duplicate an increment.
/// - Counts survive dropping every client and opening new ones.
/// - Keys are opaque bytes; a store must not merge two different keys.
/// - Keys within one batch are distinct (the [`Limiter`](crate::Limiter)
///   guarantees it).
///
/// # Errors
///
/// Every failure is a [`StoreError`], marked transient when a retry may
/// succeed. A reply that cannot be read (wrong type, wrong length) is
/// [`StoreError::InvalidReply`], never a panic.
#[async_trait]
pub trait CounterStore: Debug + Send + Sync + 'static {
    /// Increments each counter by one and returns the new counts, in order.
    async fn increment(&self, counters: &[Counter]) -> Result<Vec<u64>, StoreError>;

    /// Increments every counter by one if each stays within its `max`,
    /// otherwise increments none; atomic across the batch.
    async fn increment_within(&self, counters: &[Counter]) -> Result<Reservation, StoreError>;

    /// Reads the counts of `keys` without changing them; 0 for an absent key.
    async fn get(&self, keys: &[String]) -> Result<Vec<u64>, StoreError>;

    /// Stores `key` with lifetime `ttl` if it is absent; whether it was stored.
    async fn set_if_absent(&self, key: &str, ttl: Duration) -> Result<bool, StoreError>;

    /// Removes `key`; whether it existed.
    async fn delete(&self, key: &str) -> Result<bool, StoreError>;

    /// The remaining lifetime of `key`.
    async fn expiry(&self, key: &str) -> Result<Expiry, StoreError>;
}

macro_rules! forward_store {
    ($($ty:ty),*) => {$(
        #[async_trait]
        impl<S: CounterStore + ?Sized> CounterStore for $ty {
            async fn increment(&self, counters: &[Counter]) -> Result<Vec<u64>, StoreError> {
                (**self).increment(counters).await
            }
            async fn increment_within(&self, counters: &[Counter]) -> Result<Reservation, StoreError> {
                (**self).increment_within(counters).await
            }
            async fn get(&self, keys: &[String]) -> Result<Vec<u64>, StoreError> {
                (**self).get(keys).await
            }
            async fn set_if_absent(&self, key: &str, ttl: Duration) -> Result<bool, StoreError> {
                (**self).set_if_absent(key, ttl).await
            }
            async fn delete(&self, key: &str) -> Result<bool, StoreError> {
                (**self).delete(key).await
            }
            async fn expiry(&self, key: &str) -> Result<Expiry, StoreError> {
                (**self).expiry(key).await
            }
        }
    )*};
}

forward_store!(Arc<S>, Box<S>);
