//! [`LocalCache`]: full counters remembered in bounded memory, so that a
//! call that cannot fit is refused without a store round trip.
//!
//! A counter whose window is full stays full until the window ends (counts
//! only grow, except by a refund or an operator reset). So when a check
//! finds a counter that cannot take its cost, the limiter remembers every
//! counter of that check as it was seen, and refuses a later check of the
//! same counters locally while one of them still cannot take its cost. It
//! never admits anything: a check it cannot answer goes to the store.
//!
//! An entry answers for at most the cache's *age* after the store gave its
//! count (and never past its window's end); after that the next check goes
//! to the store, whose answer notes the entry afresh. So a refund or reset
//! made on *another* instance (`tollgate reset`, another process's settle)
//! is seen within the age; until then a call it made room for may still be
//! refused here. Refunds and resets through this limiter clear their
//! entries at once.
//!
//! A sliding window's count falls every second as its previous window
//! weighs less, and a GCRA bucket drains continuously, so the cache
//! neither notes nor answers checks of sliding or GCRA limits: the store
//! answers them. A concurrency limit's leases end at any moment, so the
//! cache never notes them nor refuses for them; but a check whose fixed
//! window is full is refused locally whatever leases it would have taken
//! (none is taken), its concurrency limits reported with no lease counted.

mod table;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use crate::{Algorithm, Limit, Usage, observe};
pub(crate) use table::Table;

/// A bounded map of counters to the count last seen, oldest evicted
/// first; each entry answers for at most `age`. Counters are known by the
/// parts of their keys ([`Table`]): a refused check builds no key.
#[derive(Debug)]
pub(crate) struct LocalCache {
    capacity: usize,
    /// How long after the store gave a count its entry may answer.
    age: Duration,
    /// Refusals only read, so they never wait for one another.
    inner: RwLock<Table<Seen>>,
    /// Bumped by every [`LocalCache::forget`], under the lock: a store
    /// answer obtained before a refund or reset is never noted after it.
    epoch: AtomicU64,
    /// How many counters `inner` holds, so that a check finds an empty
    /// cache without taking the lock (the common case, until an attack).
    entries: AtomicUsize,
}

/// What the store last said of one counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    /// The count.
    count: u64,
    /// The Unix second the counter's window ends.
    ends: u64,
    /// When the check that the store answered began, by the limiter's clock.
    at: Duration,
}

impl LocalCache {
    /// A cache holding at most `capacity` counters, each answering for at
    /// most `age` after the store gave its count.
    pub(crate) fn new(capacity: usize, age: Duration) -> LocalCache {
        LocalCache {
            capacity: capacity.max(1),
            age,
            inner: RwLock::default(),
            epoch: AtomicU64::new(0),
            entries: AtomicUsize::new(0),
        }
    }

    /// The epoch to give [`note`](LocalCache::note) for a store call made now.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// Whether the cache holds no counter (read without the lock).
    fn is_empty(&self) -> bool {
        self.entries.load(Ordering::Acquire) == 0
    }

    /// Records how many counters `inner` now holds.
    fn counted(&self, inner: &Table<Seen>) {
        self.entries.store(inner.len(), Ordering::Release);
        observe::cache_entries(inner.len());
    }

    /// Whether an entry the store gave at `at` still answers at `now`: its
    /// window has not ended and it is younger than the age. A clock that
    /// went back (an entry from the future) makes it answer no more.
    fn answers(&self, seen: &Seen, now: Duration) -> bool {
        seen.ends > now.as_secs() && now.checked_sub(seen.at).is_some_and(|age| age < self.age)
    }

    /// The counts last seen of the counters of `limits` at `now` (the
    /// limiter's clock), one per limit, when every one is known, still
    /// answers (see [`note`](LocalCache::note)) and at least one of them
    /// cannot take its limit's cost; `None` otherwise (the store must
    /// answer). Builds no key: counters are looked up by their parts.
    pub(crate) fn refusal(&self, limits: &[Limit], now: Duration) -> Option<Vec<u64>> {
        if self.is_empty() {
            return None;
        }
        let secs = now.as_secs();
        let inner = self.read();
        // Allocated at the first counter found: a check of a new visitor
        // usually misses at once.
        let mut counts = Vec::new();
        let mut full = false;
        for limit in limits {
            let count = match limit.rule().algorithm() {
                Algorithm::Fixed => {
                    let index = limit.rule().window().index(secs);
                    let seen = inner.get(limit.stored(), index)?;
                    if !self.answers(seen, now) {
                        return None;
                    }
                    full |= !limit.fits(seen.count);
                    seen.count
                }
                // Passed over (no lease counted): the check's fixed
                // windows decide.
                Algorithm::Concurrency => 0,
                // A sliding window's or a GCRA bucket's count falls with
                // time: only the store answers it.
                Algorithm::Sliding | Algorithm::Gcra => return None,
            };
            if counts.capacity() == 0 {
                counts = Vec::with_capacity(limits.len());
            }
            counts.push(count);
        }
        full.then_some(counts)
    }

