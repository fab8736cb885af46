//! [`Faulty`]: a store wrapper that fails on demand, for the policy checks.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use super::{Hook, Hooked};
use crate::StoreError;
use crate::observe::Op;

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
    /// Passes the next call to the wrapped store, which applies it, then
    /// fails it with a transient connection error, as a connection broken
    /// after the write would; the calls after it pass.
    LoseReply,
}

/// Wraps a real store and fails on demand; counts the calls it receives,
/// by operation.
pub type Faulty<S> = Hooked<S, Faults>;

/// The hook of a [`Faulty`] store: the fault it answers with, and the calls
/// it received.
#[derive(Debug, Default)]
pub struct Faults {
    fault: Mutex<Fault>,
    calls: [AtomicUsize; Op::ALL.len()],
}

impl<S> Hooked<S, Faults> {
    /// Wraps `store`, passing calls through until told otherwise.
    pub fn new(store: S) -> Faulty<S> {
        Hooked {
            store,
            hook: Faults::default(),
        }
    }

    /// Sets how the following calls are answered.
    pub fn set(&self, fault: Fault) {
        *self.hook.fault.lock().unwrap_or_else(|p| p.into_inner()) = fault;
    }

    /// How many calls reached this wrapper.
    pub fn calls(&self) -> usize {
        self.hook
            .calls
            .iter()
            .map(|n| n.load(Ordering::SeqCst))
            .sum()
    }

    /// How many calls of `call` reached this wrapper.
    pub fn calls_to(&self, call: Op) -> usize {
        self.hook.calls[call as usize].load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Hook for Faults {
    async fn before(&self, call: Op) -> Result<(), StoreError> {
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
            Fault::LoseReply => Ok(()),
        }
    }

    async fn after(&self, _: Op, _: Option<&StoreError>) -> Result<(), StoreError> {
        let mut fault = self.fault.lock().unwrap_or_else(|p| p.into_inner());
        if *fault != Fault::LoseReply {
            return Ok(());
        }
        *fault = Fault::None;
        Err(StoreError::Connection(
            "connection broken after the write (injected)".into(),
        ))
    }
}
