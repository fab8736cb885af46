//! What a check answers: a [`Verdict`], and when limited, a [`RateLimited`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::observe::RuleMetrics;
use crate::{Algorithm, Lease, Limit, Rule, Unit, Window};

/// Where one limit stands after a check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Usage {
    rule: Rule,
    cost: u64,
    count: u64,
    reset: u64,
    retry_after: u64,
    over: bool,
    shadow_over: bool,
    /// Where the cost went: the counter key (`limit:<key>:<index>`), the
    /// length of its part before the index, and the window index (for
    /// refunds, settles and the local cache; never shown). Empty in a
    /// refusal the local cache answered: it spent nothing, so nothing is
    /// refunded or noted from it.
    key: String,
    prefix: usize,
    index: u64,
    /// What was given back and what excess was counted since the check.
    account: Account,
}

impl Usage {
    /// The usage of `limit` at `count` in the counter stored at `key` (the
    /// limit's counter key at `now_secs`, or empty for a local refusal);
    /// `past_max` when it refuses the call (a shadow rule only reports it).
    pub(crate) fn new(
        limit: &Limit,
        key: String,
        count: u64,
        now_secs: u64,
        past_max: bool,
    ) -> Usage {
        let rule = limit.rule();
        let window = rule.window();
        Usage {
            rule: rule.clone(),
            cost: limit.cost(),
            count,
            reset: window.reset(now_secs),
            retry_after: window.retry_after(now_secs),
            over: past_max && !rule.is_shadow(),
            shadow_over: past_max && rule.is_shadow(),
            prefix: limit.stored().len(),
            key,
            index: window.index(now_secs),
            account: Account::default(),
        }
    }

    /// A sliding window's usage, when past its max, waits `wait` seconds
    /// (the time until the cost fits again, [`algorithm::wait`](crate::algorithm::wait);
    /// at least 1), not until the window resets; `None` (a cost that never
    /// fits) keeps the window's reset.
    pub(crate) fn waiting(mut self, wait: Option<u64>, now_secs: u64) -> Usage {
        if let (Some(wait), true) = (wait, self.over || self.shadow_over) {
            self.retry_after = wait.max(1);
            self.reset = now_secs.saturating_add(self.retry_after);
        }
        self
    }

    /// A concurrency usage whose first lease held ends in `wait` whole
    /// seconds (0: none held): it resets then, and waits that long (at
    /// least 1 s) when over.
    pub(crate) fn leased(mut self, wait: u64, now_secs: u64) -> Usage {
        self.retry_after = wait.max(1);
        self.reset = now_secs.saturating_add(wait);
        self
    }

    /// A GCRA usage in `state`: it resets when the bucket is full again;
    /// past its burst, it waits until the cost fits (at least 1 s), or,
    /// for a cost above the burst, until the bucket is full.
    pub(crate) fn gcra(mut self, state: &crate::gcra::State, now_secs: u64) -> Usage {
        let until_full = state.full.saturating_sub(now_secs).max(1);
        self.retry_after = until_full;
        self.reset = state.full.max(now_secs);
        if self.over || self.shadow_over {
            self.retry_after = state.wait.map_or(until_full, |wait| wait.max(1));
            // When the cost fits, from the exact time: `now_secs` is the
            // whole second the check fell in.
            self.reset = state
                .fits_at
                .unwrap_or(self.reset)
                .max(now_secs.saturating_add(1));
        }
        self
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        self.rule.name()
    }

    /// How the rule counts its window.
    pub fn algorithm(&self) -> Algorithm {
        self.rule.algorithm()
    }

    pub(crate) fn rule(&self) -> &Rule {
        &self.rule
    }

    pub(crate) fn shared_name(&self) -> &Arc<str> {
        self.rule.shared_name()
    }

    pub(crate) fn metrics(&self) -> &RuleMetrics {
        self.rule.metrics()
    }

    /// What the rule counts.
    pub fn unit(&self) -> &Unit {
        self.rule.unit()
    }