    /// Notes what the store answered for a check that began at `at` (the
    /// limiter's clock) and whose store call began at `epoch`: each
    /// counter's count, answering until its window resets or the age has
    /// passed since `at`, whichever comes first. Counters already
    /// remembered take the new count and time; when the check found one of
    /// them `full`, every counter of it is remembered. An answer from before
    /// a refund or reset (an older epoch) is dropped: it may predate the
    /// room the refund made.
    pub(crate) fn note(&self, epoch: u64, usage: &[Usage], full: bool, at: Duration) {
        // An answer with room only updates counters already remembered, and
        // most (a new visitor's) touch none: that is found under the read
        // lock, without holding refusals back.
        if !full && (self.is_empty() || !self.knows_any(usage)) {
            return;
        }
        let mut inner = self.write();
        if self.epoch.load(Ordering::Acquire) != epoch {
            return;
        }
        let mut grew = false;
        for usage in usage {
            if usage.algorithm() != Algorithm::Fixed {
                continue;
            }
            let (stored, index) = (usage.stored(), usage.index());
            let seen = Seen {
                count: usage.count(),
                ends: usage.reset(),
                at,
            };
            match inner.get_mut(stored, index) {
                Some(entry) => *entry = seen,
                None if !full => {}
                None => {
                    inner.insert(self.capacity, stored, index, seen);
                    grew = true;
                }
            }
        }
        if grew {
            self.counted(&inner);
        }
    }

    /// Whether any counter of `usage` is remembered.
    fn knows_any(&self, usage: &[Usage]) -> bool {
        let inner = self.read();
        usage
            .iter()
            .any(|u| inner.get(u.stored(), u.index()).is_some())
    }

