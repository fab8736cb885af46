//! [`RetryPolicy`]: the one time budget of a check, and its spaced retries
//! after failures.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use crate::breaker::{Admit, Breaker, BreakerPolicy};
use crate::observe::{Op, StoreCalls};
use crate::{Deadline, StoreError};

/// How a [`Limiter`](crate::Limiter) bounds its store calls: the one owner
/// of time for a check.
///
/// A check gets one [`Deadline`], [`worst_case`](RetryPolicy::worst_case)
/// from its start, which every attempt of it shares: the store is handed it
/// (and applies nothing past it and its skew margin where it can tell), and
/// one timer cuts the check off 40 ms after it, when no answer of a call
/// the store applied can still be on its way. An attempt is retried only when it *failed*
/// transiently (the connection refused or broken, the store busy), never
/// merely because its answer is late: a late answer is awaited until the
/// check's deadline, since a store may have applied a call whose answer is
/// still on its way. A retry carries the call's
/// [`CheckId`](crate::CheckId), so a store that applied an attempt whose
/// answer was lost answers the retry with what it applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after a transient failure (2 by default): at most `retries + 1` attempts.
    pub retries: u32,
    /// Pause between attempts (100 ms by default).
    pub delay: Duration,
    /// What each attempt is given in the check's budget (50 ms by
    /// default). An attempt is not cut off at it: it is awaited until the
    /// check's deadline.
    pub timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            retries: 2,
            delay: Duration::from_millis(100),
            timeout: Duration::from_millis(50),
        }
    }
}

impl RetryPolicy {
    /// The time budget of a check: `(retries + 1) × timeout + retries ×
    /// delay` (350 ms by default), saturating at [`Duration::MAX`] rather
    /// than panicking. No check waits longer for its store than this and
    /// 40 ms for an answer on its way.
    pub fn worst_case(&self) -> Duration {
        self.timeout
            .saturating_mul(self.retries.saturating_add(1))
            .saturating_add(self.delay.saturating_mul(self.retries))
    }
}

/// The attempts of a store's calls under one retry policy: the policy, its
/// worst case (the budget of every check, told to the store with each
/// attempt), the store's breaker and its call metrics. A limiter and
/// deliveries each hold one.
#[derive(Debug)]
pub(crate) struct Attempts {
    policy: RetryPolicy,
    check: Duration,
    breaker: Breaker,
    metrics: StoreCalls,
}

impl Attempts {
    /// The attempts of calls to the store named `store`, under `policy`
    /// and `breaker`.
    pub(crate) fn new(
        store: &'static str,
        policy: RetryPolicy,
        breaker: BreakerPolicy,
    ) -> Attempts {
        Attempts {
            check: policy.worst_case(),
            policy,
            breaker: Breaker::new(store, breaker),
            metrics: StoreCalls::new(store),
        }
    }

    /// The retry policy.
    pub(crate) fn policy(&self) -> RetryPolicy {
        self.policy
    }

    /// The store's breaker.
    pub(crate) fn breaker(&self) -> &Breaker {
        &self.breaker
    }

    /// The attempts of calls to the same store under `policy` instead (and
    /// a breaker of their own, under the same breaker policy).
    pub(crate) fn with_policy(&self, policy: RetryPolicy) -> Attempts {
        Attempts::new(self.metrics.store(), policy, self.breaker.policy())
    }

