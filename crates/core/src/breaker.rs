//! [`BreakerPolicy`]: when a limiter stops calling a store that is down,
//! and how it learns that the store is back.
//!
//! A breaker is closed while the store answers. Once
//! [`failures`](BreakerPolicy::failures) store calls in a row have found
//! no store (the connection refused or broken, no answer by the check's
//! deadline), over at least [`failing_for`](BreakerPolicy::failing_for)
//! with no call answered in between, it opens (a burst of calls that time
//! out together on a slow, live store does not open it: the next answer
//! starts the count over): checks skip the store and
//! are answered at once by their policy, fail-open allowed (a degraded
//! verdict), fail-closed [`Error::Unavailable`](crate::Error::Unavailable)
//! with [`StoreError::Open`]. While open, one call at a time is let
//! through to the store as a probe, the first call at least
//! [`probe_every`](BreakerPolicy::probe_every) after the breaker opened or
//! the last probe failed; the first call that succeeds closes it. A limited
//! answer is a success; a store that answers, even with an error (busy,
//! read-only, an unreadable reply), answers at once, so it does not count:
//! the breaker spares callers waiting for a store that is not there.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::StoreError;
use crate::deadline::now;
use crate::observe::BreakerMetrics;

/// When a limiter's breaker opens, and how often it probes while open.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerPolicy {
    /// Calls in a row that found no store (refused, broken or unanswered
    /// connections) that open the breaker (5 by default); 0 never opens it.
    pub failures: u32,
    /// The least time from the first of those calls' failures to the one
    /// that opens the breaker (500 ms by default).
    pub failing_for: Duration,
    /// The least time between two probes while open (200 ms by default).
    pub probe_every: Duration,
}

impl Default for BreakerPolicy {
    fn default() -> BreakerPolicy {
        BreakerPolicy {
            failures: 5,
            failing_for: Duration::from_millis(500),
            probe_every: Duration::from_millis(200),
        }
    }
}

/// Whether a call may go to the store.
#[derive(Debug)]
pub(crate) enum Admit<'a> {
    /// The breaker is closed: call, retrying as the policy says.
    Call,
    /// The breaker is open and this call is its probe: one attempt.
    Probe(Probe<'a>),
    /// The breaker is open: answer without the store.
    Skip,
}

/// One store's breaker.
#[derive(Debug)]
pub(crate) struct Breaker {
    policy: BreakerPolicy,
    /// Whether it is open; read without the lock by every call.
    open: AtomicBool,
    /// Calls in a row that found no store, while closed.
    failures: AtomicU32,
    probes: Mutex<Probes>,
    metrics: BreakerMetrics,
}

#[derive(Debug)]
struct Probes {
    /// When the current run of failures began.
    failing_since: Instant,
    /// When the next probe may go.
    next: Instant,
    /// Whether a probe is in flight.
    running: bool,
}

impl Breaker {
    pub(crate) fn new(store: &'static str, policy: BreakerPolicy) -> Breaker {
        let metrics = BreakerMetrics::new(store);
        metrics.closed_at_start();
        Breaker {
            policy,
            open: AtomicBool::new(false),
            failures: AtomicU32::new(0),
            probes: Mutex::new(Probes {
                failing_since: now(),
                next: now(),
                running: false,
            }),
            metrics,
        }
    }

    pub(crate) fn policy(&self) -> BreakerPolicy {
        self.policy
    }

