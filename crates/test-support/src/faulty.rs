//! [`Faulty`]: a store wrapper that fails on demand, for the policy checks.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tollgate_core::{Claim, Counter, CounterStore, Deadline, Reservation, StoreError, async_trait};

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

/// A store operation, for [`Faulty::calls_to`].
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

/// Wraps a real store and fails on demand; counts the calls it receives,
/// by operation.
#[derive(Debug)]
pub struct Faulty<S> {
    inner: S,
    fault: Mutex<Fault>,
    calls: [AtomicUsize; 8],
}

impl<S: CounterStore> Faulty<S> {
    /// Wraps `inner`, passing calls through until told otherwise.
    pub fn new(inner: S) -> Faulty<S> {
        Faulty {
            inner,
            fault: Mutex::new(Fault::None),
            calls: Default::default(),
        }
    }

    /// Sets how the following calls are answered.
    pub fn set(&self, fault: Fault) {
        *self.fault.lock().unwrap_or_else(|p| p.into_inner()) = fault;
    }

    /// How many calls reached this wrapper.
    pub fn calls(&self) -> usize {
        self.calls.iter().map(|n| n.load(Ordering::SeqCst)).sum()
    }

    /// How many calls of `call` reached this wrapper.
    pub fn calls_to(&self, call: Call) -> usize {
        self.calls[call as usize].load(Ordering::SeqCst)
    }

    async fn gate(&self, call: Call) -> Result<(), StoreError> {
        self.calls[call as usize].fetch_add(1, Ordering::SeqCst);
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
    async fn count(
        &self,
        counters: &[Counter],
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        self.gate(Call::Count).await?;
        self.inner.count(counters, deadline).await
    }

    async fn reserve(
        &self,
        counters: &[Counter],
        deadline: Deadline,
    ) -> Result<Reservation, StoreError> {
        self.gate(Call::Reserve).await?;
        self.inner.reserve(counters, deadline).await
    }

    async fn refund(
        &self,
        counters: &[Counter],
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        self.gate(Call::Refund).await?;
        self.inner.refund(counters, deadline).await
    }

    async fn get(&self, keys: &[String], deadline: Deadline) -> Result<Vec<u64>, StoreError> {
        self.gate(Call::Get).await?;
        self.inner.get(keys, deadline).await
    }

    async fn delete(&self, key: &str, deadline: Deadline) -> Result<bool, StoreError> {
        self.gate(Call::Delete).await?;
        self.inner.delete(key, deadline).await
    }

    async fn claim(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<Claim, StoreError> {
        self.gate(Call::Claim).await?;
        self.inner.claim(key, token, ttl, deadline).await
    }

    async fn finish(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        self.gate(Call::Finish).await?;
        self.inner.finish(key, token, ttl, deadline).await
    }

    async fn release(
        &self,
        key: &str,
        token: &str,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        self.gate(Call::Release).await?;
        self.inner.release(key, token, deadline).await
    }
}
