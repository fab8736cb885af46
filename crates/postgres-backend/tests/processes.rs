//! Two OS processes racing on one database: limits hold across them.
//!
//! The children are this test binary itself, started with
//! `TOLLGATE_POSTGRES_CHILD_ROLE` set. The binary has its own `main`
//! (`harness = false`), so a child is not a test: without the variable,
//! `main` runs the tests below and prints one line per test and a summary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::Duration;

use tollgate_core::{CounterStore, Deadline, Limiter, ManualClock, RetryPolicy, Rule, Window};
use tollgate_postgres::PostgresStore;
use tollgate_test_support::postgres_server::{PostgresServer, PostgresServerOptions};

const ROLE: &str = "TOLLGATE_POSTGRES_CHILD_ROLE";
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

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    match std::env::var(ROLE) {
        Ok(role) => runtime.block_on(child(&role)),
        Err(_) => run_tests(&runtime),
    }
}

/// The tests of this binary, run one after the other; exits non-zero when one fails.
fn run_tests(runtime: &tokio::runtime::Runtime) {
    type Test =
        fn(&PostgresServer) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>>;
    let tests: [(&str, Test); 2] = [
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
    let mut failed = 0;
    println!("\nrunning {} tests", tests.len());
    for (name, test) in tests {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            runtime.block_on(test(&server))
        }));
        println!(
            "test {name} ... {}",
            if result.is_ok() { "ok" } else { "FAILED" }
        );
        failed += usize::from(result.is_err());
    }
    println!("\n{} passed, {failed} failed\n", tests.len() - failed);
    drop(server);
    if failed > 0 {
        std::process::exit(101);
    }
}

/// What a child does, chosen by the parent through the environment.
async fn child(role: &str) {
    // A child never outlives a stuck parent by long: the parent then sees
    // its output end and fails instead of hanging.
    std::thread::spawn(|| {
        std::thread::sleep(CHILD_LIFETIME);
        std::process::exit(2);
    });
    let url = std::env::var(URL).unwrap();
    let schema = std::env::var(SCHEMA).unwrap();
    let key = std::env::var(KEY).unwrap();
    let store = support::open(&url, &schema).await;
    match role {
        "count" | "reserve" => race(store, &key, role == "reserve").await,
        other => panic!("unknown role {other}"),
    }
}

fn rule() -> Rule {
    Rule::new("race", MAX, Window::DAY)
        .unwrap()
        .with_key(&["id"])
        .unwrap()
}

/// Says READY, waits for GO on stdin, runs TASKS tasks of ROUNDS checks
/// each and prints how many were allowed.
async fn race(store: PostgresStore, key: &str, reserve: bool) {
    let limit = rule().limit(&[key]).unwrap();
    let limiter = Limiter::with_parts(store, ManualClock::new(RACE_TIME)).with_retry(ONCE);
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
    println!("READY");
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (limiter, limits) = (limiter.clone(), [limit.clone()]);
            tokio::spawn(async move {
                let mut allowed = 0;
                for _ in 0..ROUNDS {
                    let verdict = if reserve {
                        limiter.reserve(&limits).await
                    } else {
                        limiter.count(&limits).await
                    };
                    allowed += u64::from(verdict.unwrap().is_allowed());
                }
                allowed
            })
        })
        .collect();
    let mut allowed = 0;
    for task in tasks {
        allowed += task.await.unwrap();
    }
    println!("ALLOWED {allowed}");
}

/// Starts this test binary as a child in `role`.
fn spawn(role: &str, url: &str, schema: &str, key: &str) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(ROLE, role)
        .env(URL, url)
        .env(SCHEMA, schema)
        .env(KEY, key)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    (child, stdout)
}

/// What follows `prefix` in the first line of `out` holding it.
fn line_after(out: &mut BufReader<ChildStdout>, prefix: &str) -> String {
    let mut line = String::new();
    loop {
        line.clear();
        assert_ne!(
            out.read_line(&mut line).unwrap(),
            0,
            "child ended before printing {prefix}"
        );
        if let Some(at) = line.find(prefix) {
            return line[at + prefix.len()..].trim().to_owned();
        }
    }
}

async fn two_processes_race(server: &PostgresServer, reserve: bool) {
    let url = server.url();
    let schema = support::unique_schema();
    let key = tollgate_test_support::unique();
    let store = support::open(&url, &schema).await;
    let role = if reserve { "reserve" } else { "count" };
    let mut children: Vec<_> = (0..2).map(|_| spawn(role, &url, &schema, &key)).collect();
    for (_, out) in &mut children {
        line_after(out, "READY");
    }
    for (child, _) in &mut children {
        writeln!(child.stdin.as_mut().unwrap(), "GO").unwrap();
    }
    let mut allowed = Vec::new();
    for (child, out) in &mut children {
        allowed.push(line_after(out, "ALLOWED").parse::<u64>().unwrap());
        assert!(child.wait().unwrap().success());
    }
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
