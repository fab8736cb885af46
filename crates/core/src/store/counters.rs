//! [`CounterStore`]: counters, added to, reserved, refunded and read in
//! one round trip per batch.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::{CheckId, Deadline, Named, Store, StoreError};

/// The largest count a store keeps: 2^53. Counts saturate here instead of
/// wrapping, and every count up to it is exact in a Lua number (a double).
/// It is above [`MAX_MAX`](crate::MAX_MAX), so a saturated counter is over
/// any limit.
pub const MAX_COUNT: u64 = 1 << 53;

/// One counter of a batch: its stored key, its lifetime, what the call
/// spends on it, the most a reservation may bring it to, and the least it
/// is taken to hold.
///
/// A window's counter has a floor of 0. A GCRA limit's counter holds a
/// time (its theoretical arrival time, in µs since the epoch), and its
/// floor is the check's time: a time in the past counts as now.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Counter {
    /// The stored key, e.g. `limit:ask:docs:203.0.113.9:20421`.
    pub key: String,
    /// The counter's lifetime from its first increment: at least until its
    /// window ends, at most two windows.
    pub ttl: Duration,
    /// The units the call adds (or, for a refund, gives back): 1 to [`MAX_COUNT`].
    pub cost: u64,
    /// The ceiling checked by [`CounterStore::reserve`]; ignored otherwise.
    pub max: u64,
    /// The least count the counter is taken to hold (0: none): a count
    /// below it (an absent counter included) counts as `floor` before the
    /// cost is added or given back. A counter with a floor holds a time in
    /// µs, and a count or reservation of it gives it a lifetime afresh
    /// ([`Counter::lifetime_at`]).
    pub floor: u64,
    /// Another counter whose count, in part, lowers this one's max: a
    /// sliding window's previous window, when the core does not know its
    /// count already. `None` for most counters.
    pub prior: Option<Prior>,
    /// Whether the counter is a set of leases (a
    /// [concurrency](crate::Algorithm::Concurrency) limit's) rather than a
    /// count: its count is the number of its leases that have not expired
    /// (any call on it removes the expired ones), and a count or an applied
    /// reservation adds the lease whose id is the call's [`CheckId`]
    /// (unless the set holds it already), ending `ttl` from then; the set
    /// lives until its last lease ends. Its cost is 1, its floor 0, it has
    /// no prior, and a refund leaves it as it is. See the trait's reply
    /// tail.
    pub lease: bool,
}

/// A counter whose count, weighed by `part / whole`, a [`Counter`] makes
/// room for below its max: the previous window of a sliding window.
///
/// [`CounterStore::count`] and [`CounterStore::reserve`] read the prior's
/// count `p` (0 when absent) in the same atomic step as the call, never
/// write it, check the counter against [`Counter::max_after`] `p` and
/// answer `p` after the counts; [`CounterStore::refund`] ignores priors.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Prior {
    /// The prior counter's key (never one of the batch's counters).
    pub key: String,
    /// How much of its count counts: `floor(count × part / whole)`, with
    /// `part ≤ whole`.
    pub part: u64,
    /// The whole `part` is a share of: 1 to
    /// [`Window::MAX_SECS`](crate::Window::MAX_SECS) (the core gives a
    /// window's length in seconds). A store may refuse a prior out of
    /// these bounds as a malformed call.
    pub whole: u64,
}

impl Prior {
    /// `floor(count × part / whole)`, exact (in 128 bits); `count` itself
    /// for a malformed prior (`whole` 0 or below `part`), never more.
    #[inline]
    pub fn weighed(&self, count: u64) -> u64 {
        weigh(count, self.part, self.whole)
    }
}

/// `floor(count × part / whole)`, exact; `count` when `whole` is 0 or
/// below `part`.
pub(crate) fn weigh(count: u64, part: u64, whole: u64) -> u64 {
    if whole == 0 || part > whole {
        return count;
    }
    let weighed = u128::from(count) * u128::from(part) / u128::from(whole);
    // At most count: it fits back in a u64.
    u64::try_from(weighed).unwrap_or(count)
}

impl Counter {
    /// The count after adding this counter's cost to `count` (raised to
    /// the floor first), saturating at [`MAX_COUNT`]: what
    /// [`CounterStore::count`] stores.
    #[inline]
    pub fn added_to(&self, count: u64) -> u64 {
        count
            .max(self.floor)
            .saturating_add(self.cost)
            .min(MAX_COUNT)
    }

