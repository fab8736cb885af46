//! Fixed and sliding windows and GCRA against a model: a plain function of
//! the calls and the clock, written from the definitions (a sliding window
//! at `e` seconds into window `i` counts `floor(prev × (W − e) / W) +
//! current`; a GCRA bucket of `max` per `W` and burst `b` admits a cost `c`
//! when `max(tat, now) + c·T − now ≤ b·T`, `T = ⌈W / max⌉` µs; a limited
//! caller waits until the first second its cost fits, found by trying each
//! second).

use std::collections::HashMap;
use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::{Algorithm, Clock, Limit, Limiter, Mode, Policy, Rule, Usage, Verdict, Window};

use crate::Harness;
use crate::checks::concurrency::race;
use crate::support::{block_on, clock, limiter, ok, rule, runner, unique, window};

/// The model's limits: `(name, window, algorithm)`; each case draws its
/// maxes (and the GCRA limit's burst).
const SHAPES: [(&str, u64, Algorithm); 4] = [
    ("model-fixed", 10, Algorithm::Fixed),
    ("model-sliding", 10, Algorithm::Sliding),
    ("model-slow", 30, Algorithm::Sliding),
    // Two minutes: its counter lives at least one interval of real time
    // (stores that keep real time expire it while the check moves its
    // clock), however slow the machine.
    ("model-gcra", 120, Algorithm::Gcra),
];

/// The GCRA limit's index in [`SHAPES`].
const GCRA: usize = 3;

/// One µs-second.
const SECOND: u64 = 1_000_000;

/// One step of a sequence.
#[derive(Clone, Debug)]
enum Step {
    /// A check of some limits (by index into [`SHAPES`]) with their costs.
    Check(Mode, Vec<(usize, u64)>),
    /// A refund of `units` on limit `limit` of an earlier spending verdict
    /// (`which`: any earlier one, modulo how many there are).
    Refund {
        which: usize,
        limit: usize,
        units: u64,
    },
    /// The clock moved `secs` seconds.
    Advance(u64),
    /// The clock moved to the next 10 s boundary, plus `offset` − 1 s
    /// (`f` near 1, 0 and just past it).
    Boundary(u64),
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    let mode = prop_oneof![Just(Mode::Count), Just(Mode::Reserve)];
    let picks = proptest::sample::subsequence(vec![0usize, 1, 2, 3], 1..=4)
        .prop_flat_map(|limits| {
            let n = limits.len();
            (Just(limits), proptest::collection::vec(1..14u64, n))
        })
        .prop_map(|(limits, costs)| limits.into_iter().zip(costs).collect::<Vec<_>>());
    let step = prop_oneof![
        6 => (mode, picks).prop_map(|(mode, picks)| Step::Check(mode, picks)),
        1 => (0..8usize, 0..4usize, 1..10u64)
            .prop_map(|(which, limit, units)| Step::Refund { which, limit, units }),
        2 => (0..25u64).prop_map(Step::Advance),
        2 => (0..3u64).prop_map(Step::Boundary),
    ];
    proptest::collection::vec(step, 1..28)
}

/// The model: every window counter's count, by limit and window index,
/// and the GCRA limit's theoretical arrival time (µs; 0 before any call).
struct Model {
    maxes: [u64; 4],
    burst: u64,
    counts: HashMap<(usize, u64), u64>,
    tat: u64,
}

/// What the model expects of one usage.
#[derive(Debug, PartialEq, Eq)]
struct Expected {
    remaining: i64,
    over: bool,
    /// The wait of a usage that is over.
    retry_after: Option<u64>,
}

impl Model {
    fn count(&self, limit: usize, index: Option<u64>) -> u64 {
        index.map_or(0, |i| self.counts.get(&(limit, i)).copied().unwrap_or(0))
    }

    /// Limit `limit`'s count at `now`: its window's counter, plus, for a
    /// sliding window, the previous one's weighted by what is left of it.
    fn estimate(&self, limit: usize, now: u64) -> u64 {
        let (_, len, algorithm) = SHAPES[limit];
        let index = now / len;
        let current = self.count(limit, Some(index));
        if algorithm == Algorithm::Sliding {
            let previous = self.count(limit, index.checked_sub(1));
            let left = u128::from(len - now % len);
            let weighted = u128::from(previous) * left / u128::from(len);
            return current + u64::try_from(weighted).unwrap_or(u64::MAX);
        }
        current
    }

