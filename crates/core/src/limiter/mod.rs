//! [`Limiter`]: counts limits in a store under a failure policy.

mod builder;
mod distinct;
mod leased;
mod previous;
mod settle;

use std::sync::Arc;

use crate::cache::LocalCache;
use crate::failure::{Failures, Names};
use crate::observe::{self, Op, Outcome};
use crate::retry::Attempts;
use crate::throttle::Throttle;
use crate::{
    Algorithm, CheckId, Clock, Counter, CounterStore, Error, Limit, Reservation, RetryPolicy,
    StoreError, Usage, Verdict, reply,
};
use previous::{Plan, Previous};

pub use builder::LimiterBuilder;

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
    ///
    /// Except with a GCRA limit (not a shadow one): a GCRA bucket never
    /// charges a call it refuses (each charge would push its arrival time
    /// on, and a caller calling faster than the rate would never be let in
    /// again), so a count with one is made as a reservation: a call that
    /// any limit refuses spends nothing.
    Count,
    /// Increment every counter only if all stay within their max; a refused
    /// call spends nothing, so it cannot drain a shared budget.
    Reserve,
}

/// Checks limits against a [`CounterStore`]. Cheap to clone; clones share the
/// store, the clock, the retry policy and the cache. Built with
/// [`Limiter::new`] or, to set its clock, retry policy or cache,
/// [`Limiter::builder`].
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
    /// Warnings about shadow rules, at most one per rule per second.
    shadows: Arc<Throttle>,
    failures: Arc<Failures>,
    /// The previous window's counts of sliding limits, once final.
    previous: Arc<Previous>,
    cache: Option<Arc<LocalCache>>,
    attempts: Arc<Attempts>,
}

impl Limiter {
    /// A limiter over `store`, bounded by the default [`RetryPolicy`], on
    /// the system clock, with a cache of
    /// [`DEFAULT_CACHE_CAPACITY`](Limiter::DEFAULT_CACHE_CAPACITY) full
    /// counters: `Limiter::builder(store).build()`.
    ///
    /// The retry bounds use tokio's timer: check from a tokio runtime with
    /// the time driver enabled (`enable_time` or `enable_all`, as
    /// `#[tokio::main]` does), or a check panics in tokio.
    pub fn new(store: impl CounterStore) -> Limiter {
        Limiter::builder(store).build()
    }

    /// A builder of a limiter over `store`, to set its clock, retry policy
    /// or cache.
    pub fn builder(store: impl CounterStore) -> LimiterBuilder {
        LimiterBuilder::new(store)
    }

    /// How many full counters a limiter remembers by default: 10,000.
    pub const DEFAULT_CACHE_CAPACITY: usize = 10_000;

    /// The store this limiter counts in.
    pub fn store(&self) -> &Arc<dyn CounterStore> {
        &self.store
    }

    /// The clock this limiter reads.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The bounds of every store call (for a [`Lease`](crate::Lease)'s calls).
    pub(crate) fn attempts(&self) -> &Attempts {
        &self.attempts
    }

    /// The retry policy bounding every store call.
    pub fn retry_policy(&self) -> RetryPolicy {
        self.attempts.policy()
    }

    /// Counts every limit ([`Mode::Count`]), fail-closed.
    pub async fn count(&self, limits: &[Limit]) -> Result<Verdict, Error> {
        self.run(limits, Mode::Count, Policy::FailClosed, false)
            .await
    }

    /// Reserves every limit's cost or none ([`Mode::Reserve`]), fail-closed.
    pub async fn reserve(&self, limits: &[Limit]) -> Result<Verdict, Error> {
        self.run(limits, Mode::Reserve, Policy::FailClosed, false)
            .await
    }

