//! Small helpers shared by the checks.

use std::future::Future;
use std::time::Duration;

use proptest::test_runner::{Config, TestRunner};
use tollgate_core::{Clock, CounterStore, Deadline, Limiter, ManualClock, Rule, Window};

pub use tollgate_test_support::unique;

/// A rule of `parts` key parts (`p0`, `p1`, ...), for checks (the
/// arguments are constants of the suite).
pub(crate) fn rule(name: &str, max: u64, window: Window, parts: usize) -> Rule {
    let names: Vec<String> = (0..parts).map(|i| format!("p{i}")).collect();
    Rule::new(name, max, window)
        .and_then(|r| r.with_key(&names))
        .unwrap_or_else(|e| panic!("bad test rule: {e}"))
}

/// A deadline for a store call made directly by a check: one second.
pub(crate) fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(1))
}

/// A limiter over `store` with no retry wrapper, on a manual clock.
pub(crate) fn limiter(store: impl CounterStore, clock: &ManualClock) -> Limiter {
    Limiter::with_parts(store, clock.clone())
}

/// A manual clock reading the system time now, in the middle of a minute
/// (so a short check never crosses a minute boundary by accident).
pub(crate) fn clock() -> ManualClock {
    let now = tollgate_core::SystemClock.now().as_secs();
    ManualClock::new(Duration::from_secs(now - now % 60 + 30))
}

/// Runs an async step from inside a synchronous proptest closure.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(future))
}

/// A proptest runner with `cases` cases and no failure file.
pub(crate) fn runner(cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    })
}

/// Unwraps a test value with a message naming what failed.
pub(crate) fn ok<T, E: std::fmt::Display>(result: Result<T, E>, what: &str) -> T {
    result.unwrap_or_else(|e| panic!("{what}: {e}"))
}
