//! De-duplication: a delivery sent twice is processed once.

use std::sync::Arc;
use std::time::Duration;

use crate::failure::Failures;
use crate::key::KEY_PREFIX;
use crate::observe::Op;
use crate::retry::Attempts;
use crate::{
    BreakerPolicy, CheckId, Claim, Error, MAX_PART_LEN, MarkStore, RetryPolicy, StoreError,
};

/// Marks deliveries (webhook deliveries, jobs, messages: anything sent
/// again until acknowledged) as `<prefix><id>` in two states:
/// *processing*, a short lease owned by a random token (so that a retried
/// write recognises its own first write), and *done*, remembered for a
/// while. The prefix and both lifetimes are the caller's.
///
/// ```
/// # async fn demo(store: impl tollgate_core::MarkStore, id: &str) -> Result<(), tollgate_core::Error> {
/// use tollgate_core::Deliveries;
/// let deliveries = Deliveries::new(store, "webhook:")?;
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
/// process dies, the lease ends and a redelivery is processed. Cheap to
/// clone; clones share the store.
#[derive(Clone, Debug)]
pub struct Deliveries {
    store: Arc<dyn MarkStore>,
    prefix: Arc<str>,
    lease: Duration,
    done: Duration,
    attempts: Arc<Attempts>,
    failures: Arc<Failures>,
}

impl Deliveries {
    /// How long a delivery being processed is held unless set otherwise:
    /// 60 seconds.
    pub const DEFAULT_LEASE: Duration = Duration::from_secs(60);

    /// How long a processed delivery is remembered unless set otherwise:
    /// 24 hours.
    pub const DEFAULT_DONE: Duration = Duration::from_secs(24 * 3_600);

    /// The longest prefix accepted, in bytes.
    pub const MAX_PREFIX_LEN: usize = 64;

    /// De-duplication of the deliveries marked `<prefix><id>` in `store`,
    /// under the default [`RetryPolicy`] and lifetimes.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPrefix`] for a prefix that is empty, longer than
    /// [`MAX_PREFIX_LEN`](Deliveries::MAX_PREFIX_LEN) bytes, or could make
    /// a key that starts as counter keys do (`limit:`): one that starts
    /// with it, or is the start of it (`limit`, `l`), which an id could
    /// complete. Marks never share a key with counters.
    pub fn new(store: impl MarkStore, prefix: &str) -> Result<Deliveries, Error> {
        if prefix.is_empty()
            || prefix.len() > Deliveries::MAX_PREFIX_LEN
            || prefix.starts_with(KEY_PREFIX)
            || KEY_PREFIX.starts_with(prefix)
        {
            return Err(Error::InvalidPrefix(prefix.to_owned()));
        }
        Ok(Deliveries {
            attempts: Arc::new(Attempts::new(
                store.name(),
                RetryPolicy::default(),
                BreakerPolicy::default(),
            )),
            store: Arc::new(store),
            prefix: prefix.into(),
            lease: Deliveries::DEFAULT_LEASE,
            done: Deliveries::DEFAULT_DONE,
            failures: Arc::default(),
        })
    }

    /// The same, holding a delivery being processed for `lease` (at least
    /// one millisecond): longer than processing ever takes.
    pub fn lease(mut self, lease: Duration) -> Deliveries {
        self.lease = lease.max(Duration::from_millis(1));
        self
    }

    /// The same, remembering a processed delivery for `done` (at least one
    /// millisecond): longer than the sender keeps sending it again.
    pub fn done(mut self, done: Duration) -> Deliveries {
        self.done = done.max(Duration::from_millis(1));
        self
    }

    /// The same, bounding every store call by `retry`.
    pub fn retry(mut self, retry: RetryPolicy) -> Deliveries {
        self.attempts = Arc::new(self.attempts.with_policy(retry));
        self
    }

    /// The stored key for delivery `id`: `<prefix><id>`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidDeliveryId`] for an empty id or one longer than
    /// [`MAX_PART_LEN`] bytes.
    pub fn key(&self, id: &str) -> Result<String, Error> {
        if id.is_empty() || id.len() > MAX_PART_LEN {
            return Err(Error::InvalidDeliveryId);
        }
        Ok(format!("{}{id}", self.prefix))
    }

    /// Starts processing delivery `id`: `Some` handle exactly once per id
    /// while nobody holds or has finished it, even when deliveries race;
    /// `None` for a duplicate. Fail-closed; a call answered with an error
    /// leaves no mark behind where the store can tell.
    pub async fn begin(&self, id: &str) -> Result<Option<Delivery>, Error> {
        let key = self.key(id)?;
        let token = token();
        let claim = self
            .attempts
            .run(Op::Claim, |deadline| {
                self.store.claim(&key, &token, self.lease, deadline)
            })
            .await;
        match claim {
            Ok(Claim::Acquired) => Ok(Some(Delivery {
                deliveries: self.clone(),
                key,
                token,
                open: true,
            })),
            Ok(Claim::Held) => Ok(None),
            Err(err) => Err(self.fail(err)),
        }
    }

