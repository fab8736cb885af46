//! The closed loop: `concurrency` tasks, each running one check after another.

use std::future::Future;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

/// How one check ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Allowed (after a store round trip).
    Allowed,
    /// Refused by the store.
    Refused,
    /// Refused by the limiter's local cache, without a store round trip.
    RefusedLocally,
    /// Failed (counted, not fatal).
    Error,
}

/// One side of the comparison: something that runs one check for a principal.
pub(crate) trait Side: Clone + Send + Sync + 'static {
    /// Runs one check.
    fn check(&self, principal: u64) -> impl Future<Output = Outcome> + Send;
}

/// Which principals the checks hit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Keys {
    /// Distinct principals.
    pub(crate) count: u64,
    /// Whether 90% of the checks go to principal 0.
    pub(crate) hot: bool,
}

impl Keys {
    fn pick(&self, rng: &mut u64) -> u64 {
        // xorshift64*: fast, and good enough to spread keys.
        *rng ^= *rng >> 12;
        *rng ^= *rng << 25;
        *rng ^= *rng >> 27;
        let x = rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        if self.hot && !x.is_multiple_of(10) {
            0
        } else {
            (x >> 16) % self.count.max(1)
        }
    }
}

/// What one measured run saw.
#[derive(Clone, Debug)]
pub(crate) struct Sample {
    /// Checks that succeeded (allowed or refused).
    pub(crate) checks: u64,
    /// Checks refused, by the store or locally.
    pub(crate) refused: u64,
    /// Checks refused locally, without a store round trip.
    pub(crate) local: u64,
    /// Checks that failed.
    pub(crate) errors: u64,
    /// Wall time of the run.
    pub(crate) elapsed: Duration,
    /// Latency of every check, in microseconds.
    pub(crate) latency: Histogram<u64>,
}

impl Sample {
    /// Successful checks per second.
    pub(crate) fn rate(&self) -> f64 {
        self.checks as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// A latency quantile, in milliseconds.
    pub(crate) fn millis(&self, quantile: f64) -> f64 {
        self.latency.value_at_quantile(quantile) as f64 / 1_000.0
    }
}

#[allow(
    clippy::expect_used,
    reason = "constant bounds that hdrhistogram accepts"
)]
fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("1 µs to 60 s at 3 significant figures")
}

/// Runs `side` with `concurrency` checks in flight for `duration`.
pub(crate) async fn run<S: Side>(
    side: &S,
    concurrency: usize,
    duration: Duration,
    keys: Keys,
) -> Sample {
    let started = Instant::now();
    let deadline = started + duration;
    let tasks: Vec<_> = (0..concurrency.max(1))
        .map(|task| {
            let side = side.clone();
            tokio::spawn(async move {
                let mut latency = histogram();
                let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ ((task as u64 + 1) << 17);
                let mut counts = [0u64; 4];
                while Instant::now() < deadline {
                    let principal = keys.pick(&mut rng);
                    let t = Instant::now();
                    let outcome = side.check(principal).await;
                    latency.saturating_record(t.elapsed().as_micros() as u64);
                    counts[outcome as usize] += 1;
                }
                (counts, latency)
            })
        })
        .collect();
    let mut sample = Sample {
        checks: 0,
        refused: 0,
        local: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latency: histogram(),
    };
    for task in tasks {
        match task.await {
            Ok((counts, latency)) => {
                let [allowed, refused, local, errors] = counts;
                sample.checks += allowed + refused + local;
                sample.refused += refused + local;
                sample.local += local;
                sample.errors += errors;
                let _ = sample.latency.add(&latency);
            }
            Err(_) => sample.errors += 1,
        }
    }
    sample.elapsed = started.elapsed();
    sample
}
