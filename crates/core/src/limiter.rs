//! [`Limiter`]: counts limits in a store under a failure policy.

use std::fmt;
use std::sync::Arc;

use crate::{
    Clock, Counter, CounterStore, Error, Limit, Retry, RetryPolicy, StoreError, SystemClock, Usage,
    Verdict,
};

/// What a check does when the store fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Log a warning, allow the call and mark the verdict degraded: for
    /// signed-in actions that other controls already bound.
    FailOpen,
    /// Refuse with [`Error::Unavailable`] (HTTP 503): for anonymous, expensive
    /// routes that nothing else would keep in check.
    FailClosed,
}

/// How a check spends budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Always increment every counter; over when any goes past its max.
    Count,
    /// Increment every counter only if all stay within their max; a refused
    /// call spends nothing, so it cannot drain a shared budget.
    Reserve,
}

/// Checks limits against a [`CounterStore`]. Cheap to clone; clones share the
/// store and clock.
///
/// ```
/// # async fn demo(store: impl tollgate_core::CounterStore) -> Result<(), tollgate_core::Error> {
/// use tollgate_core::{Limiter, RuleSet};
/// let rules = RuleSet::defaults();
/// let limiter = Limiter::new(store);
/// let ask = rules.get("ask")?.limit(&["docs", "203.0.113.9"])?;
/// let all = rules.get("ask-all")?.limit::<&str>(&[])?;
/// match limiter.reserve(&[ask, all]).await?.into_result() {
///     Ok(_) => { /* do the work */ }
///     Err(limited) => println!("retry in {} s", limited.retry_after()),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Limiter {
    store: Arc<dyn CounterStore>,
    clock: Arc<dyn Clock>,
}

impl Limiter {
    /// A limiter over `store`, bounded by the default [`RetryPolicy`], on the system clock.
    ///
    /// The retry bounds use tokio's timer: check from a tokio runtime with
    /// the time driver enabled (`enable_time` or `enable_all`, as
    /// `#[tokio::main]` does), or a check panics in tokio.
    pub fn new(store: impl CounterStore) -> Limiter {
        Limiter::with_parts(Retry::new(store, RetryPolicy::default()), SystemClock)
    }

    /// A limiter over `store` used as it is (no retry wrapper added) and `clock`.
    pub fn with_parts(store: impl CounterStore, clock: impl Clock) -> Limiter {
        Limiter {
            store: Arc::new(store),
            clock: Arc::new(clock),
        }
    }

