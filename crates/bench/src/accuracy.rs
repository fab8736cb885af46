//! `--accuracy`, first part: how much each shape of limit admits in any
//! span of its window, for adversarial and uniform schedules replayed
//! against the store in simulated time.
//!
//! Each replay drives a fresh limiter on a [`ManualClock`] over the real
//! store, with a key of its own: minutes of schedule run in a fraction of a
//! second, and admit the same calls every time however busy the machine
//! is. The figures are properties of the shape as the limiter and the store
//! apply it, not of timing.

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tollgate::{Algorithm, CheckId, Clock, Limiter, ManualClock, Rule, Store, SystemClock, Window};

/// The window of every replay.
pub(crate) const WINDOW: Window = Window::MINUTE;
/// The budget of every window, in calls of cost 1.
pub(crate) const MAX: u64 = 100;
/// Seconds the adversary keeps trying at the start of the next window:
/// its first tenth.
const RETRY_SECS: u64 = 6;
/// Windows the kept-up adversary keeps trying for after its burst.
const KEPT_UP_WINDOWS: u64 = 2;
/// Windows a uniform schedule runs for.
const UNIFORM_WINDOWS: u64 = 4;
/// The bursts of the GCRA limits replayed: a tenth of the budget, and all
/// of it.
pub(crate) const BURSTS: [u64; 2] = [10, MAX];

/// A limit replayed: a shape, and for GCRA its burst.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub(crate) struct Shape {
    pub(crate) algorithm: Algorithm,
    /// A GCRA limit's burst (`None` for windows).
    pub(crate) burst: Option<u64>,
}

impl Shape {
    /// Every limit replayed, in the table's order: fixed, sliding, then
    /// GCRA at each burst of [`BURSTS`].
    pub(crate) const ALL: [Shape; 4] = [
        Shape::window(Algorithm::Fixed),
        Shape::window(Algorithm::Sliding),
        Shape::gcra(BURSTS[0]),
        Shape::gcra(BURSTS[1]),
    ];

    const fn window(algorithm: Algorithm) -> Shape {
        Shape {
            algorithm,
            burst: None,
        }
    }

    const fn gcra(burst: u64) -> Shape {
        Shape {
            algorithm: Algorithm::Gcra,
            burst: Some(burst),
        }
    }

    /// Its name in the table: the algorithm's, and a GCRA limit's burst
    /// (`gcra-b10`).
    pub(crate) fn name(self) -> String {
        match self.burst {
            Some(burst) => format!("{}-b{burst}", self.algorithm.as_str()),
            None => self.algorithm.as_str().to_owned(),
        }
    }

    /// Its rule: `MAX` per `WINDOW`, named after the shape.
    fn rule(self) -> Result<Rule, tollgate::Error> {
        let rule = Rule::new(&format!("accuracy-{}", self.name()), MAX, WINDOW)?
            .with_algorithm(self.algorithm)
            .with_key(&["run"])?;
        match self.burst {
            Some(burst) => rule.with_burst(burst),
            None => Ok(rule),
        }
    }
}

/// When a caller sends its calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Schedule {
    /// `MAX` calls in the last second of a window, then, in each of the
    /// first `RETRY_SECS` seconds of the next, calls until one is refused.
    Adversarial,
    /// The same burst, then calls until one is refused in every second of
    /// the next `KEPT_UP_WINDOWS` windows.
    AdversarialKeptUp,
    /// Twice `MAX` calls per window, evenly spaced, for `UNIFORM_WINDOWS`
    /// windows from the start of one.
    Uniform,
    /// The same from the middle of a window.
    UniformMidWindow,
}

/// How many calls one step sends at its instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tries {
    /// Exactly this many, admitted or not.
    Exactly(u64),
    /// One after another until one is refused (at most twice `MAX`).
    UntilRefused,
}

/// Calls sent at one instant of a schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Step {
    /// Milliseconds after the start of the schedule's first window.
    at_ms: u64,
    tries: Tries,
}

impl Schedule {
    /// Every schedule, in the table's order.
    pub(crate) const ALL: [Schedule; 4] = [
        Schedule::Adversarial,
        Schedule::AdversarialKeptUp,
        Schedule::Uniform,
        Schedule::UniformMidWindow,
    ];