    /// Whether this counter's cost fits on top of `count` (raised to the
    /// floor first) within its `max`: the condition
    /// [`CounterStore::reserve`] applies to every counter.
    #[inline]
    pub fn fits(&self, count: u64) -> bool {
        self.fits_within(count, self.max)
    }

    #[inline]
    fn fits_within(&self, count: u64, max: u64) -> bool {
        count
            .max(self.floor)
            .checked_add(self.cost)
            .is_some_and(|total| total <= max)
    }

    /// The lifetime a count or reservation that leaves the counter at
    /// `count` gives a counter with a floor: `ttl` past the time it holds,
    /// that is `ttl` plus `count − floor` µs (rounded up to whole ms) from
    /// now. (A counter without a floor gets `ttl` when created.)
    #[inline]
    pub fn lifetime_at(&self, count: u64) -> Duration {
        let ahead = count.saturating_sub(self.floor).div_ceil(1_000);
        self.ttl.saturating_add(Duration::from_millis(ahead))
    }

    /// This counter's max once its [`prior`](Counter::prior), read at
    /// `prior_count`, is weighed in: `max − floor(prior_count × part /
    /// whole)`, never below 0. Its max itself when it has no prior.
    #[inline]
    pub fn max_after(&self, prior_count: u64) -> u64 {
        match &self.prior {
            Some(prior) => self.max.saturating_sub(prior.weighed(prior_count)),
            None => self.max,
        }
    }

    /// Whether this counter's cost fits on top of `count` within its
    /// [`max_after`](Counter::max_after) its prior's count: what
    /// [`CounterStore::reserve`] checks of a counter with a prior (the
    /// same as [`fits`](Counter::fits) without one).
    #[inline]
    pub fn fits_after(&self, count: u64, prior_count: u64) -> bool {
        self.fits_within(count, self.max_after(prior_count))
    }

    /// The count after giving this counter's cost back from `count`,
    /// never below zero nor the floor: what [`CounterStore::refund`] stores.
    #[inline]
    pub fn refunded_from(&self, count: u64) -> u64 {
        count.saturating_sub(self.cost).max(self.floor)
    }
}

/// What [`CounterStore::reserve`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// Whether every cost was added (otherwise none was).
    pub applied: bool,
    /// Per counter, in order: the new count when applied, else the current
    /// count; then each counter's [`prior`](Counter::prior)'s count, in
    /// order.
    pub counts: Vec<u64>,
}