    /// The store this limiter counts in (with its retry wrapper, if any).
    pub fn store(&self) -> &Arc<dyn CounterStore> {
        &self.store
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Counts every limit ([`Mode::Count`]), fail-closed.
    pub async fn count(&self, limits: &[Limit]) -> Result<Verdict, Error> {
        self.check(limits, Mode::Count, Policy::FailClosed).await
    }

    /// Reserves one call on every limit or none ([`Mode::Reserve`]), fail-closed.
    pub async fn reserve(&self, limits: &[Limit]) -> Result<Verdict, Error> {
        self.check(limits, Mode::Reserve, Policy::FailClosed).await
    }

    /// Counts every limit ([`Mode::Count`]), fail-open: a store failure is
    /// logged and the call allowed, with a degraded verdict.
    pub async fn within(&self, limits: &[Limit]) -> Verdict {
        match self.check(limits, Mode::Count, Policy::FailOpen).await {
            Ok(verdict) => verdict,
            // Fail-open turns every store failure into a verdict; only a
            // caller error (duplicate keys) is left, and it is logged by check.
            Err(_) => Verdict::degraded(),
        }
    }

    /// Checks `limits` in one store call, spending as `mode` says and
    /// handling a store failure as `policy` says.
    ///
    /// # Errors
    ///
    /// [`Error::DuplicateKey`] when two limits share a key; under
    /// [`Policy::FailClosed`], [`Error::Unavailable`] when the store fails.
    pub async fn check(
        &self,
        limits: &[Limit],
        mode: Mode,
        policy: Policy,
    ) -> Result<Verdict, Error> {
        check_distinct(limits)?;
        if limits.is_empty() {
            return Ok(Verdict::new(Vec::new()));
        }
        let now = self.clock.now().as_secs();
        let counters: Vec<Counter> = limits.iter().map(|l| counter(l, now)).collect();
        let reply = match mode {
            Mode::Count => self
                .store
                .increment(&counters)
                .await
                .map(|counts| (true, counts)),
            Mode::Reserve => self
                .store
                .increment_within(&counters)
                .await
                .map(|r| (r.applied, r.counts)),
        };
        match reply.and_then(|(applied, counts)| usage(limits, mode, applied, counts, now)) {
            Ok(usage) => Ok(Verdict::new(usage)),
            Err(err) => self.on_failure(limits, policy, err),
        }
    }

    /// Where each limit stands now, without spending anything. A usage is
    /// over when a call now would be refused. Fail-closed.
    pub async fn remaining(&self, limits: &[Limit]) -> Result<Vec<Usage>, Error> {
        let now = self.clock.now().as_secs();
        let keys: Vec<String> = limits
            .iter()
            .map(|l| l.counter_key(l.rule().window().index(now)))
            .collect();
        let counts = self.store.get(&keys).await;
        let counts = counts
            .and_then(|c| same_len(limits, c))
            .map_err(Error::Unavailable)?;
        Ok(limits
            .iter()
            .zip(counts)
            .map(|(limit, count)| Usage::new(limit, count, now, count >= limit.rule().max()))
            .collect())
    }

    /// Clears one limit's counter for the current window (an operator action);
    /// whether there was one. Fail-closed.
    pub async fn reset(&self, limit: &Limit) -> Result<bool, Error> {
        let now = self.clock.now().as_secs();
        let key = limit.counter_key(limit.rule().window().index(now));
        self.store.delete(&key).await.map_err(Error::Unavailable)
    }

    fn on_failure(
        &self,
        limits: &[Limit],
        policy: Policy,
        err: StoreError,
    ) -> Result<Verdict, Error> {
        match policy {
            Policy::FailOpen => {
                tracing::warn!(
                    limits = %Names(limits),
                    kind = err.kind(),
                    error = %err,
                    "rate limit store failed; allowing the call (fail-open)"
                );
                Ok(Verdict::degraded())
            }
            Policy::FailClosed => {
                tracing::error!(
                    limits = %Names(limits),
                    kind = err.kind(),
                    error = %err,
                    "rate limit store failed; refusing the call (fail-closed)"
                );
                Err(Error::Unavailable(err))
            }
        }
    }
}

fn counter(limit: &Limit, now_secs: u64) -> Counter {
    let window = limit.rule().window();
    Counter {
        key: limit.counter_key(window.index(now_secs)),
        ttl: window.duration(),
        max: limit.rule().max(),
    }
}

/// Reads a store's reply to a check, refusing replies that cannot be right.
fn usage(
    limits: &[Limit],
    mode: Mode,
    applied: bool,
    counts: Vec<u64>,
    now: u64,
) -> Result<Vec<Usage>, StoreError> {
    let counts = same_len(limits, counts)?;
    if applied && counts.contains(&0) {
        return Err(StoreError::InvalidReply(
            "an incremented counter reads 0".into(),
        ));
    }
    let usage: Vec<Usage> = limits
        .iter()
        .zip(counts)
        .map(|(limit, count)| {
            let over = match mode {
                Mode::Count => count > limit.rule().max(),
                Mode::Reserve => !applied && count >= limit.rule().max(),
            };
            Usage::new(limit, count, now, over)
        })
        .collect();
    if !applied && !usage.iter().any(Usage::is_over) {
        return Err(StoreError::InvalidReply(
            "a reservation was refused with every counter below its max".into(),
        ));
    }
    Ok(usage)
}

fn check_distinct(limits: &[Limit]) -> Result<(), Error> {
    for (i, a) in limits.iter().enumerate() {
        if limits[i + 1..].iter().any(|b| a.key() == b.key()) {
            tracing::warn!(
                rule = a.rule().name(),
                "two limits of one check share a key"
            );
            return Err(Error::DuplicateKey(a.rule().name().to_owned()));
        }
    }
    Ok(())
}

fn same_len(limits: &[Limit], counts: Vec<u64>) -> Result<Vec<u64>, StoreError> {
    if counts.len() == limits.len() {
        Ok(counts)
    } else {
        Err(StoreError::InvalidReply(format!(
            "{} counts for {} counters",
            counts.len(),
            limits.len()
        )))
    }
}

/// The rule names of a check, comma-separated, for logs.
struct Names<'a>(&'a [Limit]);

impl fmt::Display for Names<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, limit) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(limit.rule().name())?;
        }
        Ok(())
    }
}