    /// Whether the rule's budget may be shown to callers
    /// ([`Rule::with_public`](crate::Rule::with_public)).
    pub fn is_public(&self) -> bool {
        self.rule.is_public()
    }

    /// The units the check asked to spend on this limit.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// The counter's count as the check found or left it.
    pub(crate) fn count(&self) -> u64 {
        self.count
    }

    /// The stored counter key, `limit:<key>:<index>`.
    pub(crate) fn counter_key(&self) -> &str {
        &self.key
    }

    /// The counter key without its window index, `limit:<key>:`.
    pub(crate) fn stored(&self) -> &str {
        self.key.get(..self.prefix).unwrap_or_default()
    }

    pub(crate) fn index(&self) -> u64 {
        self.index
    }

    /// The rule's `max` per window.
    pub fn max(&self) -> u64 {
        self.rule.max()
    }

    /// The rule's window.
    pub fn window(&self) -> Window {
        self.rule.window()
    }

    /// The rule's GCRA burst ([`Rule::burst`](crate::Rule::burst)): the
    /// most units a GCRA limit lets one call, or calls in a row, spend at
    /// once (1 unless set; unused by the other shapes).
    pub fn burst(&self) -> u64 {
        self.rule.burst()
    }

    /// `max - count`: below zero when a counted call went over. For a
    /// sliding window the count is the estimate, the previous window's
    /// weighted count plus the current one's.
    pub fn remaining(&self) -> i64 {
        // Counts are at most MAX_COUNT and `max` at most MAX_MAX, both below i64::MAX.
        let count = i64::try_from(self.count).unwrap_or(i64::MAX);
        let max = i64::try_from(self.max()).unwrap_or(i64::MAX);
        max.saturating_sub(count)
    }

    /// When the window resets, in Unix seconds; for a sliding window past
    /// its max, when the cost fits again.
    pub fn reset(&self) -> u64 {
        self.reset
    }

    /// Whole seconds until the window resets, never 0; for a sliding
    /// window past its max, until the cost fits again (the previous
    /// window's weight falls every second).
    pub fn retry_after(&self) -> u64 {
        self.retry_after
    }

    /// Whether this limit refuses the call.
    pub fn is_over(&self) -> bool {
        self.over
    }

    /// Whether this is a shadow rule that would have refused the call.
    pub fn is_shadow_over(&self) -> bool {
        self.shadow_over
    }

    /// Whether the cost is above the rule's max, so that no call of this
    /// cost fits in any window: waiting for the reset does not help.
    pub fn never_fits(&self) -> bool {
        self.cost > self.rule.capacity()
    }
}

/// Of one usage of a spending verdict: units given back, excess counted.
/// Shared by the verdict's clones (they share the usage); a clone of a
/// [`Usage`] alone copies the totals. It takes no part in equality.
#[derive(Debug, Default)]
struct Account {
    back: AtomicU64,
    excess: AtomicU64,
}

impl Clone for Account {
    fn clone(&self) -> Account {
        Account {
            back: AtomicU64::new(self.back.load(Ordering::Acquire)),
            excess: AtomicU64::new(self.excess.load(Ordering::Acquire)),
        }
    }
}

impl PartialEq for Account {
    fn eq(&self, _: &Account) -> bool {
        true
    }
}

impl Eq for Account {}

/// The answer of a check: where each limit stands and whether the call may go on.
///
/// Being limited is a value, read with [`limited`](Verdict::limited) or
/// [`into_result`](Verdict::into_result); a broken store is an
/// [`Error`](crate::Error) (fail-closed) or a [`degraded`](Verdict::is_degraded)
/// verdict (fail-open). Cheap to clone: clones share the usage, and the
/// account of what was refunded or settled since.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    usage: Arc<[Usage]>,
    degraded: bool,
    spent: bool,
    local: bool,
    /// The leases the check took, one per concurrency limit (none unless
    /// it was allowed).
    leases: Vec<Lease>,
}