    /// The GCRA limit's emission interval (µs, rounded up) and burst (µs).
    fn gcra(&self) -> (u64, u64) {
        let interval = (SHAPES[GCRA].1 * SECOND).div_ceil(self.maxes[GCRA]);
        (interval, self.burst * interval)
    }

    /// How long the GCRA bucket needs to drain at `now` (µs).
    fn level(&self, now: u64) -> u64 {
        self.tat.max(now * SECOND) - now * SECOND
    }

    /// Whether a call of `cost` on `limit` fits at `now`.
    fn fits(&self, limit: usize, cost: u64, now: u64) -> bool {
        if limit == GCRA {
            let (interval, burst) = self.gcra();
            return self.level(now) + cost * interval <= burst;
        }
        self.estimate(limit, now) + cost <= self.maxes[limit]
    }

    /// The first second from `now` at which `cost` fits `limit`, nothing
    /// else being counted: each second tried in turn.
    fn wait(&self, limit: usize, now: u64, cost: u64) -> Option<u64> {
        // Windows empty within two; a bucket within its level.
        let longest = 3 * SHAPES[limit].1 + self.level(now) / SECOND;
        (0..=longest).find(|s| self.fits(limit, cost, now + s))
    }

    /// What a usage of `cost` on `limit` says at `now`, as the model stands
    /// (after the call, when it spent): `refused` for a reservation that
    /// was not applied.
    fn expected(&self, limit: usize, now: u64, cost: u64, refused: bool) -> Expected {
        let (_, len, algorithm) = SHAPES[limit];
        let max = self.maxes[limit];
        if algorithm == Algorithm::Gcra {
            let (interval, burst) = self.gcra();
            let level = self.level(now);
            let over = if refused {
                !self.fits(limit, cost, now)
            } else {
                level > burst
            };
            let until_full = level.div_ceil(SECOND).max(1);
            let retry_after = over.then(|| match self.wait(limit, now, cost) {
                Some(wait) if cost <= self.burst => wait.max(1),
                _ => until_full,
            });
            let remaining = (burst as i64 - level as i64).div_euclid(interval as i64);
            return Expected {
                remaining,
                over,
                retry_after,
            };
        }
        let count = self.estimate(limit, now);
        let over = if refused {
            count + cost > max
        } else {
            count > max
        };
        let until_reset = len - now % len;
        let retry_after = over.then(|| match (algorithm, self.wait(limit, now, cost)) {
            (Algorithm::Sliding, Some(wait)) => wait.max(1),
            _ => until_reset,
        });
        Expected {
            remaining: max as i64 - count as i64,
            over,
            retry_after,
        }
    }

    /// A check at `now`: what each usage should say, and whether it spent.
    fn check(&mut self, mode: Mode, picks: &[(usize, u64)], now: u64) -> (Vec<Expected>, bool) {
        // A GCRA bucket is never charged a call it refuses: a count with
        // one is a reservation.
        let mode = match mode {
            Mode::Count if picks.iter().any(|&(l, _)| l == GCRA) => Mode::Reserve,
            mode => mode,
        };
        let fits = picks.iter().all(|&(l, cost)| self.fits(l, cost, now));
        let spends = mode == Mode::Count || fits;
        if spends {
            for &(l, cost) in picks {
                if l == GCRA {
                    let (interval, _) = self.gcra();
                    self.tat = self.tat.max(now * SECOND) + cost * interval;
                } else {
                    *self.counts.entry((l, now / SHAPES[l].1)).or_default() += cost;
                }
            }
        }
        let expected = picks
            .iter()
            .map(|&(l, cost)| self.expected(l, now, cost, !spends))
            .collect();
        (expected, spends)
    }

