//! [`RetryPolicy`]: the one time budget of a check, and its spaced retries.

use std::future::{Future, poll_fn};
use std::pin::pin;
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use crate::observe::{Op, StoreCalls};
use crate::{Deadline, StoreError};

/// How a [`Limiter`](crate::Limiter) bounds its store calls: the one owner
/// of time for a check.
///
/// A check gets one [`Deadline`], [`worst_case`](RetryPolicy::worst_case)
/// from its start; each attempt gets its own, `timeout` from the attempt's
/// start and never past the check's. The attempt's deadline is handed to the
/// store (which applies nothing past it where it can tell) and bounds the
/// attempt with one timer. Only transient failures are retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Retries after a transient failure (2 by default): at most `retries + 1` attempts.
    pub retries: u32,
    /// Pause between attempts (100 ms by default).
    pub delay: Duration,
    /// Limit on each attempt (50 ms by default); an attempt over it fails as
    /// [`StoreError::Timeout`].
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
    /// The longest a call can take under this policy, failing every attempt on
    /// its timeout: `(retries + 1) × timeout + retries × delay` (350 ms by
    /// default), saturating at [`Duration::MAX`] rather than panicking.
    pub fn worst_case(&self) -> Duration {
        self.timeout
            .saturating_mul(self.retries.saturating_add(1))
            .saturating_add(self.delay.saturating_mul(self.retries))
    }
}

/// The attempts of a store's calls under one retry policy: the policy, its
/// worst case (the budget of every check, told to the store with each
/// attempt) and the store's call metrics. A limiter and deliveries each
/// hold one.
#[derive(Debug)]
pub(crate) struct Attempts {
    policy: RetryPolicy,
    check: Duration,
    metrics: StoreCalls,
}

impl Attempts {
    /// The attempts of calls to the store named `store`, under `policy`.
    pub(crate) fn new(store: &'static str, policy: RetryPolicy) -> Attempts {
        Attempts {
            check: policy.worst_case(),
            policy,
            metrics: StoreCalls::new(store),
        }
    }

    /// The retry policy.
    pub(crate) fn policy(&self) -> RetryPolicy {
        self.policy
    }

    /// The attempts of calls to the same store under `policy` instead.
    pub(crate) fn with_policy(&self, policy: RetryPolicy) -> Attempts {
        Attempts::new(self.metrics.store(), policy)
    }

