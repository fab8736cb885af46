//! Helpers shared by the REST store's test binaries.

#![allow(dead_code, unreachable_pub)]

pub mod fake;
pub mod proxy;
pub mod relay;

use std::time::Duration;

use tollgate_core::{Counter, Deadline, Limit, Rule, Window};
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

/// A deadline for a store call made directly by a test: one second.
pub fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(1))
}

/// A counter on a key no other test uses, with a minute's lifetime.
pub fn counter(name: &str, cost: u64, max: u64) -> Counter {
    Counter {
        key: format!("limit:{name}:{}:1", unique()),
        ttl: Duration::from_secs(60),
        cost,
        max,
    }
}

/// A plain connection to a test's private Redis.
pub async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Runs one raw command.
pub async fn run(conn: &mut redis::aio::MultiplexedConnection, args: &[&str]) -> redis::Value {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(conn).await.unwrap()
}