    /// Removes the mark `key` if `token` holds it.
    async fn release(&self, key: &str, token: &str) -> Result<(), StoreError> {
        self.attempts
            .run(Op::Release, |deadline| {
                self.store.release(key, token, deadline)
            })
            .await
            .map(drop)
    }

    fn fail(&self, err: StoreError) -> Error {
        self.failures.unavailable(&self.prefix, err)
    }
}

/// A delivery being processed: [`complete`](Delivery::complete) it when
/// processing succeeded, or [`release`](Delivery::release) it (or drop it)
/// so that a redelivery is processed.
#[derive(Debug)]
#[must_use = "a delivery is released when dropped; complete it once processed"]
pub struct Delivery {
    deliveries: Deliveries,
    key: String,
    token: String,
    open: bool,
}

impl Delivery {
    /// Marks the delivery done, for its [`Deliveries`]' `done` lifetime:
    /// redeliveries are duplicates from now on. Fail-closed: on an error
    /// the lease still ends by itself, and a redelivery is processed again.
    pub async fn complete(mut self) -> Result<(), Error> {
        self.open = false;
        let deliveries = &self.deliveries;
        let done = deliveries
            .attempts
            .run(Op::Finish, |deadline| {
                let store = &deliveries.store;
                store.finish(&self.key, &self.token, deliveries.done, deadline)
            })
            .await;
        match done {
            Ok(true) => Ok(()),
            Ok(false) => {
                tracing::warn!("a delivery's lease ran out before it was complete");
                Ok(())
            }
            Err(err) => Err(deliveries.fail(err)),
        }
    }

    /// Gives the delivery up, so that a redelivery is processed. Fail-closed.
    pub async fn release(mut self) -> Result<(), Error> {
        self.open = false;
        let deliveries = &self.deliveries;
        deliveries
            .release(&self.key, &self.token)
            .await
            .map_err(|err| deliveries.fail(err))
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
        let deliveries = self.deliveries.clone();
        let key = std::mem::take(&mut self.key);
        let token = std::mem::take(&mut self.token);
        runtime.spawn(async move {
            if let Err(err) = deliveries.release(&key, &token).await {
                tracing::debug!(kind = err.kind(), "releasing a dropped delivery failed");
            }
        });
    }
}

/// A token no other holder has: a fresh [`CheckId`], as 32 hex digits.
fn token() -> String {
    CheckId::new().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Deadline;

    /// A mark store that is never called.
    #[derive(Debug)]
    struct Nothing;

    impl crate::Named for Nothing {}

    #[async_trait::async_trait]
    impl MarkStore for Nothing {
        async fn claim(
            &self,
            _: &str,
            _: &str,
            _: Duration,
            _: Deadline,
        ) -> Result<Claim, StoreError> {
            unreachable!("not called")
        }
        async fn finish(
            &self,
            _: &str,
            _: &str,
            _: Duration,
            _: Deadline,
        ) -> Result<bool, StoreError> {
            unreachable!("not called")
        }
        async fn release(&self, _: &str, _: &str, _: Deadline) -> Result<bool, StoreError> {
            unreachable!("not called")
        }
    }

    #[test]
    fn ids_are_1_to_256_bytes_under_the_callers_prefix() {
        let deliveries = Deliveries::new(Nothing, "hook:");
        let deliveries = deliveries.unwrap_or_else(|e| panic!("{e}"));
        let longest = "x".repeat(MAX_PART_LEN);
        assert_eq!(
            deliveries.key(&longest).ok(),
            Some(format!("hook:{longest}"))
        );
        let over = "x".repeat(MAX_PART_LEN + 1);
        assert!(matches!(
            deliveries.key(&over),
            Err(Error::InvalidDeliveryId)
        ));
        assert!(matches!(deliveries.key(""), Err(Error::InvalidDeliveryId)));
    }

    #[test]
    fn a_prefix_is_never_empty_long_or_a_counters() {
        for prefix in [
            "",
            "limit:",
            "limit:x",
            "limit",
            "lim",
            "l",
            &"p".repeat(65),
        ] {
            let made = Deliveries::new(Nothing, prefix);
            assert!(
                matches!(made, Err(Error::InvalidPrefix(_))),
                "{prefix:?} accepted"
            );
        }
        assert!(Deliveries::new(Nothing, &"p".repeat(64)).is_ok());
        assert!(Deliveries::new(Nothing, "limits:").is_ok());
        assert!(Deliveries::new(Nothing, "limitless:").is_ok());
        assert!(Deliveries::new(Nothing, "hook:").is_ok());
    }

    #[test]
    fn tokens_are_32_hex_digits_and_differ() {
        let (a, b) = (token(), token());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert_ne!(a, crate::MARK_DONE);
    }
}