impl Verdict {
    pub(crate) fn new(usage: Arc<[Usage]>, spent: bool) -> Verdict {
        Verdict {
            usage,
            degraded: false,
            spent,
            local: false,
            leases: Vec::new(),
        }
    }

    /// The same verdict holding `leases`.
    pub(crate) fn with_leases(mut self, leases: Vec<Lease>) -> Verdict {
        self.leases = leases;
        self
    }

    /// The leases this check took, one per
    /// [concurrency](crate::Algorithm::Concurrency) limit of an allowed
    /// check: held until released, or until the verdict and every clone of
    /// it and of the leases are dropped (then released in the background).
    pub fn leases(&self) -> &[Lease] {
        &self.leases
    }

    /// Usage `i`'s account, when this verdict spent.
    fn account(&self, i: usize) -> Option<&Account> {
        self.usage
            .get(i)
            .filter(|_| self.spent)
            .map(|usage| &usage.account)
    }

    /// Gives back up to `units` more of usage `i`'s `cost`, never more than
    /// the cost in all (shared by clones); the units to give back now. A
    /// verdict that spent nothing gives 0.
    pub(crate) fn give_back(&self, i: usize, units: u64, cost: u64) -> u64 {
        let Some(account) = self.account(i) else {
            return 0;
        };
        let before = account
            .back
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |given| {
                Some(given.saturating_add(units).min(cost))
            });
        let before = before.unwrap_or_else(|given| given);
        before
            .saturating_add(units)
            .min(cost)
            .saturating_sub(before)
    }

    /// Raises what usage `i` has given back to `back` and its counted
    /// excess to `excess`, never lowering either (shared by clones); the
    /// units to give back and to count now, so that settling twice with the
    /// same actual cost does nothing the second time.
    pub(crate) fn settle_up_to(&self, i: usize, back: u64, excess: u64) -> (u64, u64) {
        let Some(account) = self.account(i) else {
            return (0, 0);
        };
        let raise =
            |total: &AtomicU64, to: u64| to.saturating_sub(total.fetch_max(to, Ordering::AcqRel));
        (raise(&account.back, back), raise(&account.excess, excess))
    }

    /// A refusal answered from the limiter's cache of full counters.
    pub(crate) fn local(usage: Arc<[Usage]>) -> Verdict {
        Verdict {
            usage,
            degraded: false,
            spent: false,
            local: true,
            leases: Vec::new(),
        }
    }

    /// Whether the limiter answered this refusal from its cache of full
    /// counters, without a store round trip (nothing was spent; the other
    /// limits' remaining budgets are as last seen).
    pub fn is_local(&self) -> bool {
        self.local
    }

    pub(crate) fn degraded() -> Verdict {
        Verdict {
            usage: Arc::default(),
            degraded: true,
            spent: false,
            local: false,
            leases: Vec::new(),
        }
    }

    /// Whether the check spent its costs: always for a count, only when
    /// applied for a reservation, never for a degraded check.
    pub fn has_spent(&self) -> bool {
        self.spent
    }

    /// Whether the call may go on.
    pub fn is_allowed(&self) -> bool {
        !self.usage.iter().any(Usage::is_over)
    }

    /// Whether the store failed and the call was allowed by the fail-open
    /// policy; such a verdict carries no usage.
    pub fn is_degraded(&self) -> bool {
        self.degraded
    }

    /// Each limit of the check, in the order given.
    pub fn usage(&self) -> &[Usage] {
        &self.usage
    }

    /// The shadow rules that would have refused the call (and did not).
    pub fn shadow_limited(&self) -> impl Iterator<Item = &Usage> {
        self.usage.iter().filter(|u| u.shadow_over)
    }

    /// The limit that refuses the call, if any: among those over, one whose
    /// cost can never fit ([`Usage::never_fits`]: no wait helps) when there
    /// is one; among those, the one with the longest wait
    /// ([`Usage::retry_after`]: a fixed window's reset, a sliding window's
    /// or a GCRA bucket's time until the cost fits; the first given, on a
    /// tie).
    pub fn limited(&self) -> Option<RateLimited> {
        let mut over = self.usage.iter().filter(|u| u.over);
        let first = over.next()?;
        let rank = |u: &Usage| (u.never_fits(), u.retry_after);
        let named = over.fold(first, |a, b| if rank(b) > rank(a) { b } else { a });
        Some(RateLimited {
            limit: named.shared_name().clone(),
            max: named.max(),
            window: named.window(),
            algorithm: named.algorithm(),
            capacity: named.rule.capacity(),
            unit: named.unit().clone(),
            reset: named.reset,
            retry_after: named.retry_after,
            cost: named.cost,
        })
    }

    /// `Ok(self)` when allowed, the [`RateLimited`] diagnostic otherwise.
    pub fn into_result(self) -> Result<Verdict, RateLimited> {
        match self.limited() {
            Some(limited) => Err(limited),
            None => Ok(self),
        }
    }
}