    /// Its name in the table and in JSON.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Schedule::Adversarial => "adversarial",
            Schedule::AdversarialKeptUp => "adversarial-kept-up",
            Schedule::Uniform => "uniform",
            Schedule::UniformMidWindow => "uniform-mid-window",
        }
    }

    /// What it does, for the table's legend.
    fn legend(self) -> String {
        match self {
            Schedule::Adversarial => format!(
                "{MAX} calls in a window's last second, then calls until one is refused in each of the next window's first {RETRY_SECS} s"
            ),
            Schedule::AdversarialKeptUp => format!(
                "the same burst, then calls until one is refused in every second of the next {KEPT_UP_WINDOWS} windows"
            ),
            Schedule::Uniform => format!(
                "{} calls per window, evenly spaced, for {UNIFORM_WINDOWS} windows from a window's start",
                2 * MAX
            ),
            Schedule::UniformMidWindow => "the same from the middle of a window".to_owned(),
        }
    }

    /// Its steps, in time order.
    fn steps(self) -> Vec<Step> {
        let window_ms = WINDOW.secs() * 1_000;
        let burst = Step {
            at_ms: window_ms - 1_000,
            tries: Tries::Exactly(MAX),
        };
        let retrying = |secs: u64| {
            (0..secs).map(move |s| Step {
                at_ms: window_ms + s * 1_000,
                tries: Tries::UntilRefused,
            })
        };
        match self {
            Schedule::Adversarial => std::iter::once(burst).chain(retrying(RETRY_SECS)).collect(),
            Schedule::AdversarialKeptUp => std::iter::once(burst)
                .chain(retrying(KEPT_UP_WINDOWS * WINDOW.secs()))
                .collect(),
            Schedule::Uniform => uniform(0),
            Schedule::UniformMidWindow => uniform(window_ms / 2),
        }
    }
}

/// Twice `MAX` calls per window, evenly spaced, for `UNIFORM_WINDOWS`
/// windows from `from_ms`.
fn uniform(from_ms: u64) -> Vec<Step> {
    let window_ms = WINDOW.secs() * 1_000;
    let per_window = 2 * MAX;
    (0..per_window * UNIFORM_WINDOWS)
        .map(|j| Step {
            at_ms: from_ms + j * window_ms / per_window,
            tries: Tries::Exactly(1),
        })
        .collect()
}

/// One replay: a schedule against one shape.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Row {
    pub(crate) schedule: Schedule,
    pub(crate) shape: Shape,
    /// Calls sent.
    pub(crate) tried: u64,
    /// Calls admitted.
    pub(crate) admitted: u64,
    /// Calls refused by the limiter's local cache, without a store call.
    pub(crate) refused_locally: u64,
    /// The most admitted in any span of the window's length (whole
    /// seconds, its start slid second by second).
    pub(crate) most: u64,
    /// Where the first such span starts: seconds after the start of the
    /// schedule's first window.
    pub(crate) worst_from_s: u64,
    /// `most` over `MAX`: 1 is exact, 2 is twice the limit.
    pub(crate) ratio: f64,
}

/// Every replay of a run.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Accuracy {
    pub(crate) window_s: u64,
    pub(crate) max: u64,
    /// This run's part of every key (a random id).
    pub(crate) run: String,
    pub(crate) rows: Vec<Row>,
}

/// Replays every schedule against every shape on `store`, each with a
/// fresh limiter, clock and key.
pub(crate) async fn measure(store: &Arc<dyn Store>) -> Result<Accuracy, Box<dyn Error>> {
    let run = CheckId::new().to_string();
    // The simulated time starts at the real window's start: counters land
    // where a real caller's would, and keep their real lifetimes.
    let base = WINDOW.start(WINDOW.index(SystemClock.now().as_secs()));
    let mut rows = Vec::new();
    for schedule in Schedule::ALL {
        for shape in Shape::ALL {
            rows.push(replay(store, schedule, shape, &run, base).await?);
        }
    }
    Ok(Accuracy {
        window_s: WINDOW.secs(),
        max: MAX,
        run,
        rows,
    })
}

/// Replays `schedule` from `base_secs` against a limit of `shape` keyed
/// by `run` and the schedule.
async fn replay(
    store: &Arc<dyn Store>,
    schedule: Schedule,
    shape: Shape,
    run: &str,
    base_secs: u64,
) -> Result<Row, Box<dyn Error>> {
    let base = Duration::from_secs(base_secs);
    let clock = ManualClock::new(base);
    let limiter = Limiter::builder(Arc::clone(store))
        .clock(clock.clone())
        .build();
    let limits = [shape
        .rule()?
        .limit(&[format!("{run}-{}", schedule.name())])?];
    let mut tried = 0;
    let mut local = 0;
    let mut admitted = Vec::new();
    for step in schedule.steps() {
        let at = base + Duration::from_millis(step.at_ms);
        clock.set(at);
        let mut sent = 0;
        loop {
            let verdict = limiter.reserve(&limits).await?;
            let allowed = verdict.is_allowed();
            local += u64::from(verdict.is_local());
            sent += 1;
            if allowed {
                admitted.push(at.as_secs() - base_secs);
            }
            let more = match step.tries {
                Tries::Exactly(n) => sent < n,
                Tries::UntilRefused => allowed && sent < 2 * MAX,
            };
            if !more {
                break;
            }
        }
        tried += sent;
    }
    let (most, worst_from_s) = most_in_span(&admitted, WINDOW.secs());
    Ok(Row {
        schedule,
        shape,
        tried,
        admitted: admitted.len() as u64,
        refused_locally: local,
        most,
        worst_from_s,
        ratio: most as f64 / MAX as f64,
    })
}

