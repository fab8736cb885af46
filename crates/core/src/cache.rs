//! [`LocalCache`]: full counters remembered in bounded memory, so that a
//! call that cannot fit is refused without a store round trip.
//!
//! A counter whose window is full stays full until the window ends (counts
//! only grow, except by a refund or an operator reset). So when a check
//! finds a counter that cannot take its cost, the limiter remembers every
//! counter of that check as it was seen, and refuses a later check of the
//! same counters locally while one of them still cannot take its cost. It
//! never admits anything: a check it cannot answer goes to the store. It
//! may refuse a call that a refund or reset on *another* instance made room
//! for, until the window ends; refunds and resets through this limiter
//! clear their entries.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::{Counter, Usage, observe};

/// A bounded map of counter keys to the count last seen, oldest evicted first.
#[derive(Debug)]
pub(crate) struct LocalCache {
    capacity: usize,
    inner: Mutex<Inner>,
    /// Bumped by every [`LocalCache::forget`], under the lock: a store
    /// answer obtained before a refund or reset is never noted after it.
    epoch: AtomicU64,
    /// How many counters `inner` holds, so that a check finds an empty
    /// cache without taking the lock (the common case, until an attack).
    entries: AtomicUsize,
}

#[derive(Debug, Default)]
struct Inner {
    /// Counter key → (count last seen, the Unix second its window ends).
    seen: HashMap<String, (u64, u64)>,
    /// Keys in the order they were first remembered (some may have been
    /// forgotten since; they are skipped, and compacted away in time).
    order: VecDeque<String>,
}

impl Inner {
    /// Forgotten keys linger in `order`; drops them now and then
    /// (amortised: at most once per `capacity` insertions), so that `order`
    /// stays within twice the capacity.
    fn compact(&mut self, capacity: usize) {
        if self.order.len() >= 2 * capacity {
            let Inner { seen, order } = self;
            order.retain(|k| seen.contains_key(k));
        }
    }
}