/// Counters: integers in `0..=`[`MAX_COUNT`] under opaque keys, each with a
/// lifetime. A store only keeps them; all rules, windows and policies stay
/// in the core.
///
/// # Contract
///
/// Every store must pass the counter checks of `tollgate-conformance`,
/// which are the definition of this contract. In short:
///
/// - Each method is one round trip to the store, whatever the batch size.
/// - [`count`](CounterStore::count), [`reserve`](CounterStore::reserve)
///   and [`refund`](CounterStore::refund) get the [`CheckId`] of their
///   call, the same for every attempt of it. A store records what it
///   applied under the id for the deadline's
///   [`check_budget`](Deadline::check_budget) (plus
///   [`Deadline::SKEW_MARGIN`]), in the same atomic step as the write; an
///   attempt whose id it finds recorded applies nothing and answers what
///   was recorded (the counts, or the refusal). So an attempt applied
///   whose reply was lost is never applied again by its retry. A retry
///   carries the same deadline too (below), so a store may find a record
///   by the id and the deadline together (Redis keeps records in a hash
///   per 100 ms of deadlines).
/// - Each method gets the [`Deadline`] of its call's check, the same for
///   every attempt. A store that can tell applies nothing once the
///   deadline (plus [`Deadline::SKEW_MARGIN`]) has passed, and answers
///   [`StoreError::Timeout`] if anyone still listens; it may still answer
///   a retry of a call it applied with its record. A store keeps no timer
///   of its own for a call: the [`Limiter`](crate::Limiter) bounds the
///   check, and whatever a store must bound beyond one call (a connection
///   being made, a give-back) it bounds by the deadline's
///   [`check_budget`](Deadline::check_budget).
/// - A counter that exists always has a lifetime: it lives at least until
///   `ttl` after its first increment in its window (the core gives a `ttl`
///   of one window, so a counter never expires before its window ends), and
///   never more than `ttl` after its latest increment. A count or
///   reservation of a counter with a [`floor`](Counter::floor) gives it
///   [`Counter::lifetime_at`] its new count from then (ms precision),
///   whether it existed or not.
/// - A [`floor`](Counter::floor) raises a count before the cost is added,
///   checked or given back ([`Counter::added_to`], [`Counter::fits`],
///   [`Counter::refunded_from`]); an absent counter reads 0 and is raised
///   alike, except that a refund leaves an absent counter absent.
/// - [`reserve`](CounterStore::reserve) is atomic across the whole batch:
///   it adds every cost or none, exactly when every counter
///   [`fits`](Counter::fits).
/// - A counter with a [`prior`](Counter::prior) is checked against its
///   [`max_after`](Counter::max_after) the prior's count
///   ([`Counter::fits_after`]), read in the same atomic step (0 when
///   absent; the prior is never written, its lifetime left alone).
///   [`count`](CounterStore::count) and [`reserve`](CounterStore::reserve)
///   answer, after the counts, each prior's count, in counter order, and
///   record them with the counts (a retry answers the same);
///   [`refund`](CounterStore::refund) ignores priors. A prior's key is
///   none of the batch's counters and no other counter's prior.
/// - A [`lease`](Counter::lease) counter is a set of leases: its count is
///   the number of its unexpired leases (on the store's clock; every call
///   on the set removes the expired ones), a count or applied reservation
///   adds the lease whose id is the call's [`CheckId`] (not again when the
///   set holds it), ending `ttl` later, and a reservation fits it when
///   that count plus 1 is within its max, or when the set holds the
///   call's lease already (a retry of the call applied without its
///   record, as Redis Cluster sends one while a slot migrates; a store
///   that records every call with its write never sees one). The set lives until its last
///   lease ends (a key without leases is removed). After the priors'
///   counts, [`count`](CounterStore::count) and
///   [`reserve`](CounterStore::reserve) answer, per lease counter in
///   order, two numbers: the ms until its first lease ends after the call
///   (rounded up; 0 when it holds none), and how many expired leases the
///   call removed from it; recorded with the rest. A refund leaves a lease
///   counter as it is and answers its count.
///   [`end_lease`](CounterStore::end_lease),
///   [`renew_lease`](CounterStore::renew_lease) and
///   [`leases`](CounterStore::leases) are one atomic round trip each.
///
/// So a reply is the counts, then one count per prior, then two numbers
/// per lease counter.
/// - Counts are exact integers in `0..=`[`MAX_COUNT`]; arithmetic saturates
///   ([`Counter::added_to`], [`Counter::refunded_from`]), never wraps.
/// - Concurrent callers (tasks, processes, machines sharing the store) never
///   lose or duplicate an update.
/// - Counts survive dropping every client and opening new ones.
/// - Keys are opaque bytes; a store must not merge two different keys.
///   Keys within one batch are distinct (the [`Limiter`](crate::Limiter)
///   guarantees it). A store that also keeps marks keeps them apart from
///   counters.
///
/// # Errors
///
/// Every failure is a [`StoreError`], marked transient when a retry may
/// succeed. A reply that cannot be read (wrong type, wrong length) is
/// [`StoreError::InvalidReply`], never a panic and never a count taken as 0.
#[async_trait]
pub trait CounterStore: Named {
    /// This store behind one shared pointer, as a [`Limiter`](crate::Limiter)
    /// holds it: a store that already is an `Arc<dyn CounterStore>` or an
    /// `Arc<dyn Store>` (as `tollgate::open_store` gives) is kept as it is,
    /// not wrapped again, so that each call goes through one dynamic
    /// dispatch.
    fn into_shared(self) -> Arc<dyn CounterStore>
    where
        Self: Sized,
    {
        Arc::new(self)
    }

