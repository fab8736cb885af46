//! [`Limiter`]: counts limits in a store under a failure policy.

use std::fmt;
use std::sync::Arc;

use crate::cache::LocalCache;
use crate::key::KEY_PREFIX;
use crate::observe::{self, Op, Outcome, StoreCalls};
use crate::store::MAX_COUNT;
use crate::throttle::{Chain, Throttle};
use crate::{
    Clock, Counter, CounterStore, Deliveries, Error, Limit, Reservation, RetryPolicy, StoreError,
    SystemClock, Usage, Verdict, key, reply,
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
/// store, the clock and the retry policy.
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
    retry: RetryPolicy,
    logs: Arc<Throttle>,
    cache: Option<Arc<LocalCache>>,
    calls: Arc<StoreCalls>,
}

impl Limiter {
    /// A limiter over `store`, bounded by the default [`RetryPolicy`], on the system clock.
    ///
    /// The retry bounds use tokio's timer: check from a tokio runtime with
    /// the time driver enabled (`enable_time` or `enable_all`, as
    /// `#[tokio::main]` does), or a check panics in tokio.
    pub fn new(store: impl CounterStore) -> Limiter {
        Limiter::with_parts(store, SystemClock)
    }

    /// A limiter over `store` and `clock`, bounded by the default [`RetryPolicy`].
    pub fn with_parts(store: impl CounterStore, clock: impl Clock) -> Limiter {
        let calls = Arc::new(StoreCalls::new(store.name()));
        Limiter {
            calls,
            store: store.into_shared(),
            clock: Arc::new(clock),
            retry: RetryPolicy::default(),
            logs: Arc::default(),
            cache: Some(Arc::new(LocalCache::new(Limiter::DEFAULT_CACHE_CAPACITY))),
        }
    }

    /// How many full counters a limiter remembers by default: 10,000.
    pub const DEFAULT_CACHE_CAPACITY: usize = 10_000;

    /// The same limiter remembering at most `capacity` full counters (0:
    /// none, every check goes to the store). Under attack, reservations
    /// that cannot fit a counter already seen full are then refused without
    /// a store round trip (they would spend nothing anyway); a cached answer
    /// never admits a call the store would refuse (see
    /// [`Verdict::is_local`]). Counting ([`Mode::Count`]) always reaches the
    /// store: a counted call is counted even when over.
    pub fn with_cache_capacity(mut self, capacity: usize) -> Limiter {
        self.cache = (capacity > 0).then(|| Arc::new(LocalCache::new(capacity)));
        self
    }

    /// The same limiter bounded by `retry` instead: the one time budget of
    /// every store call it makes.
    pub fn with_retry(mut self, retry: RetryPolicy) -> Limiter {
        self.retry = retry;
        self
    }

    /// The store this limiter counts in.
    pub fn store(&self) -> &Arc<dyn CounterStore> {
        &self.store
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The metrics of this limiter's store calls.
    pub(crate) fn calls(&self) -> &StoreCalls {
        &self.calls
    }

    /// The retry policy bounding every store call.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.retry
    }

    /// Counts every limit ([`Mode::Count`]), fail-closed.
    pub async fn count(&self, limits: &[Limit]) -> Result<Verdict, Error> {
        self.check(limits, Mode::Count, Policy::FailClosed).await
    }

    /// Reserves every limit's cost or none ([`Mode::Reserve`]), fail-closed.
    pub async fn reserve(&self, limits: &[Limit]) -> Result<Verdict, Error> {
        self.check(limits, Mode::Reserve, Policy::FailClosed).await
    }