    /// Counts every limit ([`Mode::Count`]), fail-open: a store failure is
    /// logged and the call allowed, with a degraded verdict.
    ///
    /// Two limits of one key (a caller error that [`check`](Limiter::check)
    /// refuses) are counted as one limit of their summed cost here, so that
    /// such a call is still counted, never let through for free.
    pub async fn within(&self, limits: &[Limit]) -> Verdict {
        let merged;
        let limits = if distinct::check(limits).is_err() {
            merged = distinct::merge(limits);
            &merged[..]
        } else {
            limits
        };
        match self.run(limits, Mode::Count, Policy::FailOpen, true).await {
            Ok(verdict) => verdict,
            // Fail-open turns every store failure into a verdict: no other
            // error is left.
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
        self.run(limits, mode, policy, false).await
    }

    /// [`check`](Limiter::check), the duplicate-key check skipped when the
    /// caller made sure of it already (`known_distinct`).
    async fn run(
        &self,
        limits: &[Limit],
        mode: Mode,
        policy: Policy,
        known_distinct: bool,
    ) -> Result<Verdict, Error> {
        if !known_distinct {
            distinct::check(limits)?;
        }
        if limits.is_empty() {
            return Ok(Verdict::new(Arc::default(), true));
        }
        let at = self.clock.now();
        let now = at.as_secs();
        // The cache answers reservations only (a count is counted anyway),
        // and notes what every check saw, so it never answers with a count
        // older than one this limiter has seen since.
        let cache = self.cache.as_deref();
        let answers = cache.filter(|_| mode == Mode::Reserve);
        // Before any counter key is built: a refused check builds none.
        if let Some(seen) = answers.and_then(|cache| cache.refusal(limits, at)) {
            let verdict = Verdict::local(reply::refused_locally(limits, seen, now));
            // The cache holds only counts the store gave and answers only
            // when one cannot fit; should that ever not read as a refusal,
            // the store answers instead.
            if !verdict.is_allowed() {
                self.report(&verdict, true);
                return Ok(verdict);
            }
        }
        // A GCRA bucket never charges a refused call ([`Mode::Count`]).
        let mode = match mode {
            Mode::Count if limits.iter().any(charges_only_what_fits) => Mode::Reserve,
            mode => mode,
        };
        let plan = Plan::new(&self.previous, limits, now);
        let counters = plan.counters(limits, at);
        let epoch = cache.map_or(0, LocalCache::epoch);
        let id = CheckId::new();
        let op = match mode {
            Mode::Count => Op::Count,
            Mode::Reserve => Op::Reserve,
        };
        let reply = self
            .attempts
            .run(op, |deadline| self.attempt(&counters, mode, id, deadline))
            .await;
        let applied = reply.as_ref().is_ok_and(|r| r.applied);
        let leases: Vec<(String, bool)> = counters
            .iter()
            .filter(|c| c.lease)
            .map(|c| (c.key.clone(), applied))
            .collect();
        let usage = reply.and_then(|reply| {
            let (reply, tail) = reply::tail(&counters, reply)?;
            let mut previous = plan.previous(&tail.priors);
            plan.keep(&self.previous, limits, &previous, at);
            leased::waits(&counters, &tail, &mut previous);
            let usage = reply::usage(limits, counters, mode, reply, &previous, at)?;
            Ok((usage, tail))
        });
        match usage {
            Ok((usage, tail)) => {
                let verdict = Verdict::new(usage, applied);
                let held = leased::handles(self, verdict.usage(), leases, id, &tail);
                let verdict = verdict.with_leases(held);
                if let Some(cache) = cache {
                    cache.note(epoch, verdict.usage(), !verdict.is_allowed(), at);
                }
                self.report(&verdict, false);
                Ok(verdict)
            }
            Err(err) => {
                // The store may have taken the leases before its answer was
                // lost: nobody holds a handle to them, so end them now.
                leased::end_unheld(self, leases, id);
                self.failed(limits, policy, err)
            }
        }
    }

    /// A check of `limits` whose store failed with `err`, as `policy` says.
    fn failed(&self, limits: &[Limit], policy: Policy, err: StoreError) -> Result<Verdict, Error> {
        let outcome = match policy {
            Policy::FailOpen => Outcome::Degraded,
            Policy::FailClosed => Outcome::Unavailable,
        };
        if matches!(err, StoreError::Open) {
            self.attempts.breaker().skipped(policy == Policy::FailOpen);
        }
        observe::failed(limits, outcome);
        self.failures.apply(&Names(limits).to_string(), policy, err)
    }

    /// One attempt of a check: the count or reservation of `counters`
    /// under the attempt's deadline.
    async fn attempt(
        &self,
        counters: &[Counter],
        mode: Mode,
        id: CheckId,
        deadline: crate::Deadline,
    ) -> Result<Reservation, StoreError> {
        match mode {
            Mode::Count => Ok(Reservation {
                applied: true,
                counts: (*self.store).count(counters, id, deadline).await?,
            }),
            Mode::Reserve => (*self.store).reserve(counters, id, deadline).await,
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
            if let Some(suppressed) = self.shadows.admit(&key) {
                tracing::warn!(
                    rule = usage.name(),
                    remaining = usage.remaining(),
                    suppressed,
                    "shadow rule would have refused the call"
                );
            }
        }
    }

    /// Where each limit stands now, without spending anything, in one
    /// store call (a sliding window's two counters read together). A usage
    /// is over when a call of the limit's cost now would be refused.
    /// Fail-closed.
    pub async fn remaining(&self, limits: &[Limit]) -> Result<Vec<Usage>, Error> {
        let at = self.clock.now();
        let now = at.as_secs();
        let (leased, counted): (Vec<&Limit>, Vec<&Limit>) = limits
            .iter()
            .partition(|l| l.rule().algorithm() == Algorithm::Concurrency);
        let mut keys: Vec<String> = counted.iter().map(|l| l.current_key(now)).collect();
        // Each sliding limit's previous counter after them, in order.
        let previous: Vec<Option<u64>> = counted
            .iter()
            .map(|l| previous::previous_index(l, now))
            .collect();
        keys.extend(
            counted
                .iter()
                .zip(&previous)
                .filter_map(|(l, index)| index.map(|i| l.counter_key(i))),
        );
        let counts = if keys.is_empty() {
            Vec::new()
        } else {
            let counts = self
                .attempts
                .run(Op::Get, |deadline| (*self.store).get(&keys, deadline))
                .await;
            counts
                .and_then(|c| reply::same_len(keys.len(), c))
                .and_then(|c| {
                    c.iter()
                        .try_for_each(|&n| reply::not_past_max_count(n))
                        .map(|()| c)
                })
                .map_err(Error::Unavailable)?
        };
        let mut earlier = counts[counted.len()..].iter().copied();
        let mut seen: Vec<Usage> = counted
            .iter()
            .zip(keys)
            .zip(counts.iter().copied())
            .zip(previous)
            .map(|(((limit, key), count), index)| {
                let previous = index.and_then(|_| earlier.next()).unwrap_or(0);
                // As a reservation of the limit's cost would be refused.
                reply::seen(limit, key, previous, count, at, true)
            })
            .collect();
        for limit in leased {
            let key = limit.current_key(now);
            let held = self
                .attempts
                .run(Op::Leases, |deadline| (*self.store).leases(&key, deadline))
                .await
                .and_then(|held| reply::not_past_max_count(held.held).map(|()| held))
                .map_err(Error::Unavailable)?;
            let first_ends = u64::try_from(held.first_ends.as_millis()).unwrap_or(u64::MAX);
            seen.push(reply::seen(limit, key, first_ends, held.held, at, true));
        }
        // Back in the limits' order.
        let mut leased = seen.split_off(counted.len()).into_iter();
        let mut counted = seen.into_iter();
        let ordered: Vec<Usage> = limits
            .iter()
            .filter_map(|l| match l.rule().algorithm() {
                Algorithm::Concurrency => leased.next(),
                _ => counted.next(),
            })
            .collect();
        Ok(ordered)
    }

    /// Clears one limit's counter for the current window (an operator action);
    /// whether there was one. A sliding window's previous counter is
    /// cleared too (first: whether either was there), so that the caller
    /// starts afresh; a GCRA limit's one counter is its whole state.
    /// Fail-closed. (A check of this limiter in flight may still keep the
    /// previous count it read before; it then refuses what that count
    /// weighs until the window ends, never admitting more.)
    pub async fn reset(&self, limit: &Limit) -> Result<bool, Error> {
        let now = self.clock.now().as_secs();
        let index = limit.rule().window().index(now);
        let key = limit.current_key(now);
        if let Some(cache) = &self.cache {
            cache.forget([(limit.stored(), index)]);
        }
        let mut earlier_existed = false;
        if let Some(earlier) = previous::previous_index(limit, now) {
            let key = limit.counter_key(earlier);
            self.previous.forget(limit, earlier);
            earlier_existed = self
                .attempts
                .run(Op::Delete, |deadline| (*self.store).delete(&key, deadline))
                .await
                .map_err(Error::Unavailable)?;
            self.previous.forget(limit, earlier);
        }
        let deleted = self
            .attempts
            .run(Op::Delete, |deadline| (*self.store).delete(&key, deadline))
            .await
            .map_err(Error::Unavailable);
        if let Some(cache) = &self.cache {
            cache.forget([(limit.stored(), index)]);
        }
        deleted.map(|current| current || earlier_existed)
    }
}

/// Whether `limit` may only be charged what fits it: a GCRA limit or a
/// concurrency limit that refuses (not a shadow one, which never refuses).
fn charges_only_what_fits(limit: &Limit) -> bool {
    matches!(
        limit.rule().algorithm(),
        Algorithm::Gcra | Algorithm::Concurrency
    ) && !limit.rule().is_shadow()
}