    /// Runs `call` under the policy: every attempt gets the check's
    /// deadline and is recorded as a call of `op`; an attempt that failed
    /// transiently is retried while the check has time for the pause and
    /// more. While the breaker is open the store is not called
    /// ([`StoreError::Open`]), except by one probe at a time, which has
    /// one attempt.
    pub(crate) async fn run<T, F, Fut>(&self, op: Op, mut call: F) -> Result<T, StoreError>
    where
        F: FnMut(Deadline) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let probe = match self.breaker.admit() {
            Admit::Call => None,
            Admit::Probe(probe) => Some(probe),
            Admit::Skip => {
                // Answered without the store, but still a turn given back
                // to the scheduler: a loop of checks cannot starve it.
                tokio::task::yield_now().await;
                return Err(StoreError::Open);
            }
        };
        let policy = &self.policy;
        let (mut started, wall) = now();
        let deadline = Deadline::starting(started, wall, self.check);
        let mut retries = 0;
        loop {
            // The attempt is dropped (cancelled) as soon as it has its result.
            let result = {
                let mut attempt = pin!(call(deadline));
                // A store that answers at once (from memory) needs no timer:
                // 132 instructions of a 4-limit check against the memory
                // store, 1.6 % (3.4 % at one limit), by tollgate-instructions.
                let first = poll_fn(|cx| Poll::Ready(attempt.as_mut().poll(cx))).await;
                match first {
                    Poll::Ready(result) => result,
                    Poll::Pending => {
                        let at = deadline.instant() + ANSWER_GRACE;
                        let at = tokio::time::Instant::from_std(at);
                        match tokio::time::timeout_at(at, attempt).await {
                            Ok(result) => result,
                            Err(_) => Err(StoreError::Timeout(self.check)),
                        }
                    }
                }
            };
            self.metrics
                .record(op, started.elapsed(), result.as_ref().map(drop));
            self.breaker.record(&result, probe.is_some());
            match result {
                Err(e)
                    if e.is_transient()
                        && probe.is_none()
                        && retries < policy.retries
                        && deadline.remaining() > policy.delay =>
                {
                    retries += 1;
                    tracing::debug!(
                        kind = e.kind(),
                        retries,
                        "rate limit store call failed; retrying"
                    );
                    tokio::time::sleep(policy.delay).await;
                    started = now().0;
                }
                result => return result,
            }
        }
    }
}

/// How long past the check's deadline an attempt's answer is still
/// awaited (40 ms): a store applies a call until
/// [`Deadline::SKEW_MARGIN`] past the deadline, and the answer of a call
/// applied then needs as long again to come back. An answer given up on
/// is a call that may have spent without being served.
pub(crate) const ANSWER_GRACE: Duration = Deadline::SKEW_MARGIN.saturating_mul(2);