    /// `back` units given back at `now` on `limit`, spent in window `index`:
    /// a window counter only while that window lasts; the GCRA arrival
    /// time moves back, never before now.
    fn refund(&mut self, limit: usize, back: u64, index: u64, now: u64) {
        if limit == GCRA {
            let (interval, _) = self.gcra();
            if self.tat > 0 {
                self.tat = self.tat.saturating_sub(back * interval).max(now * SECOND);
            }
        } else if index == now / SHAPES[limit].1 {
            let counter = self.counts.entry((limit, index)).or_default();
            *counter -= back.min(*counter);
        }
    }
}

/// What the limiter says of one usage.
fn seen(usage: &Usage) -> Expected {
    Expected {
        remaining: usage.remaining(),
        over: usage.is_over(),
        retry_after: usage.is_over().then(|| usage.retry_after()),
    }
}

/// A spending verdict, what it spent on each limit, and what the model
/// counts as given back of it.
struct Spent {
    verdict: Verdict,
    picks: Vec<(usize, u64)>,
    index: Vec<u64>,
    back: Vec<u64>,
}

/// Random sequences of counts, reservations, refunds and clock moves on a
/// fixed window, two sliding ones and a GCRA bucket (its burst drawn too;
/// a count with it is a reservation), mixed in one call: every verdict
/// (allowed, and per limit remaining, over and the wait) is the model's,
/// and so is what [`Limiter::remaining`] reads at the end.
pub async fn windows_match_the_model<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let maxes = (1..12u64, 1..12u64, 1..30u64, 1..12u64, 0..12u64);
    let result = runner(harness, 40).run(&(maxes, steps()), |((a, b, c, d, burst), steps)| {
        let id = unique();
        let burst = 1 + burst % d;
        let rules: Vec<Rule> = SHAPES
            .iter()
            .zip([a, b, c, d])
            .map(|(&(name, len, algorithm), max)| {
                let rule = rule(name, max, window(len), 1).with_algorithm(algorithm);
                match algorithm {
                    Algorithm::Gcra => ok(rule.with_burst(burst), "burst"),
                    _ => rule,
                }
            })
            .collect();
        let mut model = Model {
            maxes: [a, b, c, d],
            burst,
            counts: HashMap::new(),
            tat: 0,
        };
        let mut spent: Vec<Spent> = Vec::new();
        for step in steps {
            let now = clock.now().as_secs();
            match step {
                Step::Check(mode, picks) => {
                    let limits = limits(&rules, &picks, &id)?;
                    let verdict = block_on(limiter.check(&limits, mode, Policy::FailClosed))
                        .map_err(|e| TestCaseError::fail(format!("check: {e}")))?;
                    let (expected, spends) = model.check(mode, &picks, now);
                    let got: Vec<Expected> = verdict.usage().iter().map(seen).collect();
                    prop_assert_eq!(&got, &expected, "{:?} {:?} at {}", mode, picks, now);
                    prop_assert_eq!(verdict.is_allowed(), !expected.iter().any(|e| e.over));
                    prop_assert_eq!(verdict.has_spent(), spends);
                    if spends {
                        let index = picks.iter().map(|&(l, _)| now / SHAPES[l].1).collect();
                        let back = vec![0; picks.len()];
                        spent.push(Spent {
                            verdict,
                            picks,
                            index,
                            back,
                        });
                    }
                }
                Step::Refund {
                    which,
                    limit,
                    units,
                } => {
                    let count = spent.len();
                    let Some(earlier) = spent.get_mut(which % count.max(1)) else {
                        continue;
                    };
                    let Some(at) = earlier.picks.iter().position(|&(l, _)| l == limit) else {
                        continue;
                    };
                    block_on(limiter.refund(&earlier.verdict, rules[limit].name(), units))
                        .map_err(|e| TestCaseError::fail(format!("refund: {e}")))?;
                    let cost = earlier.picks[at].1;
                    let back = units.min(cost - earlier.back[at]);
                    earlier.back[at] += back;
                    model.refund(limit, back, earlier.index[at], now);
                }
                Step::Advance(secs) => clock.advance(Duration::from_secs(secs)),
                Step::Boundary(offset) => {
                    let to = (now / 10 + 1) * 10 + offset;
                    clock.advance(Duration::from_secs(to - 1 - now));
                }
            }
        }
        let now = clock.now().as_secs();
        let all: Vec<(usize, u64)> = (0..SHAPES.len()).map(|l| (l, 1)).collect();
        let usage = block_on(limiter.remaining(&limits(&rules, &all, &id)?))
            .map_err(|e| TestCaseError::fail(format!("remaining: {e}")))?;
        let got: Vec<Expected> = usage.iter().map(seen).collect();
        let expected: Vec<Expected> = all
            .iter()
            .map(|&(l, cost)| model.expected(l, now, cost, true))
            .collect();
        prop_assert_eq!(got, expected, "remaining at {}", now);
        Ok(())
    });
    ok(result, "windows against the model");
}

