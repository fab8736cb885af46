//! Webhook de-duplication: a delivery sent twice is processed once.

use std::sync::Arc;
use std::time::Duration;

use crate::{CounterStore, Error, Limiter, MAX_PART_LEN};

/// Marks webhook deliveries as seen, as `github-delivery:<id>` for 24 hours.
///
/// ```
/// # async fn demo(limiter: tollgate_core::Limiter, id: &str) -> Result<(), tollgate_core::Error> {
/// let deliveries = limiter.deliveries();
/// if deliveries.first_delivery(id).await? {
///     if let Err(_processing_failed) = process(id).await {
///         deliveries.release(id).await?; // a redelivery may try again
///     }
/// }
/// # Ok(()) }
/// # async fn process(_: &str) -> Result<(), ()> { Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Deliveries {
    store: Arc<dyn CounterStore>,
    ttl: Duration,
}

impl Deliveries {
    /// How long a delivery is remembered: 24 hours.
    pub const TTL: Duration = Duration::from_secs(24 * 3_600);

    /// De-duplication over `store`, remembering deliveries for [`Deliveries::TTL`].
    pub fn new(store: Arc<dyn CounterStore>) -> Deliveries {
        Deliveries {
            store,
            ttl: Deliveries::TTL,
        }
    }

    /// The stored key for delivery `id`.
    pub fn key(id: &str) -> Result<String, Error> {
        if id.is_empty() || id.len() > MAX_PART_LEN {
            return Err(Error::InvalidDeliveryId);
        }
        Ok(format!("github-delivery:{id}"))
    }

    /// Whether this is the first time delivery `id` is seen; true exactly once
    /// per id, even when deliveries race. Fail-closed.
    pub async fn first_delivery(&self, id: &str) -> Result<bool, Error> {
        let key = Deliveries::key(id)?;
        self.store
            .set_if_absent(&key, self.ttl)
            .await
            .map_err(Error::Unavailable)
    }

    /// Forgets delivery `id`, so that a redelivery is processed: call it when
    /// processing failed. Fail-closed.
    pub async fn release(&self, id: &str) -> Result<(), Error> {
        let key = Deliveries::key(id)?;
        self.store.delete(&key).await.map_err(Error::Unavailable)?;
        Ok(())
    }
}

impl Limiter {
    /// Webhook de-duplication sharing this limiter's store (and its retry bounds).
    pub fn deliveries(&self) -> Deliveries {
        Deliveries::new(self.store().clone())
    }
}
