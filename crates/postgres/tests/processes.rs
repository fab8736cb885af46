//! Two OS processes racing on one database: limits hold across them.
//!
//! The children are this test binary itself, in a role
//! (`tollgate_test_support::processes`). The binary has its own `main`
//! (`harness = false`), so a child is not a test: without a role, `main`
//! runs the tests below and prints one line per test and a summary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::ExitCode;
use std::time::Duration;

use tollgate_core::{CounterStore, Deadline, Limiter, ManualClock, RetryPolicy, Rule, Window};
use tollgate_test_support::postgres_server::{PostgresServer, PostgresServerOptions};
use tollgate_test_support::processes::{self, ChildProcess, Test};

const URL: &str = "TOLLGATE_POSTGRES_CHILD_URL";
const SCHEMA: &str = "TOLLGATE_POSTGRES_CHILD_SCHEMA";
const KEY: &str = "TOLLGATE_POSTGRES_CHILD_KEY";

/// The longest a child runs.
const CHILD_LIFETIME: Duration = Duration::from_secs(60);
/// Racers: tasks per process, checks per task one after the other, and the
/// limit they share (a third of all checks).
const TASKS: u64 = 20;
const ROUNDS: u64 = 15;
const ATTEMPTS: u64 = TASKS * ROUNDS;
const MAX: u64 = 2 * ATTEMPTS / 3;
/// A fixed time for the racers' limiter, so both count in one window.
const RACE_TIME: Duration = Duration::from_secs(1_700_000_030);
/// One attempt per check, with time to spare: a retried count could be
/// counted twice, which would make the exact sums below fail.
const ONCE: RetryPolicy = RetryPolicy {
    retries: 0,
    delay: Duration::ZERO,
    timeout: Duration::from_secs(10),
};

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if let Some(role) = processes::role() {
        runtime.block_on(child(&role));
        return ExitCode::SUCCESS;
    }
    let tests: [(&str, Test<PostgresServer>); 2] = [
        (
            "two_processes_counting_on_one_database_never_allow_more_than_max",
            |server| Box::pin(two_processes_race(server, false)),
        ),
        (
            "two_processes_reserving_on_one_database_allow_exactly_max",
            |server| Box::pin(two_processes_race(server, true)),
        ),
    ];
    // Durability is not what these tests are about: no fsync.
    let server = PostgresServer::start_with(PostgresServerOptions::default().fsync(false));
    processes::run_tests(&runtime, &server, &tests)
}

/// What a child does in `role`.
async fn child(role: &str) {
    processes::exit_after(CHILD_LIFETIME);
    let url = std::env::var(URL).unwrap();
    let schema = std::env::var(SCHEMA).unwrap();
    let key = std::env::var(KEY).unwrap();
    let store = support::open(&url, &schema).await;
    let reserve = match role {
        "count" => false,
        "reserve" => true,
        other => panic!("unknown role {other}"),
    };
    let limit = rule().limit(&[key]).unwrap();
    let limiter = Limiter::builder(store)
        .clock(ManualClock::new(RACE_TIME))
        .retry(ONCE)
        .build();
    // Every connection of the pool open before the race starts.
    let warm: Vec<_> = (0..TASKS)
        .map(|_| {
            let store = std::sync::Arc::clone(limiter.store());
            let deadline = Deadline::after(Duration::from_secs(5));
            tokio::spawn(async move { store.get(&["warm".to_owned()], deadline).await })
        })
        .collect();
    for task in warm {
        task.await.unwrap().unwrap();
    }
    processes::race(&limiter, &limit, TASKS, ROUNDS, reserve).await;
}

fn rule() -> Rule {
    Rule::new("race", MAX, Window::DAY)
        .unwrap()
        .with_key(&["id"])
        .unwrap()
}

async fn two_processes_race(server: &PostgresServer, reserve: bool) {
    let url = server.url();
    let schema = support::unique_schema();
    let key = tollgate_test_support::unique();
    let store = support::open(&url, &schema).await;
    let role = if reserve { "reserve" } else { "count" };
    let env = [
        (URL, url.as_str()),
        (SCHEMA, schema.as_str()),
        (KEY, key.as_str()),
    ];
    let allowed =
        processes::race_children((0..2).map(|_| ChildProcess::spawn(role, &env)).collect());
    eprintln!("allowed per process: {allowed:?}");
    let allowed: u64 = allowed.iter().sum();
    assert_eq!(
        allowed, MAX,
        "two processes allowed {allowed} calls for a max of {MAX}"
    );
    let counter_key = rule()
        .limit(&[key.as_str()])
        .unwrap()
        .counter_key(Window::DAY.index(RACE_TIME.as_secs()));
    let deadline = Deadline::after(Duration::from_secs(5));
    let stored = store.get(&[counter_key], deadline).await.unwrap()[0];
    let expected = if reserve { MAX } else { 2 * ATTEMPTS };
    assert_eq!(stored, expected, "every check was counted once");
}
