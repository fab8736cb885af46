//! Helpers of the Upstash store's test binaries.

pub mod fake;
pub mod proxy;

use std::time::Duration;

use tollgate_core::{Limit, Rule, Window};
use tollgate_test_support::unique;

/// The token every test proxy admits.
pub const TOKEN: &str = "test-token-0123456789";

/// The failure bound of a check with the default retry policy (350 ms)
/// plus scheduling on a loaded 2-core machine.
pub const BOUND: Duration = Duration::from_secs(1);

/// `n` limits of one check, on keys no other test uses, with rule names
/// of their own (so the core's once-a-second fail-open log line is not
/// suppressed by another test's).
pub fn limits(n: usize) -> Vec<Limit> {
    let id = unique();
    (0..n)
        .map(|i| {
            let rule = Rule::new(&format!("r{i}-{id}"), 1_000, Window::DAY)
                .and_then(|r| r.with_key(&["id"]))
                .unwrap();
            rule.limit(&[id.as_str()]).unwrap()
        })
        .collect()
}
