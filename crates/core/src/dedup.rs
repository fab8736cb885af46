//! Webhook de-duplication: a delivery sent twice is processed once.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::observe::Op;
use crate::{Claim, CounterStore, Error, Limiter, MAX_PART_LEN, StoreError};

/// Marks webhook deliveries, as `github-delivery:<id>`, in two states:
/// *processing*, a short lease owned by a random token (so that a retried
/// write recognises its own first write), and *done*, for 24 hours.
///
/// ```
/// # async fn demo(limiter: tollgate_core::Limiter, id: &str) -> Result<(), tollgate_core::Error> {
/// let deliveries = limiter.deliveries();
/// if let Some(delivery) = deliveries.begin(id).await? {
///     match process(id).await {
///         Ok(()) => delivery.complete().await?, // done: redeliveries are duplicates
///         Err(_) => delivery.release().await?, // a redelivery may try again
///     }
/// }
/// # Ok(()) }
/// # async fn process(_: &str) -> Result<(), ()> { Ok(()) }
/// ```
///
/// If processing fails, the handle is dropped without completing, or the
/// process dies, the lease ends and a redelivery is processed.
#[derive(Clone, Debug)]
pub struct Deliveries {
    limiter: Limiter,
    lease: Duration,
}

impl Deliveries {
    /// How long a processed delivery is remembered: 24 hours.
    pub const TTL: Duration = Duration::from_secs(24 * 3_600);

    /// How long a delivery being processed is held by default: 60 seconds.
    pub const LEASE: Duration = Duration::from_secs(60);

    /// De-duplication in `limiter`'s store, under its retry policy.
    pub fn new(limiter: Limiter) -> Deliveries {
        Deliveries {
            limiter,
            lease: Deliveries::LEASE,
        }
    }

    /// The same, holding a delivery being processed for `lease` (at least
    /// one millisecond): longer than processing ever takes.
    pub fn with_lease(mut self, lease: Duration) -> Deliveries {
        self.lease = lease.max(Duration::from_millis(1));
        self
    }

    /// The stored key for delivery `id`.
    pub fn key(id: &str) -> Result<String, Error> {
        if id.is_empty() || id.len() > MAX_PART_LEN {
            return Err(Error::InvalidDeliveryId);
        }
        Ok(format!("github-delivery:{id}"))
    }

    /// Starts processing delivery `id`: `Some` handle exactly once per id
    /// while nobody holds or has finished it, even when deliveries race;
    /// `None` for a duplicate. Fail-closed; a call answered with an error
    /// leaves no mark behind where the store can tell.
    pub async fn begin(&self, id: &str) -> Result<Option<Delivery>, Error> {
        let key = Deliveries::key(id)?;
        let token = token();
        let store: &dyn CounterStore = &**self.limiter.store();
        let claim = self
            .limiter
            .retry_policy()
            .run(self.limiter.calls(), Op::Claim, true, |deadline| {
                store.claim(&key, &token, self.lease, deadline)
            })
            .await;
        match claim {
            Ok(Claim::Acquired) => Ok(Some(Delivery {
                limiter: self.limiter.clone(),
                key,
                token,
                open: true,
            })),
            Ok(Claim::Held) => Ok(None),
            Err(err) => Err(fail(&self.limiter, err)),
        }
    }
}

/// A delivery being processed: [`complete`](Delivery::complete) it when
/// processing succeeded, or [`release`](Delivery::release) it (or drop it)
/// so that a redelivery is processed.
#[derive(Debug)]
#[must_use = "a delivery is released when dropped; complete it once processed"]
pub struct Delivery {
    limiter: Limiter,
    key: String,
    token: String,
    open: bool,
}

impl Delivery {
    /// Marks the delivery done for [`Deliveries::TTL`]: redeliveries are
    /// duplicates from now on. Fail-closed: on an error the lease still ends
    /// by itself, and a redelivery is processed again.
    pub async fn complete(mut self) -> Result<(), Error> {
        self.open = false;
        let store: &dyn CounterStore = &**self.limiter.store();
        let done = self
            .limiter
            .retry_policy()
            .run(self.limiter.calls(), Op::Finish, true, |deadline| {
                store.finish(&self.key, &self.token, Deliveries::TTL, deadline)
            })
            .await;
        match done {
            Ok(true) => Ok(()),
            Ok(false) => {
                tracing::warn!("a webhook lease ran out before its delivery was complete");
                Ok(())
            }
            Err(err) => Err(fail(&self.limiter, err)),
        }
    }

    /// Gives the delivery up, so that a redelivery is processed. Fail-closed.
    pub async fn release(mut self) -> Result<(), Error> {
        self.open = false;
        release(&self.limiter, &self.key, &self.token)
            .await
            .map_err(|err| fail(&self.limiter, err))
    }
}

impl Drop for Delivery {
    /// Releases an open delivery in the background (when a tokio runtime
    /// is there to run it); its lease ends by itself otherwise.
    fn drop(&mut self) {
        if !self.open {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let limiter = self.limiter.clone();
        let key = std::mem::take(&mut self.key);
        let token = std::mem::take(&mut self.token);
        runtime.spawn(async move {
            if let Err(err) = release(&limiter, &key, &token).await {
                tracing::debug!(kind = err.kind(), "releasing a dropped delivery failed");
            }
        });
    }
}

async fn release(limiter: &Limiter, key: &str, token: &str) -> Result<(), StoreError> {
    let store: &dyn CounterStore = &**limiter.store();
    limiter
        .retry_policy()
        .run(limiter.calls(), Op::Release, true, |deadline| {
            store.release(key, token, deadline)
        })
        .await
        .map(drop)
}

fn fail(limiter: &Limiter, err: StoreError) -> Error {
    limiter.unavailable("webhook-delivery", err)
}

/// 128 random bits, as 32 hex digits; from the clock, the process and a
/// counter if the system's random source fails.
fn token() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let n = NEXT.fetch_add(1, Ordering::Relaxed) ^ u64::from(std::process::id()) << 32;
        bytes[..8].copy_from_slice(&nanos.to_le_bytes());
        bytes[8..].copy_from_slice(&n.to_le_bytes());
    }
    let mut text = String::with_capacity(32);
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_done_delivery_is_remembered_a_day_and_ids_are_bounded() {
        assert_eq!(Deliveries::TTL, Duration::from_secs(86_400));
        let longest = "x".repeat(MAX_PART_LEN);
        assert_eq!(
            Deliveries::key(&longest).ok(),
            Some(format!("github-delivery:{longest}"))
        );
        let over = "x".repeat(MAX_PART_LEN + 1);
        assert!(matches!(
            Deliveries::key(&over),
            Err(Error::InvalidDeliveryId)
        ));
        assert!(matches!(Deliveries::key(""), Err(Error::InvalidDeliveryId)));
    }

    #[test]
    fn tokens_are_32_hex_digits_and_differ() {
        let (a, b) = (token(), token());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert_ne!(a, crate::MARK_DONE);
    }

    #[test]
    fn delivery_ids_are_1_to_256_bytes() {
        assert!(Deliveries::key("").is_err());
        assert!(Deliveries::key(&"x".repeat(257)).is_err());
        assert_eq!(
            Deliveries::key("abc").ok().as_deref(),
            Some("github-delivery:abc")
        );
    }
}
