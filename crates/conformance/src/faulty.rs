//! [`Faulty`]: a store wrapper that fails on demand, for the policy checks.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tollgate_core::{Counter, CounterStore, Expiry, Reservation, StoreError, async_trait};

/// How a [`Faulty`] store answers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// Passes every call to the wrapped store.
    #[default]
    None,
    /// Fails every call with a transient connection error.
    Transient,
    /// Fails every call with a permanent backend error.
    Permanent,
    /// Never answers (a frozen store).
    Hang,
}

/// Wraps a real store and fails on demand; counts the calls it receives.
#[derive(Debug)]
pub struct Faulty<S> {
    inner: S,
    fault: Mutex<Fault>,
    calls: AtomicUsize,
}

impl<S: CounterStore> Faulty<S> {
    /// Wraps `inner`, passing calls through until told otherwise.
    pub fn new(inner: S) -> Faulty<S> {
        Faulty {
            inner,
            fault: Mutex::new(Fault::None),
            calls: AtomicUsize::new(0),
        }
    }

    /// Sets how the following calls are answered.
    pub fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap_or_else(|p| p.into_inner()) = fault;
    }

    /// How many calls reached this wrapper.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    async fn gate(&self) -> Result<(), StoreError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let fault = *self.fault.lock().unwrap_or_else(|p| p.into_inner());
        match fault {
            Fault::None => Ok(()),
            Fault::Transient => Err(StoreError::Connection(
                "connection refused (injected)".into(),
            )),
            Fault::Permanent => Err(StoreError::Backend(
                "ERR limit:secret-key (injected)".into(),
            )),
            Fault::Hang => {
                tokio::time::sleep(Duration::from_secs(3_600)).await;
                Err(StoreError::Timeout(Duration::from_secs(3_600)))
            }
        }
    }
}

#[async_trait]
impl<S: CounterStore> CounterStore for Faulty<S> {
    async fn increment(&self, counters: &[Counter]) -> Result<Vec<u64>, StoreError> {
        self.gate().await?;
        self.inner.increment(counters).await
    }

    async fn increment_within(&self, counters: &[Counter]) -> Result<Reservation, StoreError> {
        self.gate().await?;
        self.inner.increment_within(counters).await
    }

    async fn get(&self, keys: &[String]) -> Result<Vec<u64>, StoreError> {
        self.gate().await?;
        self.inner.get(keys).await
    }

    async fn set_if_absent(&self, key: &str, ttl: Duration) -> Result<bool, StoreError> {
        self.gate().await?;
        self.inner.set_if_absent(key, ttl).await
    }

    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        self.gate().await?;
        self.inner.delete(key).await
    }

    async fn expiry(&self, key: &str) -> Result<Expiry, StoreError> {
        self.gate().await?;
        self.inner.expiry(key).await
    }
}