/// The most of `seconds` (in time order) inside any span `[s, s + len)`
/// of whole seconds, and the first `s` where it is reached. Slid second
/// by second, a span holds the most once it starts at a call, so only
/// those starts are tried.
fn most_in_span(seconds: &[u64], len: u64) -> (u64, u64) {
    let mut best = (0, seconds.first().copied().unwrap_or(0));
    let mut end = 0;
    for (i, &start) in seconds.iter().enumerate() {
        while end < seconds.len() && seconds[end] < start + len {
            end += 1;
        }
        let count = end.saturating_sub(i) as u64;
        if count > best.0 {
            best = (count, start);
        }
    }
    best
}

impl Accuracy {
    /// The replays as a table, with its legend.
    pub(crate) fn table(&self) -> String {
        let w = self.window_s;
        let mut out = format!(
            "accuracy: windows of {w} s, max {}, calls of cost 1, replayed in simulated time (a ManualClock) on the store; fresh keys (run {})\n",
            self.max, self.run
        );
        out.push_str(&format!(
            "schedule               shape        tried  admitted  refused locally  most in {w} s  most / max  worst span from\n"
        ));
        for r in &self.rows {
            out.push_str(&format!(
                "{:<22} {:<9} {:>8} {:>9} {:>16} {:>12} {:>11.3}  +{} s\n",
                r.schedule.name(),
                r.shape.name(),
                r.tried,
                r.admitted,
                r.refused_locally,
                r.most,
                r.ratio,
                r.worst_from_s
            ));
        }
        for schedule in Schedule::ALL {
            out.push_str(&format!("  {}: {}\n", schedule.name(), schedule.legend()));
        }
        let interval = (w * 1_000).div_ceil(self.max);
        out.push_str(&format!(
            "  gcra-bN: GCRA of {} per {w} s, one call every {interval} ms, at most N at once\n",
            self.max
        ));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_most_in_a_span_slides_second_by_second() {
        assert_eq!(most_in_span(&[], 60), (0, 0));
        assert_eq!(most_in_span(&[5], 60), (1, 5));
        // 100 at 59 and 100 at 60: one span of 60 s holds both.
        let burst: Vec<u64> = [vec![59; 100], vec![60; 100]].concat();
        assert_eq!(most_in_span(&burst, 60), (200, 59));
        // 59 and 119 are 60 s apart: never in one span.
        assert_eq!(most_in_span(&[59, 119, 119], 60), (2, 119));
        assert_eq!(most_in_span(&[0, 1, 2, 60, 61], 60), (3, 0));
        assert_eq!(most_in_span(&[0, 1, 2, 60, 61], 2), (2, 0));
    }

    /// The replays on the memory store: GCRA's figures follow from its
    /// interval (600 ms) and burst alone.
    #[tokio::test]
    async fn gcra_admits_its_burst_then_one_call_per_interval() {
        let store = tollgate::open_store("memory").unwrap_or_else(|e| panic!("{e}"));
        let accuracy = measure(&store).await.unwrap_or_else(|e| panic!("{e}"));
        let most = |schedule: Schedule, name: &str| {
            accuracy
                .rows
                .iter()
                .find(|r| r.schedule == schedule && r.shape.name() == name)
                .map(|r| r.most)
        };
        // 10 at 59 s, then the 6 s to 65 s drain 10 more.
        assert_eq!(most(Schedule::Adversarial, "gcra-b10"), Some(20));
        // 100 at 59 s, then the same 10.
        assert_eq!(most(Schedule::Adversarial, "gcra-b100"), Some(110));
        // Offered twice its rate: the burst and 99 intervals of the window.
        assert_eq!(most(Schedule::Uniform, "gcra-b10"), Some(109));
        assert_eq!(most(Schedule::Uniform, "gcra-b100"), Some(199));
        assert_eq!(most(Schedule::Adversarial, "fixed"), Some(200));
        assert_eq!(accuracy.rows.len(), Schedule::ALL.len() * Shape::ALL.len());
    }

    #[test]
    fn schedules_send_what_their_legend_says() {
        let adversarial = Schedule::Adversarial.steps();
        assert_eq!(adversarial.len(), 1 + RETRY_SECS as usize);
        assert_eq!(
            adversarial[0],
            Step {
                at_ms: 59_000,
                tries: Tries::Exactly(MAX)
            }
        );
        assert_eq!(adversarial[1].at_ms, 60_000);
        assert_eq!(adversarial.last().map(|s| s.at_ms), Some(65_000));
        let kept_up = Schedule::AdversarialKeptUp.steps();
        assert_eq!(kept_up.last().map(|s| s.at_ms), Some(179_000));

        let uniform = Schedule::Uniform.steps();
        assert_eq!(uniform.len() as u64, 2 * MAX * UNIFORM_WINDOWS);
        // 200 calls a minute: one every 300 ms, none past the last window.
        assert_eq!(uniform[1].at_ms, 300);
        assert_eq!(uniform.last().map(|s| s.at_ms), Some(239_700));
        let mid = Schedule::UniformMidWindow.steps();
        assert_eq!(mid.first().map(|s| s.at_ms), Some(30_000));
        for schedule in Schedule::ALL {
            let steps = schedule.steps();
            assert!(steps.windows(2).all(|p| p[0].at_ms <= p[1].at_ms));
        }
    }
}
