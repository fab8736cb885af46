//! Helpers shared by the test binaries of the Redis stores (TCP, Cluster,
//! Upstash REST).

#![allow(dead_code, unreachable_pub)]

pub mod cluster;
pub mod frozen;
pub mod upstash;

use std::time::Duration;

use tollgate_core::{
    Counter, CounterStore, Deadline, Error, Limit, Limiter, RetryPolicy, Rule, Window,
};
use tollgate_test_support::{redis_info, unique};

/// The failure bound stated in the crate docs: a check against a dead or
/// frozen server returns within this, with the default retry policy.
pub const BOUND: Duration = Duration::from_millis(500);

/// A retry policy other than the default: one attempt of 25 ms, so a whole
/// check's budget is 25 ms (the default's is 350 ms).
pub const SHORT: RetryPolicy = RetryPolicy {
    retries: 0,
    delay: Duration::from_millis(10),
    timeout: Duration::from_millis(25),
};

/// How long a store under [`SHORT`] may keep anything waiting for a check:
/// its 25 ms and room for a loaded machine, well under the default
/// policy's 350 ms.
pub const SHORT_BOUND: Duration = Duration::from_millis(250);

/// Asserts that a check of `limits` on `store`, under a limiter of the
/// [`SHORT`] policy, is unavailable against `frozen`, and that the store
/// gave up every connection it opened there within [`SHORT_BOUND`].
pub async fn assert_a_short_check_gives_up_in_time(
    store: impl CounterStore,
    limits: &[Limit],
    frozen: &frozen::Frozen,
    what: &str,
) {
    let limiter = Limiter::builder(store).retry(SHORT).build();
    let result = limiter.count(limits).await;
    assert!(
        matches!(result, Err(Error::Unavailable(_))),
        "{what}: {result:?}"
    );
    assert_held_within_the_short_bound(frozen, what).await;
}

/// Asserts that the client closed at least one connection to `frozen`,
/// and each within [`SHORT_BOUND`] of opening it.
pub async fn assert_held_within_the_short_bound(frozen: &frozen::Frozen, what: &str) {
    let held = frozen.closed(1, Duration::from_secs(2)).await;
    println!("{what}: connections held {held:?}");
    assert!(!held.is_empty(), "{what}: a connection was never given up");
    for took in held {
        assert!(
            took < SHORT_BOUND,
            "{what}: a connection was held {took:?}, past the policy's budget"
        );
    }
}

/// Waits until a check of `limits` on `limiter` reaches the store again
/// (at most a second: the breaker, open after an outage, lets a probe
/// through every 200 ms), and says how long it took.
pub async fn until_answered(limiter: &Limiter, limits: &[Limit], situation: &str) {
    let started = std::time::Instant::now();
    while let Err(Error::Unavailable(_)) = limiter.count(limits).await {
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "{situation}: the store is still skipped after {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    println!("{situation}: answered after {:?}", started.elapsed());
}

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

/// One limit with `max`, on a key no other test uses.
pub fn limit(name: &str, max: u64) -> Limit {
    Rule::new(name, max, Window::DAY)
        .and_then(|r| r.with_key(&["id"]))
        .unwrap()
        .limit(&[unique()])
        .unwrap()
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
        floor: 0,
        prior: None,
        lease: false,
    }
}

/// `INFO commandstats` as command → calls sent (run, or refused before
/// running: `NOPERM`, a wrong arity), leaving out the test's own commands.
pub async fn command_calls(
    admin: &mut redis::aio::MultiplexedConnection,
) -> std::collections::BTreeMap<String, u64> {
    let redis::Value::BulkString(info) = run(admin, &["INFO", "commandstats"]).await else {
        panic!("INFO is not a bulk string");
    };
    let mut calls = redis_info::command_calls(&String::from_utf8(info).unwrap());
    calls.retain(|name, _| name != "config|resetstat" && name != "info");
    calls
}

/// `INFO <section>` field `name`, as a number.
pub async fn info_field(
    conn: &mut redis::aio::MultiplexedConnection,
    section: &str,
    name: &str,
) -> u64 {
    let redis::Value::BulkString(info) = run(conn, &["INFO", section]).await else {
        panic!("INFO is not a bulk string");
    };
    let text = String::from_utf8(info).unwrap();
    redis_info::field(&text, name)
        .unwrap_or_else(|| panic!("INFO {section} has no {name}"))
        .parse()
        .unwrap()
}

/// The value stored at `key`, `None` when absent.
pub async fn stored(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<String> {
    match run(conn, &["GET", key]).await {
        redis::Value::Nil => None,
        redis::Value::BulkString(bytes) => Some(String::from_utf8(bytes).unwrap()),
        other => panic!("GET {key}: {other:?}"),
    }
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
