//! [`Lease`]: a call in flight, held under a
//! [concurrency](crate::Algorithm::Concurrency) limit until it is released,
//! dropped, or (its holder gone) it expires.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::observe::{self, LeaseEvent, Op};
use crate::{CheckId, Error, Limiter, Rule};

/// One lease a check took: a slot of a concurrency limit's key, held until
/// [`release`](Lease::release), or until every clone of it (and of the
/// verdict that holds it) is dropped, which releases it in the background;
/// a holder that crashes loses it at its expiry, the rule's lease lifetime
/// after it was taken or last [renewed](Lease::renew).
///
/// Cheap to clone: clones are the same lease.
#[derive(Clone)]
pub struct Lease(Arc<Held>);

struct Held {
    limiter: Limiter,
    rule: Rule,
    key: String,
    id: CheckId,
    released: AtomicBool,
}

impl Lease {
    pub(crate) fn new(limiter: Limiter, rule: Rule, key: String, id: CheckId) -> Lease {
        Lease(Arc::new(Held {
            limiter,
            rule,
            key,
            id,
            released: AtomicBool::new(false),
        }))
    }

    /// The concurrency rule this lease is held under.
    pub fn rule(&self) -> &Rule {
        &self.0.rule
    }

    /// The lease's id: the id of the check that took it (128 bits).
    pub fn id(&self) -> CheckId {
        self.0.id
    }

    /// How long the lease lasts from when it was taken or last renewed.
    pub fn lifetime(&self) -> Duration {
        self.0.rule.window().duration()
    }

    /// Whether this handle released the lease already.
    pub fn is_released(&self) -> bool {
        self.0.released.load(Ordering::Acquire)
    }

    /// Extends the lease to its lifetime from now (a heartbeat for long
    /// work); whether it was still held. A lease that expired or was
    /// released is not taken again: `false`.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when the store fails (within the limiter's
    /// retry policy).
    pub async fn renew(&self) -> Result<bool, Error> {
        if self.is_released() {
            return Ok(false);
        }
        let held = &*self.0;
        let lifetime = self.lifetime();
        let renewed = held
            .limiter
            .attempts()
            .run(Op::RenewLease, |deadline| {
                held.limiter
                    .store()
                    .renew_lease(&held.key, held.id, lifetime, deadline)
            })
            .await
            .map_err(Error::Unavailable)?;
        if renewed {
            observe::lease(&held.rule, LeaseEvent::Renewed, 1);
        }
        Ok(renewed)
    }

    /// Ends the lease; whether it was still held. Idempotent: a second
    /// release, or one after the lease expired, changes nothing.
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when the store fails (the lease then ends at
    /// its expiry; a later release may still end it sooner).
    pub async fn release(&self) -> Result<bool, Error> {
        if self.0.released.load(Ordering::Acquire) {
            return Ok(false);
        }
        let ended = self.0.end().await?;
        self.0.released.store(true, Ordering::Release);
        Ok(ended)
    }
}

impl Held {
    /// Ends the lease in the store.
    async fn end(&self) -> Result<bool, Error> {
        let ended = self
            .limiter
            .attempts()
            .run(Op::EndLease, |deadline| {
                self.limiter.store().end_lease(&self.key, self.id, deadline)
            })
            .await
            .map_err(Error::Unavailable)?;
        if ended {
            observe::lease(&self.rule, LeaseEvent::Released, 1);
        }
        Ok(ended)
    }
}

impl Drop for Held {
    /// Releases the lease in the background, on the tokio runtime the drop
    /// happens in (none: it ends at its expiry).
    fn drop(&mut self) {
        if self.released.load(Ordering::Acquire) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(
                rule = self.rule.name(),
                "a lease dropped outside a tokio runtime is not released; it ends at its expiry"
            );
            return;
        };
        let held = Held {
            limiter: self.limiter.clone(),
            rule: self.rule.clone(),
            key: std::mem::take(&mut self.key),
            id: self.id,
            released: AtomicBool::new(true),
        };
        runtime.spawn(async move {
            if let Err(err) = held.end().await {
                tracing::warn!(
                    rule = held.rule.name(),
                    error = %err,
                    "a dropped lease was not released; it ends at its expiry"
                );
            }
        });
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("rule", &self.0.rule.name())
            .field("id", &self.0.id)
            .field("released", &self.is_released())
            .finish()
    }
}

impl PartialEq for Lease {
    fn eq(&self, other: &Lease) -> bool {
        self.0.id == other.0.id && self.0.key == other.0.key
    }
}

impl Eq for Lease {}