/// The time now, on the monotonic clock (as deadlines read it) and the
/// wall clock.
fn now() -> (Instant, SystemTime) {
    (crate::deadline::now(), SystemTime::now())
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn worst_case_saturates_instead_of_panicking() {
        assert_eq!(
            RetryPolicy::default().worst_case(),
            Duration::from_millis(350)
        );
        let huge = RetryPolicy {
            retries: u32::MAX,
            delay: Duration::MAX,
            timeout: Duration::MAX,
        };
        assert_eq!(huge.worst_case(), Duration::MAX);
    }

    fn attempts(policy: RetryPolicy) -> Attempts {
        Attempts::new("test", policy, BreakerPolicy::default())
    }

    fn quick() -> RetryPolicy {
        RetryPolicy {
            retries: 2,
            delay: Duration::from_millis(1),
            timeout: Duration::from_millis(20),
        }
    }

    #[test]
    fn attempts_under_another_retry_policy_keep_the_breaker_policy() {
        let breaker = BreakerPolicy {
            failures: 1,
            failing_for: Duration::ZERO,
            probe_every: Duration::from_secs(7),
        };
        let other = Attempts::new("test", RetryPolicy::default(), breaker).with_policy(quick());
        assert_eq!(other.policy(), quick());
        assert_eq!(other.breaker().policy(), breaker);
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_twice_and_others_never() {
        let calls = AtomicU32::new(0);
        let transient = attempts(quick())
            .run(Op::Count, |_| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(StoreError::Connection("refused".into()))
            })
            .await;
        assert_eq!(transient.map_err(|e| e.kind()), Err("connection"));
        assert_eq!(calls.swap(0, Ordering::SeqCst), 3);
        let permanent = attempts(quick())
            .run(Op::Count, |_| async {
                calls.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(StoreError::Backend("no".into()))
            })
            .await;
        assert!(permanent.is_err());
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_answer_is_awaited_until_the_checks_deadline_not_retried() {
        // Answered 300 ms after it was sent, six attempt timeouts late but
        // within the check's 350 ms: the store may have applied it, so it
        // is the answer, and no second attempt is sent.
        let calls = AtomicU32::new(0);
        let started = tokio::time::Instant::now();
        let result = attempts(RetryPolicy::default())
            .run(Op::Count, |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                async {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    Ok::<_, StoreError>(7)
                }
            })
            .await;
        assert_eq!(result.ok(), Some(7));
        assert_eq!(calls.load(Ordering::SeqCst), 1, "a slow answer was retried");
        assert_eq!(started.elapsed(), Duration::from_millis(300));
    }

    /// Records when it was dropped, as a store's connection lease would.
    struct Lease(Arc<Mutex<Vec<tokio::time::Instant>>>);

    impl Drop for Lease {
        fn drop(&mut self) {
            let mut drops = self.0.lock().unwrap_or_else(|p| p.into_inner());
            drops.push(tokio::time::Instant::now());
        }
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_just_past_the_deadline_is_still_taken() {
        // A store may apply a call until 20 ms past the deadline: its
        // answer, 30 ms past, is the answer, not a timeout.
        let result = attempts(RetryPolicy::default())
            .run(Op::Count, |_| async {
                tokio::time::sleep(Duration::from_millis(380)).await;
                Ok::<_, StoreError>(7)
            })
            .await;
        assert_eq!(result.ok(), Some(7), "an answer on its way was given up");
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_without_answer_is_dropped_40_ms_after_the_checks_deadline() {
        let drops = Arc::new(Mutex::new(Vec::new()));
        let started = tokio::time::Instant::now();
        let mut deadlines = Vec::new();
        let result = attempts(RetryPolicy::default())
            .run(Op::Count, |deadline| {
                deadlines.push(deadline);
                let lease = Lease(Arc::clone(&drops));
                async move {
                    let _lease = lease;
                    std::future::pending::<Result<(), StoreError>>().await
                }
            })
            .await;
        assert_eq!(result.map_err(|e| e.kind()), Err("timeout"));
        let drops = drops.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert_eq!(drops.len(), 1, "an attempt without answer was retried");
        // Time is paused: this is the timer's instant, to the millisecond.
        assert_eq!(drops[0].duration_since(started), Duration::from_millis(390));
        assert_eq!(deadlines[0].check_budget(), Duration::from_millis(350));
    }

    #[tokio::test(start_paused = true)]
    async fn every_attempt_shares_the_checks_deadline_and_none_starts_without_time_for_it() {
        // Each attempt fails after 100 ms: the second starts at 200 ms and
        // fails at 300 ms, when the check has 50 ms left, less than the
        // pause: a third is not made.
        let mut deadlines = Vec::new();
        let started = tokio::time::Instant::now();
        let result = attempts(RetryPolicy::default())
            .run(Op::Count, |deadline| {
                deadlines.push(deadline);
                async {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Err::<(), _>(StoreError::Connection("broken".into()))
                }
            })
            .await;
        assert_eq!(result.map_err(|e| e.kind()), Err("connection"));
        assert_eq!(deadlines.len(), 2, "an attempt started with no time left");
        assert_eq!(
            deadlines[0], deadlines[1],
            "a retry got a deadline of its own"
        );
        assert_eq!(
            tokio::time::Instant::from_std(deadlines[0].instant()) - started,
            Duration::from_millis(350)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_breaker_skips_the_store_and_its_probe_has_one_attempt() {
        let calls = AtomicU32::new(0);
        let attempts = attempts(quick());
        let down = || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(StoreError::Connection("refused".into()))
        };
        let _ = attempts.run(Op::Count, |_| down()).await;
        // Failures over at least 500 ms open it.
        tokio::time::advance(Duration::from_millis(500)).await;
        let _ = attempts.run(Op::Count, |_| down()).await;
        assert_eq!(calls.swap(0, Ordering::SeqCst), 6);
        let skipped = attempts.run(Op::Count, |_| down()).await;
        assert_eq!(skipped.map_err(|e| e.kind()), Err("breaker-open"));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "the store was called while open"
        );
        tokio::time::advance(Duration::from_millis(200)).await;
        let probed = attempts.run(Op::Count, |_| down()).await;
        assert_eq!(probed.map_err(|e| e.kind()), Err("connection"));
        assert_eq!(calls.swap(0, Ordering::SeqCst), 1, "a probe was retried");
        tokio::time::advance(Duration::from_millis(200)).await;
        let back = attempts
            .run(Op::Count, |_| async { Ok::<_, StoreError>(1) })
            .await;
        assert_eq!(back.ok(), Some(1));
        let closed = attempts.run(Op::Count, |_| down()).await;
        assert_eq!(closed.map_err(|e| e.kind()), Err("connection"));
        assert_eq!(
            calls.load(Ordering::SeqCst),
            3,
            "not closed by the probe's success"
        );
    }
}
