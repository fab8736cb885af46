//! Refunds and settles: giving back what a verdict spent, or counting what
//! it spent beyond its estimate, never more than once across clones.

use crate::observe::Op;
use crate::store::MAX_COUNT;
use crate::{Algorithm, CheckId, Counter, Error, Limiter, Usage, Verdict, gcra, key, reply};

impl Limiter {
    /// Gives back up to `units` of what `spent` spent on each limit of rule
    /// `rule`, in one store call: never more than the check's cost on that
    /// limit, never below zero, and nothing on a limit whose window has
    /// rolled over since (the new window's counter is not touched). A GCRA
    /// limit's arrival time moves back by the units' intervals, never
    /// before now. A
    /// verdict that spent nothing (a refused reservation, a degraded check)
    /// gives nothing back, and a verdict (with its clones) never gives back
    /// more than it spent, however often it is refunded or settled.
    ///
    /// A refund is one call with one [`CheckId`](crate::CheckId): a retry
    /// whose first attempt was applied is recognised by the store, so a
    /// refund never gives back twice. Fail-closed.
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
            // A lease is given back by releasing it, not by a refund.
            .filter(|(_, u)| u.algorithm() != Algorithm::Concurrency)
            .collect();
        if usages.is_empty() {
            return Err(Error::NotSpent(rule.to_owned()));
        }
        let at = self.clock.now();
        let now = at.as_secs();
        let mut refunds = Vec::new();
        // The refunded counters by their parts, for the local cache.
        let mut refunded = Vec::new();
        let mut excess = Vec::new();
        for (i, usage) in usages {
            let window = usage.window();
            let (back, more) = split(i, usage.cost());
            if usage.algorithm() == Algorithm::Gcra {
                // One counter, no window to roll over: its arrival time
                // moves back (never before now) or on.
                let counter =
                    |units| gcra::counter(usage.rule(), usage.counter_key().to_owned(), units, at);
                if back > 0 {
                    refunds.push(counter(back));
                }
                if more > 0 {
                    excess.push(counter(more));
                }
                continue;
            }
            let counter = |key: String, cost: u64| Counter {
                key,
                ttl: usage.rule().counter_ttl(),
                cost: cost.min(MAX_COUNT),
                max: usage.max(),
                floor: 0,
                prior: None,
                lease: false,
            };
            let current = window.index(now);
            if back > 0 && usage.index() == current {
                refunds.push(counter(usage.counter_key().to_owned(), back));
                refunded.push((usage.stored(), current));
            }
            if more > 0 {
                excess.push(counter(key::counter_key(usage.stored(), current), more));
            }
        }
        if !refunds.is_empty() {
            self.forget(&refunded);
            let id = CheckId::new();
            let done = self
                .attempts
                .run(Op::Refund, |deadline| {
                    (*self.store).refund(&refunds, id, deadline)
                })
                .await
                .and_then(|counts| reply::same_len(refunds.len(), counts));
            self.forget(&refunded);
            if let Err(err) = done {
                return Err(self.failures.unavailable(rule, err));
            }
        }
        if !excess.is_empty() {
            let id = CheckId::new();
            let done = self
                .attempts
                .run(Op::Count, |deadline| {
                    (*self.store).count(&excess, id, deadline)
                })
                .await
                .and_then(|counts| reply::same_len(excess.len(), counts));
            if let Err(err) = done {
                return Err(self.failures.unavailable(rule, err));
            }
        }
        Ok(())
    }

    /// Drops `counters` (by their parts, `limit:<key>:` and the window
    /// index) from the local cache: a refund makes room the cache must not
    /// hide (before the call, and after it, for a check that noted a count
    /// in between).
    fn forget(&self, counters: &[(&str, u64)]) {
        if let Some(cache) = &self.cache {
            cache.forget(counters.iter().copied());
        }
    }
}
