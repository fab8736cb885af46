//! Helpers shared by the Redis test binaries.

#![allow(dead_code, unreachable_pub)]

pub mod relay;

use std::time::Duration;

use tollgate_core::{Limit, Rule, Window};
use tollgate_test_support::unique;

/// The failure bound stated in the crate docs: a check against a dead or
/// frozen server returns within this, with the default retry policy.
pub const BOUND: Duration = Duration::from_millis(500);

/// `n` limits of one check, on keys no other test uses.
pub fn limits(n: usize) -> Vec<Limit> {
    let id = unique();
    (0..n)
        .map(|i| {
            let rule = Rule::new(&format!("rule{i}"), 1_000, Window::DAY).unwrap();
            rule.limit(&[id.as_str()]).unwrap()
        })
        .collect()
}

/// One limit with `max`, on a key no other test uses.
pub fn limit(name: &str, max: u64) -> Limit {
    Rule::new(name, max, Window::DAY)
        .unwrap()
        .limit(&[unique()])
        .unwrap()
}

/// A plain connection for administrative commands (INFO, SCRIPT FLUSH, ...).
pub async fn admin(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// Runs one raw command on `conn`.
pub async fn run(conn: &mut redis::aio::MultiplexedConnection, args: &[&str]) -> redis::Value {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd.query_async(conn).await.unwrap()
}
