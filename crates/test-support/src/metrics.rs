//! The metrics a piece of code records, for tests: it runs with a
//! debugging recorder of its own, so that tests running at once in one
//! process never see each other's counts.

use std::collections::BTreeMap;

use metrics::{Key, SharedString, Unit};
use metrics_util::CompositeKey;
pub use metrics_util::debugging::DebugValue;
use metrics_util::debugging::DebuggingRecorder;

/// One metric recorded: its key, unit, description and value.
pub type Recorded = (CompositeKey, Option<Unit>, Option<SharedString>, DebugValue);

/// Runs `run` to completion on a current-thread tokio runtime of its own,
/// with a recorder of its own: every metric it recorded.
///
/// # Panics
///
/// When the runtime cannot be built.
pub fn recorded(run: impl AsyncFnOnce()) -> Vec<Recorded> {
    record(false, run)
}

/// [`recorded`], on a runtime whose time starts paused (advanced by
/// `tokio::time::advance`, or at once when every task waits on it).
///
/// # Panics
///
/// When the runtime cannot be built.
pub fn recorded_paused(run: impl AsyncFnOnce()) -> Vec<Recorded> {
    record(true, run)
}

fn record(paused: bool, run: impl AsyncFnOnce()) -> Vec<Recorded> {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(paused)
            .build()
            .unwrap_or_else(|e| panic!("a runtime for the recorded code: {e}"));
        runtime.block_on(run());
    });
    snapshotter.snapshot().into_vec()
}

/// `key`'s labels as `name=value`, comma-separated, in their order.
pub fn labels(key: &Key) -> String {
    key.labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect::<Vec<_>>()
        .join(",")
}

/// The counters named `name` above 0, as [`labels`] → count.
pub fn counters(recorded: &[Recorded], name: &str) -> BTreeMap<String, u64> {
    recorded
        .iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Counter(n) if *n > 0 && key.key().name() == name => {
                Some((labels(key.key()), *n))
            }
            _ => None,
        })
        .collect()
}