/// Why a call was refused: which limit, when it resets, how long to wait;
/// or that the call's cost can never fit that limit
/// ([`never_fits`](RateLimited::never_fits)), when no wait helps. Nothing
/// in it names the store or a key.
///
/// Shown as `rate limit `ask` reached: 15 per 1d; retry in 3600 s`, or,
/// for a cost that never fits, `a cost of 250000 tokens never fits rate
/// limit `ask-tokens`: 200000 tokens per 1d`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RateLimited {
    limit: Arc<str>,
    max: u64,
    window: Window,
    algorithm: Algorithm,
    /// The most one call may spend: the max, or a GCRA rule's burst.
    capacity: u64,
    unit: Unit,
    reset: u64,
    retry_after: u64,
    cost: u64,
}

impl std::fmt::Display for RateLimited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (limit, max, window) = (&self.limit, self.max, self.window);
        let unit = UnitSuffix(&self.unit);
        if self.never_fits() {
            let (cost, units) = (self.cost, self.unit.as_str());
            write!(
                f,
                "a cost of {cost} {units} never fits rate limit `{limit}`: {max}{unit} per {window}"
            )?;
            if self.algorithm == Algorithm::Gcra {
                write!(f, ", at most {} at once", self.capacity)?;
            }
            Ok(())
        } else {
            let wait = self.retry_after;
            write!(
                f,
                "rate limit `{limit}` reached: {max}{unit} per {window}; retry in {wait} s"
            )
        }
    }
}

impl std::error::Error for RateLimited {}

impl RateLimited {
    /// The name of the limit that refused the call.
    pub fn limit(&self) -> &str {
        &self.limit
    }

    /// That limit's `max` per window.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// That limit's window.
    pub fn window(&self) -> Window {
        self.window
    }

    /// How that limit counts its window.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// What that limit counts.
    pub fn unit(&self) -> &Unit {
        &self.unit
    }

    /// When that limit's window resets (a sliding window: when the cost
    /// fits again), in Unix seconds.
    pub fn reset(&self) -> u64 {
        self.reset
    }

    /// Whole seconds to wait before trying again; at least 1. When the cost
    /// [never fits](RateLimited::never_fits), no wait helps: this is then
    /// only when the limit's window resets, and promises nothing.
    pub fn retry_after(&self) -> u64 {
        self.retry_after
    }

    /// The units the refused call asked to spend on that limit.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// Whether the call's cost is above that limit's max, so that it is
    /// refused in every window: the caller must ask for less, not wait.
    pub fn never_fits(&self) -> bool {
        self.cost > self.capacity
    }
}

/// ` tokens` after a max counted in a named unit; nothing for calls.
struct UnitSuffix<'a>(&'a Unit);

impl std::fmt::Display for UnitSuffix<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Unit::Calls => Ok(()),
            Unit::Named(name) => write!(f, " {name}"),
        }
    }
}