    /// Runs `call` under the policy: each attempt gets its deadline and is
    /// cut off at it, and is recorded as a call of `op`. With `retry` false
    /// (calls that must not run twice, such as refunds) there is one attempt.
    pub(crate) async fn run<T, F, Fut>(
        &self,
        op: Op,
        retry: bool,
        mut call: F,
    ) -> Result<T, StoreError>
    where
        F: FnMut(Deadline) -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let policy = &self.policy;
        let (mut started, mut wall) = now();
        // The check's deadline; the first attempt's (one timeout) is never
        // past it, so it is needed only once an attempt fails.
        let (first, first_wall) = (started, wall);
        let mut check = None;
        let mut retries = 0;
        loop {
            let mut deadline = Deadline::starting(started, wall, policy.timeout).within(self.check);
            if retries > 0 {
                let check =
                    *check.get_or_insert_with(|| Deadline::starting(first, first_wall, self.check));
                deadline = deadline.min(check);
            }
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
                        let at = tokio::time::Instant::from_std(deadline.instant());
                        match tokio::time::timeout_at(at, attempt).await {
                            Ok(result) => result,
                            Err(_) => Err(StoreError::Timeout(policy.timeout)),
                        }
                    }
                }
            };
            self.metrics
                .record(op, started.elapsed(), result.as_ref().map(drop));
            match result {
                Err(e) if retry && e.is_transient() && retries < policy.retries => {
                    retries += 1;
                    tracing::debug!(
                        kind = e.kind(),
                        retries,
                        "rate limit store call failed; retrying"
                    );
                    tokio::time::sleep(policy.delay).await;
                    (started, wall) = now();
                }
                result => return result,
            }
        }
    }
}

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

    fn quick() -> RetryPolicy {
        RetryPolicy {
            retries: 2,
            delay: Duration::from_millis(1),
            timeout: Duration::from_millis(20),
        }
    }

    #[tokio::test]
    async fn transient_failures_are_retried_twice_and_others_never() {
        let attempts = AtomicU32::new(0);
        let transient = Attempts::new("test", quick())
            .run(Op::Count, true, |_| async {
                attempts.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(StoreError::Connection("refused".into()))
            })
            .await;
        assert_eq!(transient.map_err(|e| e.kind()), Err("connection"));
        assert_eq!(attempts.swap(0, Ordering::SeqCst), 3);
        let permanent = Attempts::new("test", quick())
            .run(Op::Count, true, |_| async {
                attempts.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(StoreError::Backend("no".into()))
            })
            .await;
        assert!(permanent.is_err());
        assert_eq!(attempts.swap(0, Ordering::SeqCst), 1);
        let once = Attempts::new("test", quick())
            .run(Op::Count, false, |_| async {
                attempts.fetch_add(1, Ordering::SeqCst);
                Err::<(), _>(StoreError::Connection("refused".into()))
            })
            .await;
        assert!(once.is_err());
        assert_eq!(
            attempts.load(Ordering::SeqCst),
            1,
            "a one-shot call ran twice"
        );
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
    async fn a_timed_out_attempt_is_dropped_at_its_timeout_not_after_the_pause() {
        // A store's future holds its connection until it is dropped: an
        // attempt cut off at 20 ms must let go then, not after the 1 s
        // pause before the next attempt.
        let policy = RetryPolicy {
            retries: 1,
            delay: Duration::from_secs(1),
            timeout: Duration::from_millis(20),
        };
        let drops = Arc::new(Mutex::new(Vec::new()));
        let started = tokio::time::Instant::now();
        let result = Attempts::new("test", policy)
            .run(Op::Count, true, |_| {
                let lease = Lease(Arc::clone(&drops));
                async move {
                    let _lease = lease;
                    std::future::pending::<Result<(), StoreError>>().await
                }
            })
            .await;
        assert_eq!(result.map_err(|e| e.kind()), Err("timeout"));
        let drops = drops.lock().unwrap_or_else(|p| p.into_inner()).clone();
        assert_eq!(drops.len(), 2, "two attempts");
        // Time is paused: these are the timers' instants, to the millisecond.
        let [first, second] = [0, 1].map(|i| drops[i].duration_since(started));
        assert!(
            first <= Duration::from_millis(21),
            "the attempt cut off at 20 ms was dropped only after {first:?}"
        );
        assert!(
            second >= Duration::from_millis(1_040),
            "the second attempt ran before the pause ended: {second:?}"
        );
    }

    #[tokio::test]
    async fn attempts_that_overran_leave_the_last_one_only_what_the_check_has_left() {
        // Each attempt blocks its thread for twice its timeout (a stalled
        // machine) before failing: the third starts past the check's
        // bound, so its deadline must be the check's, not a timeout from
        // its own start.
        let policy = quick();
        let mut deadlines = Vec::new();
        let mut first_call = None;
        let result = Attempts::new("test", policy)
            .run(Op::Count, true, |deadline| {
                first_call.get_or_insert_with(std::time::Instant::now);
                deadlines.push(deadline);
                async {
                    std::thread::sleep(2 * Duration::from_millis(20));
                    Err::<(), _>(StoreError::Connection("stalled".into()))
                }
            })
            .await;
        assert_eq!(result.map_err(|e| e.kind()), Err("connection"));
        assert_eq!(deadlines.len(), 3);
        let Some(first_call) = first_call else {
            panic!("the store was never called")
        };
        assert!(
            deadlines[2].instant() <= first_call + policy.worst_case(),
            "the last attempt outlives the check by {:?}",
            deadlines[2].instant() - (first_call + policy.worst_case())
        );
    }

    #[tokio::test]
    async fn each_attempt_gets_a_deadline_within_the_check_and_is_cut_off_at_it() {
        let policy = quick();
        let started = std::time::Instant::now();
        let mut deadlines = Vec::new();
        let result = Attempts::new("test", policy)
            .run(Op::Count, true, |deadline| {
                deadlines.push(deadline);
                std::future::pending::<Result<(), StoreError>>()
            })
            .await;
        assert_eq!(result.map_err(|e| e.kind()), Err("timeout"));
        assert_eq!(deadlines.len(), 3);
        let check = started + policy.worst_case() + Duration::from_millis(5);
        for pair in deadlines.windows(2) {
            assert!(pair[0] < pair[1], "each attempt has a later deadline");
        }
        for deadline in &deadlines {
            assert!(deadline.instant() <= check, "an attempt outlives the check");
            assert_eq!(
                deadline.check_budget(),
                policy.worst_case(),
                "the store is not told the check's budget"
            );
        }
        assert!(
            deadlines[0].instant() <= started + policy.timeout + Duration::from_millis(5),
            "the first attempt's deadline is one timeout away"
        );
    }
}