    /// Counts every limit ([`Mode::Count`]), fail-open: a store failure is
    /// logged and the call allowed, with a degraded verdict.
    ///
    /// Two limits of one key (a caller error that [`check`](Limiter::check)
    /// refuses) are counted as one limit of their summed cost here, so that
    /// such a call is still counted, never let through for free.
    pub async fn within(&self, limits: &[Limit]) -> Verdict {
        let merged;
        let limits = if check_distinct(limits).is_err() {
            merged = merge_duplicates(limits);
            &merged[..]
        } else {
            limits
        };
        match self.check(limits, Mode::Count, Policy::FailOpen).await {
            Ok(verdict) => verdict,
            // Fail-open turns every store failure into a verdict, and the
            // limits are distinct here: no other error is left.
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
            return Ok(Verdict::new(Arc::default(), true));
        }
        let now = self.clock.now().as_secs();
        let mut counters: Vec<Counter> = limits.iter().map(|l| l.counter(now)).collect();
        let cache = self.cache.as_deref().filter(|_| mode == Mode::Reserve);
        if let Some(seen) = cache.and_then(|cache| cache.refusal(&counters, now)) {
            let reply = Reservation {
                applied: false,
                counts: seen,
            };
            match reply::usage(limits, counters, Mode::Reserve, reply, now) {
                Ok(usage) => {
                    let verdict = Verdict::local(usage);
                    self.report(&verdict, true);
                    return Ok(verdict);
                }
                // The cache holds only counts the store gave and answers
                // only when one cannot fit; should that ever not read as a
                // refusal, the store answers instead.
                Err(_) => counters = limits.iter().map(|l| l.counter(now)).collect(),
            }
        }
        let epoch = cache.map_or(0, LocalCache::epoch);
        let reply = match mode {
            Mode::Count => self
                .retry
                .run(&self.calls, Op::Count, true, |deadline| {
                    (*self.store).count(&counters, deadline)
                })
                .await
                .map(|counts| Reservation {
                    applied: true,
                    counts,
                }),
            Mode::Reserve => {
                self.retry
                    .run(&self.calls, Op::Reserve, true, |deadline| {
                        (*self.store).reserve(&counters, deadline)
                    })
                    .await
            }
        };
        let applied = reply.as_ref().is_ok_and(|r| r.applied);
        match reply.and_then(|reply| reply::usage(limits, counters, mode, reply, now)) {
            Ok(usage) => {
                let verdict = Verdict::new(usage, applied);
                if let Some(cache) = cache {
                    cache.note(epoch, verdict.usage(), !verdict.is_allowed());
                }
                self.report(&verdict, false);
                Ok(verdict)
            }
            Err(err) => {
                let outcome = match policy {
                    Policy::FailOpen => Outcome::Degraded,
                    Policy::FailClosed => Outcome::Unavailable,
                };
                observe::failed(limits, outcome);
                self.on_failure(&Names(limits).to_string(), policy, err)
            }
        }
    }

    /// Metrics of a check, and a warning (rate-limited) for each shadow rule
    /// that would have refused it.
    fn report(&self, verdict: &Verdict, local: bool) {
        if !observe::check(verdict, local) {
            return;
        }
        for usage in verdict.shadow_limited() {
            let key = format!("shadow:{}", usage.name());
            if let Some(suppressed) = self.logs.admit(&key) {
                tracing::warn!(
                    rule = usage.name(),
                    remaining = usage.remaining(),
                    suppressed,
                    "shadow rule would have refused the call"
                );
            }
        }
    }

    /// Where each limit stands now, without spending anything. A usage is
    /// over when a call of the limit's cost now would be refused. Fail-closed.
    pub async fn remaining(&self, limits: &[Limit]) -> Result<Vec<Usage>, Error> {
        let now = self.clock.now().as_secs();
        let keys: Vec<String> = limits
            .iter()
            .map(|l| l.counter_key(l.rule().window().index(now)))
            .collect();
        let counts = self
            .retry
            .run(&self.calls, Op::Get, true, |deadline| {
                (*self.store).get(&keys, deadline)
            })
            .await;
        let counts = counts
            .and_then(|c| reply::same_len(limits.len(), c))
            .map_err(Error::Unavailable)?;
        Ok(limits
            .iter()
            .zip(keys)
            .zip(counts)
            .map(|((limit, key), count)| {
                // Against the rule's own max: a shadow rule's counter has a higher one.
                let past_max = count.saturating_add(limit.cost()) > limit.rule().max();
                Usage::new(limit, key, count, now, past_max)
            })
            .collect())
    }

    /// Clears one limit's counter for the current window (an operator action);
    /// whether there was one. Fail-closed.
    pub async fn reset(&self, limit: &Limit) -> Result<bool, Error> {
        let now = self.clock.now().as_secs();
        let key = limit.counter_key(limit.rule().window().index(now));
        if let Some(cache) = &self.cache {
            cache.forget([key.as_str()]);
        }
        let deleted = self
            .retry
            .run(&self.calls, Op::Delete, true, |deadline| {
                (*self.store).delete(&key, deadline)
            })
            .await
            .map_err(Error::Unavailable);
        if let Some(cache) = &self.cache {
            cache.forget([key.as_str()]);
        }
        deleted
    }