    /// Forgets the counters `(stored, index)` (after a refund or a reset
    /// through this limiter) and starts a new epoch, so that no answer
    /// obtained before it is noted. Called before the store call and again
    /// after it.
    pub(crate) fn forget<'a>(&self, counters: impl IntoIterator<Item = (&'a str, u64)>) {
        let mut inner = self.write();
        self.epoch.fetch_add(1, Ordering::AcqRel);
        let mut removed = false;
        for (stored, index) in counters {
            removed |= inner.remove(stored, index);
        }
        if removed {
            self.counted(&inner);
        }
    }

    /// How many counters are remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.read().len()
    }

    // Plain values: consistent even after a panic elsewhere.
    fn read(&self) -> RwLockReadGuard<'_, Table<Seen>> {
        self.inner.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Table<Seen>> {
        self.inner.write().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An age longer than the minute windows these tests use.
    const AGE: Duration = Duration::from_secs(3_600);

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// The rule of every counter of these tests: counters `limit:r:<key>:0`
    /// of minute windows, for a check of a second before 60.
    fn rule(max: u64) -> crate::Rule {
        let rule = crate::Rule::new("r", max, crate::Window::MINUTE);
        rule.and_then(|r| r.with_key(&["k"]))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// What a check saw of counter `key`: `count`, its window ending at
    /// second 60.
    fn seen(key: &str, count: u64) -> Usage {
        let limit = rule(1_000).limit(&[key]).unwrap_or_else(|e| panic!("{e}"));
        Usage::new(&limit, limit.counter_key(0), count, 0, false)
    }

    /// A check of counter `key` costing `cost` against `max`.
    fn counter(key: &str, cost: u64, max: u64) -> Limit {
        let limit = rule(max).limit(&[key]).and_then(|l| l.with_cost(cost));
        limit.unwrap_or_else(|e| panic!("{e}"))
    }

    /// Forgets the counters `keys` of window 0.
    fn forget(cache: &LocalCache, keys: &[&str]) {
        let stored: Vec<String> = keys.iter().map(|k| format!("limit:r:{k}:")).collect();
        cache.forget(stored.iter().map(|s| (s.as_str(), 0)));
    }

    #[test]
    fn refuses_only_what_cannot_fit_and_only_until_the_window_ends() {
        let cache = LocalCache::new(10, AGE);
        let full = [counter("a", 1, 5), counter("b", 1, 100)];
        assert_eq!(cache.refusal(&full, secs(0)), None, "nothing known");
        cache.note(0, &[seen("a", 5), seen("b", 7)], true, secs(0));
        assert_eq!(cache.refusal(&full, secs(10)), Some(vec![5, 7]));
        assert_eq!(cache.refusal(&full, secs(60)), None, "the window ended");
        let roomy = [counter("b", 1, 100)];
        assert_eq!(cache.refusal(&roomy, secs(10)), None, "b alone has room");
        let other = [counter("a", 1, 5), counter("c", 1, 100)];
        assert_eq!(cache.refusal(&other, secs(10)), None, "c is not known");
        forget(&cache, &["a"]);
        assert_eq!(
            cache.refusal(&full, secs(10)),
            None,
            "a refund or reset clears it"
        );
    }

    #[test]
    fn a_cheaper_call_that_fits_is_not_refused() {
        let cache = LocalCache::new(10, AGE);
        cache.note(0, &[seen("t", 950)], true, secs(0));
        assert_eq!(
            cache.refusal(&[counter("t", 100, 1_000)], secs(1)),
            Some(vec![950])
        );
        assert_eq!(cache.refusal(&[counter("t", 50, 1_000)], secs(1)), None);
    }

    #[test]
    fn later_answers_update_what_is_remembered_and_add_nothing_new() {
        let cache = LocalCache::new(10, AGE);
        cache.note(0, &[seen("a", 7)], false, secs(0));
        assert_eq!(cache.len(), 0, "nothing full, nothing remembered");
        cache.note(0, &[seen("a", 5)], true, secs(0));
        cache.note(0, &[seen("a", 2), seen("b", 1)], false, secs(0));
        assert_eq!(cache.len(), 1, "b was not full and not known");
        assert_eq!(
            cache.refusal(&[counter("a", 1, 5)], secs(1)),
            None,
            "a now holds 2"
        );
    }

    #[test]
    fn an_answer_from_before_a_refund_or_reset_is_not_noted() {
        let cache = LocalCache::new(10, AGE);
        let epoch = cache.epoch();
        forget(&cache, &["a"]);
        cache.note(epoch, &[seen("a", 5)], true, secs(0));
        assert_eq!(cache.len(), 0, "a stale full answer came back");
        cache.note(cache.epoch(), &[seen("a", 5)], true, secs(0));
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn forgotten_keys_never_grow_the_order_without_bound() {
        let cache = LocalCache::new(4, AGE);
        for round in 0..100 {
            let key = format!("k{round}");
            cache.note(cache.epoch(), &[seen(&key, 1)], true, secs(0));
            forget(&cache, &[key.as_str()]);
        }
        assert!(cache.read().order_len() <= 8);
    }

    #[test]
    fn forgetting_every_counter_leaves_the_cache_empty() {
        let cache = LocalCache::new(10, AGE);
        assert!(cache.is_empty());
        cache.note(0, &[seen("a", 5), seen("b", 1)], true, secs(0));
        assert!(!cache.is_empty());
        forget(&cache, &["a", "x"]);
        assert!(!cache.is_empty(), "b is still known");
        forget(&cache, &["b"]);
        assert!(
            cache.is_empty(),
            "the entry count (the cache_entries gauge, the empty fast path) was not updated"
        );
    }

    #[test]
    fn holds_at_most_its_capacity_evicting_the_oldest() {
        let cache = LocalCache::new(3, AGE);
        for key in ["a", "b", "c", "d"] {
            cache.note(0, &[seen(key, 1)], true, secs(0));
        }
        assert_eq!(cache.len(), 3);
        assert_eq!(
            cache.refusal(&[counter("a", 1, 1)], secs(1)),
            None,
            "evicted"
        );
        assert!(cache.refusal(&[counter("d", 1, 1)], secs(1)).is_some());
    }

    #[test]
    fn an_entry_answers_before_its_age_and_not_from_it_on() {
        let age = Duration::from_secs(2);
        let cache = LocalCache::new(10, age);
        let full = [counter("a", 1, 5)];
        let noted = Duration::from_millis(10_500);
        cache.note(0, &[seen("a", 5)], true, noted);
        assert_eq!(cache.refusal(&full, noted), Some(vec![5]), "at once");
        let almost = noted + age - Duration::from_nanos(1);
        assert_eq!(
            cache.refusal(&full, almost),
            Some(vec![5]),
            "within the age"
        );
        assert_eq!(cache.refusal(&full, noted + age), None, "at its age");
        assert_eq!(cache.refusal(&full, secs(30)), None, "past it");
        // The store's next answer notes it afresh.
        cache.note(cache.epoch(), &[seen("a", 5)], true, secs(30));
        assert_eq!(cache.refusal(&full, secs(31)), Some(vec![5]));
        assert_eq!(cache.refusal(&full, secs(32)), None);
    }

    #[test]
    fn an_entry_noted_after_now_answers_no_more() {
        // A wall clock set back: the entry's age cannot be told.
        let cache = LocalCache::new(10, Duration::from_secs(2));
        cache.note(0, &[seen("a", 5)], true, secs(20));
        assert_eq!(cache.refusal(&[counter("a", 1, 5)], secs(19)), None);
    }

    #[test]
    fn a_check_answers_only_while_every_counter_of_it_does() {
        let cache = LocalCache::new(10, Duration::from_secs(2));
        let both = [counter("a", 1, 5), counter("b", 1, 100)];
        cache.note(0, &[seen("a", 5), seen("b", 7)], true, secs(10));
        // b alone noted afresh: a is still past its age.
        cache.note(0, &[seen("b", 8)], false, secs(11));
        assert_eq!(cache.refusal(&both, secs(11)), Some(vec![5, 8]));
        assert_eq!(cache.refusal(&both, secs(12)), None, "a is 2 s old");
    }
}