impl LocalCache {
    /// A cache holding at most `capacity` counters.
    pub(crate) fn new(capacity: usize) -> LocalCache {
        LocalCache {
            capacity: capacity.max(1),
            inner: Mutex::default(),
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
    fn counted(&self, inner: &Inner) {
        self.entries.store(inner.seen.len(), Ordering::Release);
        observe::cache_entries(inner.seen.len());
    }

    /// The counts last seen of every counter of a check, when every one is
    /// known and at least one of them cannot take its cost now; `None`
    /// otherwise (the store must answer).
    pub(crate) fn refusal(&self, counters: &[Counter], now: u64) -> Option<Vec<u64>> {
        if self.is_empty() {
            return None;
        }
        let inner = self.lock();
        let mut counts = Vec::with_capacity(counters.len());
        let mut full = false;
        for counter in counters {
            let &(count, ends) = inner.seen.get(&counter.key)?;
            if ends <= now {
                return None;
            }
            full |= !counter.fits(count);
            counts.push(count);
        }
        full.then_some(counts)
    }

    /// Notes what the store answered for a check whose store call began at
    /// `epoch`: each counter's count, until its window resets. Counters
    /// already remembered take the new count; when the check found one of
    /// them `full`, every counter of it is remembered. An answer from before
    /// a refund or reset (an older epoch) is dropped: it may predate the
    /// room the refund made.
    pub(crate) fn note(&self, epoch: u64, usage: &[Usage], full: bool) {
        if !full && self.is_empty() {
            return;
        }
        let mut inner = self.lock();
        if self.epoch.load(Ordering::Acquire) != epoch {
            return;
        }
        for usage in usage {
            let (key, seen) = (usage.counter_key(), (usage.count(), usage.reset()));
            match inner.seen.get_mut(key) {
                Some(entry) => *entry = seen,
                None if !full => {}
                None => {
                    while inner.seen.len() >= self.capacity {
                        let Some(oldest) = inner.order.pop_front() else {
                            break;
                        };
                        inner.seen.remove(&oldest);
                    }
                    inner.compact(self.capacity);
                    inner.seen.insert(key.to_owned(), seen);
                    inner.order.push_back(key.to_owned());
                }
            }
        }
        self.counted(&inner);
    }

    /// Forgets `keys` (after a refund or a reset through this limiter) and
    /// starts a new epoch, so that no answer obtained before it is noted.
    /// Called before the store call and again after it.
    pub(crate) fn forget<'a>(&self, keys: impl IntoIterator<Item = &'a str>) {
        let mut inner = self.lock();
        self.epoch.fetch_add(1, Ordering::AcqRel);
        let mut removed = false;
        for key in keys {
            removed |= inner.seen.remove(key).is_some();
        }
        if removed {
            self.counted(&inner);
        }
    }

    /// How many counters are remembered.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().seen.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Plain values: consistent even after a panic elsewhere.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// What a check saw of counter `key`: `count`, its minute window
    /// ending at second 60.
    fn seen(key: &str, count: u64) -> Usage {
        let rule = crate::Rule::new("r", 1_000, crate::Window::MINUTE);
        let limit = rule.and_then(|r| r.limit::<&str>(&[]));
        let limit = limit.unwrap_or_else(|e| panic!("{e}"));
        Usage::new(&limit, key.to_owned(), count, 0, false)
    }

    fn counter(key: &str, cost: u64, max: u64) -> Counter {
        Counter {
            key: key.into(),
            ttl: Duration::from_secs(60),
            cost,
            max,
        }
    }

    #[test]
    fn refuses_only_what_cannot_fit_and_only_until_the_window_ends() {
        let cache = LocalCache::new(10);
        let full = [counter("a", 1, 5), counter("b", 1, 100)];
        assert_eq!(cache.refusal(&full, 0), None, "nothing known");
        cache.note(0, &[seen("a", 5), seen("b", 7)], true);
        assert_eq!(cache.refusal(&full, 10), Some(vec![5, 7]));
        assert_eq!(cache.refusal(&full, 60), None, "the window ended");
        let roomy = [counter("b", 1, 100)];
        assert_eq!(cache.refusal(&roomy, 10), None, "b alone has room");
        let other = [counter("a", 1, 5), counter("c", 1, 100)];
        assert_eq!(cache.refusal(&other, 10), None, "c is not known");
        cache.forget(["a"]);
        assert_eq!(
            cache.refusal(&full, 10),
            None,
            "a refund or reset clears it"
        );
    }

    #[test]
    fn a_cheaper_call_that_fits_is_not_refused() {
        let cache = LocalCache::new(10);
        cache.note(0, &[seen("t", 950)], true);
        assert_eq!(
            cache.refusal(&[counter("t", 100, 1_000)], 1),
            Some(vec![950])
        );
        assert_eq!(cache.refusal(&[counter("t", 50, 1_000)], 1), None);
    }

    #[test]
    fn later_answers_update_what_is_remembered_and_add_nothing_new() {
        let cache = LocalCache::new(10);
        cache.note(0, &[seen("a", 7)], false);
        assert_eq!(cache.len(), 0, "nothing full, nothing remembered");
        cache.note(0, &[seen("a", 5)], true);
        cache.note(0, &[seen("a", 2), seen("b", 1)], false);
        assert_eq!(cache.len(), 1, "b was not full and not known");
        assert_eq!(
            cache.refusal(&[counter("a", 1, 5)], 1),
            None,
            "a now holds 2"
        );
    }

    #[test]
    fn an_answer_from_before_a_refund_or_reset_is_not_noted() {
        let cache = LocalCache::new(10);
        let epoch = cache.epoch();
        cache.forget(["a"]);
        cache.note(epoch, &[seen("a", 5)], true);
        assert_eq!(cache.len(), 0, "a stale full answer came back");
        cache.note(cache.epoch(), &[seen("a", 5)], true);
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn forgotten_keys_never_grow_the_order_without_bound() {
        let cache = LocalCache::new(4);
        for round in 0..100 {
            let key = format!("k{round}");
            cache.note(cache.epoch(), &[seen(&key, 1)], true);
            cache.forget([key.as_str()]);
        }
        assert!(cache.lock().order.len() <= 8);
    }

    #[test]
    fn forgetting_every_counter_leaves_the_cache_empty() {
        let cache = LocalCache::new(10);
        assert!(cache.is_empty());
        cache.note(0, &[seen("a", 5), seen("b", 1)], true);
        assert!(!cache.is_empty());
        cache.forget(["a", "x"]);
        assert!(!cache.is_empty(), "b is still known");
        cache.forget(["b"]);
        assert!(
            cache.is_empty(),
            "the entry count (the cache_entries gauge, the empty fast path) was not updated"
        );
    }

    #[test]
    fn holds_at_most_its_capacity_evicting_the_oldest() {
        let cache = LocalCache::new(3);
        for key in ["a", "b", "c", "d"] {
            cache.note(0, &[seen(key, 1)], true);
        }
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.refusal(&[counter("a", 1, 1)], 1), None, "evicted");
        assert!(cache.refusal(&[counter("d", 1, 1)], 1).is_some());
    }
}