    /// Whether the breaker is open.
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// Whether a call may go to the store now.
    pub(crate) fn admit(&self) -> Admit<'_> {
        if !self.is_open() {
            return Admit::Call;
        }
        let mut probes = self.lock();
        if probes.running || now() < probes.next {
            return Admit::Skip;
        }
        probes.running = true;
        Admit::Probe(Probe(self))
    }

    /// Records what a store call gave, and whether it was the probe.
    pub(crate) fn record<T>(&self, result: &Result<T, StoreError>, probe: bool) {
        match result {
            Err(StoreError::Connection(_) | StoreError::Timeout(_)) => self.failed(probe),
            _ => self.succeeded(),
        }
    }

    /// Records a call answered without the store, under `policy`'s outcome.
    pub(crate) fn skipped(&self, fail_open: bool) {
        self.metrics.skipped(fail_open);
    }

    fn succeeded(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
        if self.is_open() {
            let _probes = self.lock();
            if self.open.swap(false, Ordering::AcqRel) {
                self.metrics.closed();
                tracing::info!(store = self.metrics.store(), "rate limit store is back");
            }
        }
    }

    fn failed(&self, probe: bool) {
        if self.is_open() {
            // Calls sent before it opened fail late; only the probe's
            // failure sets the next probe back.
            if probe {
                self.lock().next = now() + self.policy.probe_every;
            }
            return;
        }
        if self.policy.failures == 0 {
            return;
        }
        // Counted under the lock, so that the failure that starts a run
        // sets its start before any later one of the run reads it.
        let mut probes = self.lock();
        let failures = self
            .failures
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        let now = now();
        if failures == 1 {
            probes.failing_since = now;
        }
        let lasting = now.saturating_duration_since(probes.failing_since);
        if failures < self.policy.failures || lasting < self.policy.failing_for {
            return;
        }
        if !self.open.swap(true, Ordering::AcqRel) {
            probes.next = now + self.policy.probe_every;
            self.failures.store(0, Ordering::Relaxed);
            self.metrics.opened();
            tracing::warn!(
                store = self.metrics.store(),
                failures,
                "rate limit store keeps failing; answering checks by their policy until it is back"
            );
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Probes> {
        self.probes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The probe in flight; the next call may probe once it is dropped.
#[derive(Debug)]
pub(crate) struct Probe<'a>(&'a Breaker);

impl Drop for Probe<'_> {
    fn drop(&mut self) {
        self.0.lock().running = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn down() -> Result<(), StoreError> {
        Err(StoreError::Connection("refused".into()))
    }

    fn breaker() -> Breaker {
        Breaker::new("test", BreakerPolicy::default())
    }

    /// Records `n` failures spread over the policy's 500 ms.
    async fn failing(breaker: &Breaker, n: u32) {
        for i in 0..n {
            if i > 0 {
                tokio::time::advance(Duration::from_millis(500) / (n - 1).max(1)).await;
            }
            breaker.record(&down(), false);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn opens_after_failures_in_a_row_and_a_success_starts_over() {
        let breaker = breaker();
        failing(&breaker, 4).await;
        breaker.record(&Ok(()), false);
        // Past the run's 500 ms: without the success, four more would open it.
        tokio::time::advance(Duration::from_millis(500)).await;
        for _ in 0..4 {
            breaker.record(&down(), false);
        }
        assert!(matches!(breaker.admit(), Admit::Call), "opened early");
        for answered in [
            StoreError::Backend("error reply".into()),
            StoreError::Busy("TRYAGAIN".into()),
        ] {
            breaker.record(&Err::<(), _>(answered), false);
            for _ in 0..4 {
                breaker.record(&down(), false);
            }
            assert!(
                matches!(breaker.admit(), Admit::Call),
                "an answer from the store counted as a failure"
            );
        }
        tokio::time::advance(Duration::from_millis(500)).await;
        breaker.record(&down(), false);
        assert!(matches!(breaker.admit(), Admit::Skip), "not open after 5");
    }

    #[tokio::test(start_paused = true)]
    async fn failures_that_come_together_do_not_open_it() {
        let breaker = breaker();
        for _ in 0..50 {
            breaker.record(&down(), false);
        }
        tokio::time::advance(Duration::from_millis(499)).await;
        breaker.record(&down(), false);
        assert!(
            matches!(breaker.admit(), Admit::Call),
            "opened on a burst of timeouts"
        );
        tokio::time::advance(Duration::from_millis(1)).await;
        breaker.record(&down(), false);
        assert!(
            matches!(breaker.admit(), Admit::Skip),
            "not open after 500 ms of failures"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn open_it_lets_one_probe_through_at_a_time_and_a_success_closes_it() {
        let breaker = breaker();
        failing(&breaker, 5).await;
        assert!(matches!(breaker.admit(), Admit::Skip));
        tokio::time::advance(Duration::from_millis(199)).await;
        assert!(matches!(breaker.admit(), Admit::Skip), "probed early");
        tokio::time::advance(Duration::from_millis(1)).await;
        let Admit::Probe(probe) = breaker.admit() else {
            panic!("no probe once due")
        };
        assert!(matches!(breaker.admit(), Admit::Skip), "two probes at once");
        breaker.record(&down(), true);
        drop(probe);
        assert!(
            matches!(breaker.admit(), Admit::Skip),
            "no pause after a failed probe"
        );
        tokio::time::advance(Duration::from_millis(200)).await;
        let Admit::Probe(probe) = breaker.admit() else {
            panic!("no second probe")
        };
        breaker.record(&Ok(()), true);
        drop(probe);
        assert!(
            matches!(breaker.admit(), Admit::Call),
            "a success did not close it"
        );
        failing(&breaker, 4).await;
        assert!(
            matches!(breaker.admit(), Admit::Call),
            "reopened on fewer than 5"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn late_failures_of_calls_sent_before_it_opened_do_not_delay_the_probe() {
        let breaker = breaker();
        failing(&breaker, 5).await;
        for _ in 0..10 {
            tokio::time::advance(Duration::from_millis(20)).await;
            breaker.record(&down(), false);
        }
        assert!(
            matches!(breaker.admit(), Admit::Probe(_)),
            "the probe waits for calls sent before it opened"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_probe_lets_the_next_call_probe() {
        let breaker = breaker();
        failing(&breaker, 5).await;
        tokio::time::advance(Duration::from_millis(200)).await;
        let Admit::Probe(probe) = breaker.admit() else {
            panic!("no probe")
        };
        drop(probe);
        assert!(
            matches!(breaker.admit(), Admit::Probe(_)),
            "a cancelled probe blocks probing"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn zero_failures_never_opens() {
        let breaker = Breaker::new(
            "test",
            BreakerPolicy {
                failures: 0,
                ..BreakerPolicy::default()
            },
        );
        for _ in 0..100 {
            breaker.record(&down(), false);
        }
        assert!(matches!(breaker.admit(), Admit::Call));
    }
}