    /// Gives back up to `units` of what `spent` spent on each limit of rule
    /// `rule`, in one store call: never more than the check's cost on that
    /// limit, never below zero, and nothing on a limit whose window has
    /// rolled over since (the new window's counter is not touched). A
    /// verdict that spent nothing (a refused reservation, a degraded check)
    /// gives nothing back, and a verdict (with its clones) never gives back
    /// more than it spent, however often it is refunded or settled.
    ///
    /// A refund is tried once, never retried: a retry whose first attempt
    /// was applied would give back twice. Fail-closed.
    ///
    /// # Errors
    ///
    /// [`Error::NotSpent`] when a spending verdict holds no limit of `rule`;
    /// [`Error::Unavailable`] when the store fails.
    pub async fn refund(&self, spent: &Verdict, rule: &str, units: u64) -> Result<(), Error> {
        self.settle_with(spent, rule, |i, cost| (spent.give_back(i, units, cost), 0))
            .await
    }

    /// Settles an estimate with the actual cost: of the limits of rule
    /// `rule` that `spent` reserved or counted, refunds the difference when
    /// the call used less (as [`refund`](Limiter::refund)), and counts the
    /// excess on the current window when it used more (which may take the
    /// counter past its max: the call already happened). A settle that is
    /// never called keeps the estimate spent, the safe direction.
    /// Fail-closed.
    ///
    /// ```
    /// # async fn demo(limiter: tollgate_core::Limiter, rules: tollgate_core::RuleSet) -> Result<(), tollgate_core::Error> {
    /// let estimate = 1_500;
    /// let tokens = rules.get("ask-tokens")?.limit(&["docs"])?.with_cost(estimate)?;
    /// let verdict = limiter.reserve(&[tokens]).await?;
    /// if verdict.is_allowed() {
    ///     let used = 1_100; // what the provider call reported
    ///     limiter.settle(&verdict, "ask-tokens", used).await?; // 400 tokens back
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`refund`](Limiter::refund).
    pub async fn settle(&self, spent: &Verdict, rule: &str, actual: u64) -> Result<(), Error> {
        self.settle_with(spent, rule, |i, cost| {
            spent.settle_up_to(i, cost.saturating_sub(actual), actual.saturating_sub(cost))
        })
        .await
    }

    /// Refunds and counts, per usage `i` of `rule`, the `(refund, excess)`
    /// that `split` gives for its cost: `split` keeps the verdict's
    /// account, so that across calls (and clones) a limit never gets back
    /// more than it spent, nor an excess counted twice.
    async fn settle_with(
        &self,
        spent: &Verdict,
        rule: &str,
        split: impl Fn(usize, u64) -> (u64, u64),
    ) -> Result<(), Error> {
        if !spent.has_spent() {
            return Ok(());
        }
        let usages: Vec<(usize, &Usage)> = spent
            .usage()
            .iter()
            .enumerate()
            .filter(|(_, u)| u.name() == rule)
            .collect();
        if usages.is_empty() {
            return Err(Error::NotSpent(rule.to_owned()));
        }
        let now = self.clock.now().as_secs();
        let mut refunds = Vec::new();
        let mut excess = Vec::new();
        for (i, usage) in usages {
            let window = usage.window();
            let (back, more) = split(i, usage.cost());
            let counter = |key: String, cost: u64| Counter {
                key,
                ttl: window.duration(),
                cost: cost.min(MAX_COUNT),
                max: usage.max(),
            };
            let current = window.index(now);
            if back > 0 && usage.index() == current {
                refunds.push(counter(usage.counter_key().to_owned(), back));
            }
            if more > 0 {
                excess.push(counter(key::counter_key(usage.stored(), current), more));
            }
        }
        if !refunds.is_empty() {
            if let Some(cache) = &self.cache {
                cache.forget(refunds.iter().map(|c| c.key.as_str()));
            }
            let done = self
                .retry
                .run(&self.calls, Op::Refund, false, |deadline| {
                    (*self.store).refund(&refunds, deadline)
                })
                .await
                .and_then(|counts| reply::same_len(refunds.len(), counts));
            if let Some(cache) = &self.cache {
                cache.forget(refunds.iter().map(|c| c.key.as_str()));
            }
            if let Err(err) = done {
                return Err(self.unavailable(rule, err));
            }
        }
        if !excess.is_empty() {
            let done = self
                .retry
                .run(&self.calls, Op::Count, true, |deadline| {
                    (*self.store).count(&excess, deadline)
                })
                .await
                .and_then(|counts| reply::same_len(excess.len(), counts));
            if let Err(err) = done {
                return Err(self.unavailable(rule, err));
            }
        }
        Ok(())
    }

    /// Webhook de-duplication sharing this limiter's store and retry policy.
    pub fn deliveries(&self) -> Deliveries {
        Deliveries::new(self.clone())
    }

    /// Applies `policy` to a store failure, logging it.
    fn on_failure(&self, names: &str, policy: Policy, err: StoreError) -> Result<Verdict, Error> {
        self.log_failure(names, policy, &err);
        match policy {
            Policy::FailOpen => Ok(Verdict::degraded()),
            Policy::FailClosed => Err(Error::Unavailable(err)),
        }
    }

    /// A fail-closed store failure, logged.
    pub(crate) fn unavailable(&self, names: &str, err: StoreError) -> Error {
        self.log_failure(names, Policy::FailClosed, &err);
        Error::Unavailable(err)
    }

    /// Logs a store failure: at most one line per policy and rule list per
    /// second, with the cause chain and how many lines were suppressed.
    fn log_failure(&self, names: &str, policy: Policy, err: &StoreError) {
        let key = match policy {
            Policy::FailOpen => format!("open:{names}"),
            Policy::FailClosed => format!("closed:{names}"),
        };
        let Some(suppressed) = self.logs.admit(&key) else {
            return;
        };
        let error = Chain(err);
        match policy {
            Policy::FailOpen => tracing::warn!(
                limits = names,
                kind = err.kind(),
                %error,
                suppressed,
                "rate limit store failed; allowing the call (fail-open)"
            ),
            Policy::FailClosed => tracing::error!(
                limits = names,
                kind = err.kind(),
                %error,
                suppressed,
                "rate limit store failed; refusing the call (fail-closed)"
            ),
        }
    }
}

