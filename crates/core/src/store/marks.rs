//! [`MarkStore`]: de-duplication marks, owned by a token while work runs,
//! then done.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::{Deadline, Named, Store, StoreError};

/// The value of a mark once its work is done.
pub const MARK_DONE: &str = "done";

/// What [`MarkStore::claim`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Claim {
    /// The key now holds the caller's token: stored by this call, or by an
    /// earlier attempt of the same claim.
    Acquired,
    /// The key holds another value: another token, or [`MARK_DONE`].
    Held,
}

/// Marks: short strings under opaque keys, each with a lifetime, that
/// [`Deliveries`](crate::Deliveries) uses so that a delivery sent twice is
/// processed once. A mark holds the random token of whoever works on it (a
/// lease), then [`MARK_DONE`].
///
/// # Contract
///
/// Every store must pass the mark checks of `tollgate-conformance`, which
/// are the definition of this contract. In short:
///
/// - Each method is one round trip, under the attempt's [`Deadline`] as
///   for [`CounterStore`](crate::CounterStore).
/// - A mark always has a lifetime, the `ttl` of its latest write.
/// - A claim retried with the same token sees its own first write
///   ([`Claim::Acquired`]); only the token that holds a mark finishes or
///   releases it; a done mark is held for every token.
/// - Marks survive dropping every client and opening new ones, and never
///   share a key with counters.
///
/// # Errors
///
/// Every failure is a [`StoreError`], as for counters.
#[async_trait]
pub trait MarkStore: Named {
    /// Stores the mark `key` = `token` for `ttl` unless the key holds a
    /// value; [`Claim::Acquired`] when it now holds `token` (this call or an
    /// earlier attempt of it stored it), [`Claim::Held`] otherwise.
    async fn claim(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<Claim, StoreError>;

    /// Sets the mark `key` to [`MARK_DONE`] for `ttl` when it holds `token`,
    /// nothing or already [`MARK_DONE`]; whether it did (false: another
    /// token holds it).
    async fn finish(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<bool, StoreError>;

    /// Removes the mark `key` when it holds `token`; whether it did.
    async fn release(&self, key: &str, token: &str, deadline: Deadline)
    -> Result<bool, StoreError>;
}

/// A mark store that forwards every call to `**self`.
macro_rules! forward {
    ($(impl [$($generics:tt)*] for $ty:ty;)*) => {$(
        #[async_trait]
        impl<$($generics)*> MarkStore for $ty {
            async fn claim(&self, key: &str, token: &str, ttl: Duration, deadline: Deadline) -> Result<Claim, StoreError> {
                (**self).claim(key, token, ttl, deadline).await
            }
            async fn finish(&self, key: &str, token: &str, ttl: Duration, deadline: Deadline) -> Result<bool, StoreError> {
                (**self).finish(key, token, ttl, deadline).await
            }
            async fn release(&self, key: &str, token: &str, deadline: Deadline) -> Result<bool, StoreError> {
                (**self).release(key, token, deadline).await
            }
        }
    )*};
}

forward! {
    impl [S: MarkStore] for Arc<S>;
    impl [] for Arc<dyn MarkStore>;
    impl [] for Arc<dyn Store>;
    impl [S: MarkStore] for Box<S>;
    impl [] for Box<dyn MarkStore>;
}
