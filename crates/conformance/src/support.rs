//! Small helpers shared by the checks.

use std::future::Future;
use std::time::Duration;

use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use tollgate_core::{
    CounterStore, Deadline, Deliveries, Limiter, ManualClock, MarkStore, RetryPolicy, Rule, Window,
};

use crate::{Expiry, Harness};

pub use tollgate_test_support::unique;

/// The instant every check starts at: 2026-06-15T12:00:30Z, the middle of
/// a UTC day, 30 seconds into a minute and an hour. No check depends on the
/// time of day it runs at.
pub const FIXED_NOW: Duration = Duration::from_secs(20_619 * 86_400 + 43_230);

/// How far a lifetime read from a store keeping its own time may have run
/// down between the call that set it and the reading: 5 seconds.
pub(crate) const SLACK: Duration = Duration::from_secs(5);

/// How much a store keeping lifetimes in whole seconds may round one up.
pub(crate) const ROUNDING: Duration = Duration::from_secs(1);

/// A rule of `parts` key parts (`p0`, `p1`, ...), for checks (the
/// arguments are constants of the suite).
pub(crate) fn rule(name: &str, max: u64, window: Window, parts: usize) -> Rule {
    let names: Vec<String> = (0..parts).map(|i| format!("p{i}")).collect();
    Rule::new(name, max, window)
        .and_then(|r| r.with_key(&names))
        .unwrap_or_else(|e| panic!("bad test rule: {e}"))
}

/// A window of `secs` seconds (a constant of the suite).
pub(crate) fn window(secs: u64) -> Window {
    Window::from_secs(secs).unwrap_or_else(|e| panic!("bad test window: {e}"))
}

/// The windows lifetimes are checked on: an hour, a day and a long,
/// unaligned custom window (30 days and 7 seconds).
pub(crate) fn lifetime_windows() -> [Window; 3] {
    [Window::HOUR, Window::DAY, window(30 * 86_400 + 7)]
}

/// A deadline for a store call made directly by a check: one second.
pub(crate) fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(1))
}

/// The retry policy of the suite's limiters: attempts of up to two
/// seconds, so that a loaded test machine never turns a slow reply into a
/// retried (double) increment; the suite checks stores, not time budgets.
pub(crate) const RETRY: RetryPolicy = RetryPolicy {
    retries: 2,
    delay: Duration::from_millis(50),
    timeout: Duration::from_secs(2),
};

/// A limiter over `store` on `clock`, under [`RETRY`].
pub(crate) fn limiter(store: impl CounterStore, clock: &ManualClock) -> Limiter {
    Limiter::builder(store)
        .clock(clock.clone())
        .retry(RETRY)
        .build()
}

/// De-duplication of deliveries marked `delivery:<id>` in `store`, under [`RETRY`].
pub(crate) fn deliveries(store: impl MarkStore) -> Deliveries {
    ok(Deliveries::new(store, "delivery:"), "deliveries").retry(RETRY)
}

/// The clock of a check, reading [`FIXED_NOW`]: the harness's store clock
/// when it has one (so that moving it moves the store's time and the
/// limiter's together), else a clock of the check's own.
pub(crate) fn clock<H: Harness>(harness: &H) -> ManualClock {
    let clock = harness.store_clock().unwrap_or_default();
    clock.set(FIXED_NOW);
    clock
}

/// The remaining lifetime of `key`, which must have one.
pub(crate) async fn lifetime<H: Harness>(harness: &H, key: &str) -> Duration {
    match harness.expiry(key).await {
        Expiry::In(left) if !left.is_zero() => left,
        other => panic!("{key} must have a lifetime, found {other:?}"),
    }
}

/// Asserts that `key`, written just now with lifetime `ttl`, lives at least
/// `ttl` (less [`SLACK`]) and at most `ttl` (plus [`ROUNDING`]).
pub(crate) async fn assert_fresh_lifetime<H: Harness>(harness: &H, key: &str, ttl: Duration) {
    let left = lifetime(harness, key).await;
    assert!(
        left + SLACK >= ttl,
        "{key} lives {left:?}, less than its ttl of {ttl:?}: it would expire before its window ends"
    );
    assert!(
        left <= ttl + ROUNDING,
        "{key} lives {left:?}, more than its ttl of {ttl:?} after its latest write"
    );
}

/// Asserts that `key` is gone: no lifetime, and a count of 0.
pub(crate) async fn assert_gone<H: Harness>(harness: &H, store: &impl CounterStore, key: &str) {
    assert_eq!(
        harness.expiry(key).await,
        Expiry::Absent,
        "{key} outlived its ttl"
    );
    let count = ok(store.get(&[key.to_owned()], deadline()).await, "get");
    assert_eq!(count, [0], "{key} still counts after its ttl");
}

/// Runs an async step from inside a synchronous proptest closure.
pub(crate) fn block_on<F: Future>(future: F) -> F::Output {
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(future))
}

/// A proptest runner with `cases` cases. A counterexample any check finds
/// on a store (but one broken on purpose: [`Harness::keeps_counterexamples`])
/// is saved in `crates/conformance/proptest-regressions/support.txt`:
/// commit it, so every check that draws cases replays its seed first.
pub(crate) fn runner<H: Harness>(harness: &H, cases: u32) -> TestRunner {
    let persistence = match harness.keeps_counterexamples() {
        true => FileFailurePersistence::SourceParallel("proptest-regressions"),
        false => FileFailurePersistence::Off,
    };
    TestRunner::new(Config {
        cases,
        failure_persistence: Some(Box::new(persistence)),
        source_file: Some(file!()),
        ..Config::default()
    })
}

/// Unwraps a test value with a message naming what failed, and why (the
/// whole chain of causes, e.g. the invalid reply behind an unavailable store).
pub(crate) fn ok<T, E: std::error::Error>(result: Result<T, E>, what: &str) -> T {
    result.unwrap_or_else(|e| {
        let mut why = e.to_string();
        let mut cause = e.source();
        while let Some(inner) = cause {
            why = format!("{why}: {inner}");
            cause = inner.source();
        }
        panic!("{what}: {why}")
    })
}