/// The limits with each key once, its cost the sum of the costs given for it.
fn merge_duplicates(limits: &[Limit]) -> Vec<Limit> {
    let mut merged: Vec<Limit> = Vec::with_capacity(limits.len());
    for limit in limits {
        match merged
            .iter_mut()
            .find(|m| same_key(m.stored(), limit.stored()))
        {
            Some(first) => {
                let cost = first.cost().saturating_add(limit.cost()).min(MAX_COUNT);
                if let Ok(summed) = first.clone().with_cost(cost) {
                    *first = summed;
                }
            }
            None => merged.push(limit.clone()),
        }
    }
    merged
}

fn check_distinct(limits: &[Limit]) -> Result<(), Error> {
    for (i, a) in limits.iter().enumerate() {
        if limits[i + 1..]
            .iter()
            .any(|b| same_key(a.stored(), b.stored()))
        {
            // Not logged here: the caller gets the typed error, and keys may
            // come from requests (a log line per call would be theirs to write).
            return Err(Error::DuplicateKey(a.rule().name().to_owned()));
        }
    }
    Ok(())
}

/// Whether two stored keys are the same. The keys of one check mostly
/// differ in length, in the rule name that follows the prefix, or in the
/// end of the last part: those are compared as two words before the whole.
fn same_key(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len()
        && a.get(KEY_PREFIX.len()..).and_then(<[u8]>::first_chunk::<8>)
            == b.get(KEY_PREFIX.len()..).and_then(<[u8]>::first_chunk::<8>)
        && a.last_chunk::<8>() == b.last_chunk::<8>()
        && a == b
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

#[cfg(test)]
mod tests {
    use super::same_key;

    #[test]
    fn keys_are_the_same_only_when_every_byte_is() {
        for key in [
            "limit:ask-tokens:docs:203.0.113.9:",
            "limit:a:",
            "limit:ab:c:",
        ] {
            assert!(same_key(key, key), "{key}");
            assert!(!same_key(key, &key[..key.len() - 1]), "{key}");
            for at in 0..key.len() {
                let mut other = key.to_owned().into_bytes();
                other[at] = b'#';
                let other = String::from_utf8(other).unwrap_or_default();
                assert!(!same_key(key, &other), "{key} / {other}");
            }
        }
    }
}
