//! The measured work: one scenario, run `n` times.

use std::hint::black_box;
use std::time::Duration;

use tollgate::memory::MemoryStore;
use tollgate::{Clock, Limit, Limiter, Rule, Window};

/// What one iteration does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Work {
    /// Rules → limits → counter keys, as a check sets up (no store).
    Setup,
    /// A whole `Limiter::count` against the memory store.
    Count,
    /// A whole `Limiter::reserve` against the memory store.
    Reserve,
    /// A reservation refused by the limiter's cache of full counters (an
    /// attacker over its limit): no store call.
    Refused,
}

/// A scenario: the work and the number of limits per check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scenario {
    /// The work of one iteration.
    pub(crate) work: Work,
    /// Limits per check.
    pub(crate) limits: usize,
}

impl Scenario {
    /// Every scenario measured: setup, count and reserve at 1, 4 and 16 limits.
    pub(crate) fn all() -> Vec<Scenario> {
        let mut all = Vec::new();
        for work in [Work::Setup, Work::Count, Work::Reserve, Work::Refused] {
            for limits in [1, 4, 16] {
                all.push(Scenario { work, limits });
            }
        }
        all
    }

    /// The scenario's name, e.g. `count-4`.
    pub(crate) fn name(&self) -> String {
        let work = match self.work {
            Work::Setup => "setup",
            Work::Count => "count",
            Work::Reserve => "reserve",
            Work::Refused => "refused",
        };
        format!("{work}-{}", self.limits)
    }

    /// The scenario named `name`.
    pub(crate) fn parse(name: &str) -> Option<Scenario> {
        Scenario::all().into_iter().find(|s| s.name() == name)
    }

    /// Runs `n` iterations over principals `0..n`, after one warm-up
    /// iteration (so one-time setup is counted in every run alike).
    pub(crate) fn run(&self, n: u64) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build();
        let Ok(runtime) = runtime else { return };
        let rules = rules(self.limits, self.work == Work::Refused);
        let clock = Fixed;
        let limiter = Limiter::builder(MemoryStore::with_clock(clock))
            .clock(clock)
            .build();
        runtime.block_on(async {
            for i in 0..=n {
                // Refused: one principal, over its limit after the first call.
                let i = if self.work == Work::Refused { 0 } else { i };
                let principal = i.to_string();
                let limits: Vec<Limit> = rules
                    .iter()
                    .filter_map(|r| r.limit(&[principal.as_str()]).ok())
                    .collect();
                match self.work {
                    Work::Setup => {
                        let now = clock.now().as_secs();
                        for limit in &limits {
                            black_box(limit.counter(now));
                        }
                    }
                    Work::Count => {
                        let _ = black_box(limiter.count(&limits).await);
                    }
                    Work::Reserve | Work::Refused => {
                        let _ = black_box(limiter.reserve(&limits).await);
                    }
                }
            }
        });
    }
}

/// The rules of a check: `bench-0` … with windows of a minute, an hour
/// and a day in turn, one key part each, a max never reached (or, when
/// `full`, a first rule of max 1).
fn rules(limits: usize, full: bool) -> Vec<Rule> {
    let windows = [Window::MINUTE, Window::HOUR, Window::DAY];
    (0..limits)
        .filter_map(|i| {
            let max = if full && i == 0 { 1 } else { 1_000_000_000 };
            Rule::new(&format!("bench-{i}"), max, windows[i % windows.len()])
                .and_then(|r| r.with_key(&["principal"]))
                .ok()
        })
        .collect()
}

/// A fixed time, so every run does the same work: 2026-06-15T12:00:30Z.
#[derive(Clone, Copy, Debug)]
struct Fixed;

impl Clock for Fixed {
    fn now(&self) -> Duration {
        Duration::from_secs(20_619 * 86_400 + 43_230)
    }
}
