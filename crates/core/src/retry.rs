//! Bounded store calls: a per-attempt timeout and a few spaced retries.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;

use crate::{Counter, CounterStore, Expiry, Reservation, StoreError};

/// How a [`Retry`] store bounds each call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after a transient failure (2 by default): at most `retries + 1` attempts.
    pub retries: u32,
    /// Pause between attempts (100 ms by default).
    pub delay: Duration,
    /// Limit on each attempt (50 ms by default); an attempt over it fails as
    /// [`StoreError::Timeout`].
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            retries: 2,
            delay: Duration::from_millis(100),
            timeout: Duration::from_millis(50),
        }
    }
}

impl RetryPolicy {
    /// The longest a call can take under this policy, failing every attempt on
    /// its timeout: `(retries + 1) × timeout + retries × delay` (350 ms by
    /// default), saturating at [`Duration::MAX`] rather than panicking.
    pub fn worst_case(&self) -> Duration {
        self.timeout
            .saturating_mul(self.retries.saturating_add(1))
            .saturating_add(self.delay.saturating_mul(self.retries))
    }
}

/// A store wrapper that bounds every call by a [`RetryPolicy`].
///
/// Only transient failures are retried. Retrying an increment whose first
/// attempt reached the store but whose reply was lost counts that call twice:
/// over-counting is the safe direction. [`set_if_absent`](CounterStore::set_if_absent)
/// is never retried, since a retry could mistake its own first write for
/// someone else's and drop a webhook delivery; its single attempt is still
/// under the timeout.
#[derive(Debug)]
pub struct Retry<S> {
    inner: S,
    policy: RetryPolicy,
}

impl<S: CounterStore> Retry<S> {
    /// Wraps `inner` with `policy`.
    pub fn new(inner: S, policy: RetryPolicy) -> Retry<S> {
        Retry { inner, policy }
    }

    /// The wrapped store.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    async fn attempt<T, F>(&self, call: F) -> Result<T, StoreError>
    where
        F: Future<Output = Result<T, StoreError>>,
    {
        match tokio::time::timeout(self.policy.timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Timeout(self.policy.timeout)),
        }
    }

    async fn run<T, F, Fut>(&self, mut call: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let mut retries = 0;
        loop {
            match self.attempt(call()).await {
                Err(e) if e.is_transient() && retries < self.policy.retries => {
                    retries += 1;
                    tracing::debug!(
                        kind = e.kind(),
                        retries,
                        "rate limit store call failed; retrying"
                    );
                    tokio::time::sleep(self.policy.delay).await;
                }
                result => return result,
            }
        }
    }
}

#[async_trait]
impl<S: CounterStore> CounterStore for Retry<S> {
    async fn increment(&self, counters: &[Counter]) -> Result<Vec<u64>, StoreError> {
        self.run(|| self.inner.increment(counters)).await
    }

    async fn increment_within(&self, counters: &[Counter]) -> Result<Reservation, StoreError> {
        self.run(|| self.inner.increment_within(counters)).await
    }

    async fn get(&self, keys: &[String]) -> Result<Vec<u64>, StoreError> {
        self.run(|| self.inner.get(keys)).await
    }

    async fn set_if_absent(&self, key: &str, ttl: Duration) -> Result<bool, StoreError> {
        self.attempt(self.inner.set_if_absent(key, ttl)).await
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        self.run(|| self.inner.delete(key)).await
    }

    async fn expiry(&self, key: &str) -> Result<Expiry, StoreError> {
        self.run(|| self.inner.expiry(key)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worst_case_saturates_instead_of_panicking() {
        assert_eq!(
            RetryPolicy::default().worst_case(),
            Duration::from_millis(350)
        );
        let huge = RetryPolicy {
            retries: u32::MAX,
            delay: Duration::MAX,
            timeout: Duration::MAX,
        };
        assert_eq!(huge.worst_case(), Duration::MAX);
    }
}