/// The limits of `picks` (rule index and cost) for the principal `id`.
fn limits(rules: &[Rule], picks: &[(usize, u64)], id: &str) -> Result<Vec<Limit>, TestCaseError> {
    picks
        .iter()
        .map(|&(l, cost)| {
            rules[l]
                .limit(&[id])
                .and_then(|limit| limit.with_cost(cost))
        })
        .collect::<Result<_, _>>()
        .map_err(|e| TestCaseError::fail(e.to_string()))
}

/// Callers racing on a sliding window halfway into it, after a busy
/// previous window, are admitted exactly as many times as the room the
/// model leaves: `max − floor(previous / 2)`, across two limiters.
pub async fn racing_callers_fill_a_sliding_window_exactly<H: Harness>(harness: &H) {
    const MAX: u64 = 30;
    const PREVIOUS: u64 = 21;
    const CALLERS: usize = 80;
    let clock = clock(harness);
    let limiters = [
        limiter(harness.open().await, &clock),
        limiter(harness.open().await, &clock),
    ];
    let sliding = rule("race-sliding", MAX, Window::MINUTE, 1).with_algorithm(Algorithm::Sliding);
    let id = unique();
    let limit = ok(sliding.limit(&[&id]), "limit");
    // The check starts 30 s into a minute: the previous minute weighs half.
    let busy = ok(limit.clone().with_cost(PREVIOUS), "cost");
    assert!(ok(limiters[0].count(&[busy]).await, "count").is_allowed());
    clock.advance(Duration::from_secs(60));
    let allowed = race(&limiters, CALLERS, move |limiter: Limiter| {
        let limit = limit.clone();
        async move { ok(limiter.reserve(&[limit]).await, "reserve").is_allowed() }
    })
    .await;
    let room = MAX - PREVIOUS / 2;
    assert_eq!(
        allowed, room as usize,
        "{CALLERS} racing callers with max {MAX} after {PREVIOUS} in the previous minute, half of it weighed"
    );
}

/// Callers racing on a quiet GCRA bucket at one instant are admitted
/// exactly its burst, across two limiters; a second later, exactly one
/// more (one emission interval).
pub async fn racing_callers_take_exactly_a_gcra_burst<H: Harness>(harness: &H) {
    const BURST: u64 = 20;
    const CALLERS: usize = 80;
    let clock = clock(harness);
    let limiters = [
        limiter(harness.open().await, &clock),
        limiter(harness.open().await, &clock),
    ];
    // 60 a minute: one every second.
    let bucket = rule("race-gcra", 60, Window::MINUTE, 1).with_algorithm(Algorithm::Gcra);
    let limit = ok(
        ok(bucket.with_burst(BURST), "burst").limit(&[unique()]),
        "limit",
    );
    let reserve = move |limit: Limit| {
        move |limiter: Limiter| {
            let limit = limit.clone();
            async move { ok(limiter.reserve(&[limit]).await, "reserve").is_allowed() }
        }
    };
    let allowed = race(&limiters, CALLERS, reserve(limit.clone())).await;
    assert_eq!(
        allowed, BURST as usize,
        "{CALLERS} racing callers, burst {BURST}"
    );
    clock.advance(Duration::from_secs(1));
    let allowed = race(&limiters, CALLERS, reserve(limit)).await;
    assert_eq!(allowed, 1, "one emission interval later");
}