    /// Adds each counter's cost ([`Counter::added_to`]) and returns the new
    /// counts, in order, then the count of each counter's
    /// [`prior`](Counter::prior), in order.
    async fn count(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError>;

    /// Adds every counter's cost if each [`fits`](Counter::fits) (within
    /// its [`max_after`](Counter::max_after) its prior's count), otherwise
    /// adds none; atomic across the batch. The reservation's counts end
    /// with the count of each counter's [`prior`](Counter::prior), in
    /// order.
    async fn reserve(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Reservation, StoreError>;

    /// Gives each counter's cost back ([`Counter::refunded_from`]), never
    /// below zero and keeping the counter's lifetime; an absent counter
    /// stays absent (and reads 0). Returns the new counts, in order.
    async fn refund(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError>;

    /// Reads the counts of `keys` without changing them; 0 for an absent key.
    async fn get(&self, keys: &[String], deadline: Deadline) -> Result<Vec<u64>, StoreError>;

    /// Removes the counter `key`; whether it existed.
    async fn delete(&self, key: &str, deadline: Deadline) -> Result<bool, StoreError>;

    /// Ends the lease `id` in the set of leases at `key` (a counter with
    /// [`lease`](Counter::lease), which a count or reservation with the
    /// call id `id` took); whether it was held (unexpired). Releasing a
    /// lease that is not held (released already, expired, or never taken)
    /// changes nothing. Expired leases of the set are removed.
    ///
    /// The default answers that this store keeps no leases.
    async fn end_lease(
        &self,
        key: &str,
        id: CheckId,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let _ = (key, id, deadline);
        Err(no_leases())
    }

    /// Renews the lease `id` at `key`: it now ends `lifetime` from now, and
    /// the set lives at least as long. Whether it was held (unexpired); a
    /// lease that was not is not taken again. Expired leases of the set are
    /// removed.
    ///
    /// The default answers that this store keeps no leases.
    async fn renew_lease(
        &self,
        key: &str,
        id: CheckId,
        lifetime: Duration,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let _ = (key, id, lifetime, deadline);
        Err(no_leases())
    }

    /// The leases held (unexpired) in the set at `key`, without changing
    /// it: how many, and how long until the one that ends first ends.
    ///
    /// The default answers that this store keeps no leases.
    async fn leases(&self, key: &str, deadline: Deadline) -> Result<Leases, StoreError> {
        let _ = (key, deadline);
        Err(no_leases())
    }
}

/// The leases held in one set ([`CounterStore::leases`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Leases {
    /// How many are held (unexpired).
    pub held: u64,
    /// How long until the first of them ends (zero when none is held), in
    /// whole ms rounded up.
    pub first_ends: Duration,
}

/// What a store without leases answers a lease call.
fn no_leases() -> StoreError {
    StoreError::Backend("this store keeps no leases".into())
}

/// A counter store that forwards every call to `**self`: `impl [generics]
/// for type { how it becomes shared }`.
macro_rules! forward {
    ($(impl [$($generics:tt)*] for $ty:ty { $shared:expr })*) => {$(
        #[async_trait]
        impl<$($generics)*> CounterStore for $ty {
            fn into_shared(self) -> Arc<dyn CounterStore> {
                ($shared)(self)
            }
            async fn count(&self, counters: &[Counter], id: CheckId, deadline: Deadline) -> Result<Vec<u64>, StoreError> {
                (**self).count(counters, id, deadline).await
            }
            async fn reserve(&self, counters: &[Counter], id: CheckId, deadline: Deadline) -> Result<Reservation, StoreError> {
                (**self).reserve(counters, id, deadline).await
            }
            async fn refund(&self, counters: &[Counter], id: CheckId, deadline: Deadline) -> Result<Vec<u64>, StoreError> {
                (**self).refund(counters, id, deadline).await
            }
            async fn get(&self, keys: &[String], deadline: Deadline) -> Result<Vec<u64>, StoreError> {
                (**self).get(keys, deadline).await
            }
            async fn delete(&self, key: &str, deadline: Deadline) -> Result<bool, StoreError> {
                (**self).delete(key, deadline).await
            }
            async fn end_lease(&self, key: &str, id: CheckId, deadline: Deadline) -> Result<bool, StoreError> {
                (**self).end_lease(key, id, deadline).await
            }
            async fn renew_lease(&self, key: &str, id: CheckId, lifetime: Duration, deadline: Deadline) -> Result<bool, StoreError> {
                (**self).renew_lease(key, id, lifetime, deadline).await
            }
            async fn leases(&self, key: &str, deadline: Deadline) -> Result<Leases, StoreError> {
                (**self).leases(key, deadline).await
            }
        }
    )*};
}

forward! {
    impl [S: CounterStore] for Arc<S> { |s: Arc<S>| -> Arc<dyn CounterStore> { s } }
    impl [] for Arc<dyn CounterStore> { |s: Arc<dyn CounterStore>| s }
    impl [] for Arc<dyn Store> { |s: Arc<dyn Store>| -> Arc<dyn CounterStore> { s } }
    impl [S: CounterStore] for Box<S> { |s: Box<S>| -> Arc<dyn CounterStore> { Arc::from(s as Box<dyn CounterStore>) } }
    impl [] for Box<dyn CounterStore> { |s: Box<dyn CounterStore>| -> Arc<dyn CounterStore> { Arc::from(s) } }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(cost: u64, max: u64) -> Counter {
        Counter {
            key: "k".into(),
            ttl: Duration::from_secs(1),
            cost,
            max,
            floor: 0,
            prior: None,
            lease: false,
        }
    }

    /// A store that fails every call.
    #[derive(Debug)]
    struct Down;

    impl Named for Down {}

    #[async_trait]
    impl CounterStore for Down {
        async fn count(
            &self,
            _: &[Counter],
            _: CheckId,
            _: Deadline,
        ) -> Result<Vec<u64>, StoreError> {
            Err(StoreError::Backend("down".into()))
        }
        async fn reserve(
            &self,
            _: &[Counter],
            _: CheckId,
            _: Deadline,
        ) -> Result<Reservation, StoreError> {
            Err(StoreError::Backend("down".into()))
        }
        async fn refund(
            &self,
            _: &[Counter],
            _: CheckId,
            _: Deadline,
        ) -> Result<Vec<u64>, StoreError> {
            Err(StoreError::Backend("down".into()))
        }
        async fn get(&self, _: &[String], _: Deadline) -> Result<Vec<u64>, StoreError> {
            Err(StoreError::Backend("down".into()))
        }
        async fn delete(&self, _: &str, _: Deadline) -> Result<bool, StoreError> {
            Err(StoreError::Backend("down".into()))
        }
    }

    #[test]
    fn a_shared_store_is_kept_as_it_is_not_wrapped_again() {
        let shared: Arc<dyn CounterStore> = Arc::new(Down);
        let limiter = crate::Limiter::new(Arc::clone(&shared));
        assert!(Arc::ptr_eq(limiter.store(), &shared), "wrapped again");
        let typed = Arc::new(Down);
        let kept = Arc::clone(&typed).into_shared();
        let typed: Arc<dyn CounterStore> = typed;
        assert!(Arc::ptr_eq(&kept, &typed), "an Arc<Down> was wrapped again");
        let boxed: Box<dyn CounterStore> = Box::new(Down);
        assert_eq!(boxed.into_shared().name(), "store");
    }

    #[test]
    fn fits_means_count_plus_cost_within_max() {
        assert!(counter(3, 10).fits(7));
        assert!(!counter(3, 10).fits(8));
        assert!(counter(10, 10).fits(0));
        assert!(!counter(11, 10).fits(0), "a cost above max never fits");
        assert!(!counter(u64::MAX, u64::MAX).fits(1), "no wrap");
    }

    #[test]
    fn a_floor_raises_the_count_first() {
        let at = |floor| Counter {
            floor,
            prior: None,
            lease: false,
            ..counter(3, 110)
        };
        assert_eq!(at(100).added_to(5), 103, "raised to the floor");
        assert_eq!(at(100).added_to(105), 108, "above it, as it is");
        assert!(at(100).fits(0) && at(100).fits(107) && !at(100).fits(108));
        assert!(!at(108).fits(0), "108 + 3 > 110");
        assert_eq!(at(100).refunded_from(102), 100, "never below the floor");
        assert_eq!(at(100).refunded_from(200), 197);
        assert_eq!(at(MAX_COUNT).added_to(0), MAX_COUNT, "saturates");
        assert_eq!(at(100).lifetime_at(2_100), Duration::from_millis(1_002));
        assert_eq!(at(100).lifetime_at(2_101), Duration::from_millis(1_003));
    }

    #[test]
    fn counts_saturate_and_refunds_floor_at_zero() {
        assert_eq!(counter(5, 1).added_to(2), 7);
        assert_eq!(counter(MAX_COUNT, 1).added_to(MAX_COUNT), MAX_COUNT);
        assert_eq!(counter(u64::MAX, 1).added_to(u64::MAX), MAX_COUNT);
        assert_eq!(counter(5, 1).refunded_from(7), 2);
        assert_eq!(counter(5, 1).refunded_from(3), 0);
    }
}
