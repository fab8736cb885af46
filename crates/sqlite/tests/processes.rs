//! Several OS processes on one file: limits hold across them, and a killed
//! process loses no count it acknowledged.
//!
//! The children are this test binary itself, in a role
//! (`tollgate_test_support::processes`). The binary has its own `main`
//! (`harness = false`), so a child is not a test: without a role, `main`
//! runs the tests below and prints one line per test and a summary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{CheckId, Counter, CounterStore, Deadline, Limiter, ManualClock, Rule, Window};
use tollgate_sqlite::SqliteStore;
use tollgate_test_support::processes::{self, ChildProcess, Test};

const FILE: &str = "TOLLGATE_SQLITE_CHILD_FILE";
const KEY: &str = "TOLLGATE_SQLITE_CHILD_KEY";

/// The longest a child runs.
const CHILD_LIFETIME: Duration = Duration::from_secs(60);
/// Racers: tasks per process, checks per task one after the other, and the
/// limit they share (a third of all checks).
const TASKS: u64 = 20;
const ROUNDS: u64 = 20;
const ATTEMPTS: u64 = TASKS * ROUNDS;
const MAX: u64 = 2 * ATTEMPTS / 3;
/// A fixed time for the racers' limiter, so both count in one window.
const RACE_TIME: Duration = Duration::from_secs(1_700_000_030);

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .unwrap();
    if let Some(role) = processes::role() {
        runtime.block_on(child(&role));
        return ExitCode::SUCCESS;
    }
    let tests: [(&str, Test<()>); 3] = [
        (
            "two_processes_counting_on_one_file_never_allow_more_than_max",
            |_| Box::pin(two_processes_race(false)),
        ),
        (
            "two_processes_reserving_on_one_file_allow_exactly_max",
            |_| Box::pin(two_processes_race(true)),
        ),
        ("counts_acknowledged_before_a_kill_survive_it", |_| {
            Box::pin(counts_acknowledged_before_a_kill_survive_it())
        }),
    ];
    processes::run_tests(&runtime, &(), &tests)
}

/// What a child does in `role`.
async fn child(role: &str) {
    processes::exit_after(CHILD_LIFETIME);
    let file = std::env::var(FILE).unwrap();
    let key = std::env::var(KEY).unwrap();
    let store = SqliteStore::open(&file).unwrap();
    match role {
        "count" | "reserve" => {
            let limit = race_rule().limit(&[key]).unwrap();
            let limiter = Limiter::builder(store)
                .clock(ManualClock::new(RACE_TIME))
                .build();
            processes::race(&limiter, &limit, TASKS, ROUNDS, role == "reserve").await;
        }
        "burst" => burst(store, &key).await,
        other => panic!("unknown role {other}"),
    }
}

/// The rule both racers check, keyed by one part.
fn race_rule() -> Rule {
    Rule::new("race", MAX, Window::DAY)
        .and_then(|rule| rule.with_key(&["key"]))
        .unwrap()
}

/// A generous deadline for a direct store call.
fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(10))
}

/// Increments one counter from 16 tasks forever, printing `ACK <count>`
/// after each call has returned, until it is killed.
async fn burst(store: SqliteStore, key: &str) {
    let store = Arc::new(store);
    let counter = Counter {
        key: key.to_owned(),
        ttl: Duration::from_secs(3_600),
        cost: 1,
        max: u64::MAX,
        floor: 0,
        prior: None,
        lease: false,
    };
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (store, counter) = (Arc::clone(&store), counter.clone());
        tasks.spawn(async move {
            loop {
                let count = match store
                    .count(std::slice::from_ref(&counter), CheckId::new(), deadline())
                    .await
                {
                    Ok(counts) => counts[0],
                    Err(err) => return err,
                };
                let mut out = std::io::stdout().lock();
                writeln!(out, "ACK {count}").unwrap();
                out.flush().unwrap();
            }
        });
    }
    let stopped = tasks.join_next().await;
    panic!("a burst task stopped: {stopped:?}");
}

/// This test binary as a child in `role` on `file`.
fn spawn(role: &str, file: &Path, key: &str) -> ChildProcess {
    let file = file.display().to_string();
    ChildProcess::spawn(role, &[(FILE, &file), (KEY, key)])
}

async fn two_processes_race(reserve: bool) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.sqlite");
    let key = tollgate_test_support::unique();
    drop(SqliteStore::open(&file).unwrap());
    let role = if reserve { "reserve" } else { "count" };
    let allowed = processes::race_children((0..2).map(|_| spawn(role, &file, &key)).collect());
    eprintln!("allowed per process: {allowed:?}");
    let allowed: u64 = allowed.iter().sum();
    assert_eq!(
        allowed, MAX,
        "two processes allowed {allowed} calls for a max of {MAX}"
    );

    let store = SqliteStore::open(&file).unwrap();
    let counter_key = race_rule()
        .limit(&[key.as_str()])
        .unwrap()
        .counter_key(Window::DAY.index(RACE_TIME.as_secs()));
    let stored = store.get(&[counter_key], deadline()).await.unwrap()[0];
    let expected = if reserve { MAX } else { 2 * ATTEMPTS };
    assert_eq!(stored, expected, "every check was counted once");
}

async fn counts_acknowledged_before_a_kill_survive_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.sqlite");
    let key = format!("limit:burst:{}", tollgate_test_support::unique());
    let mut child = spawn("burst", &file, &key);
    let mut acknowledged = 0;
    for _ in 0..3_000 {
        acknowledged = acknowledged.max(child.line_after("ACK").parse::<u64>().unwrap());
    }
    child.kill(); // SIGKILL, in the middle of the burst
    // Lines written before the kill are still in the pipe; the last one may
    // be cut short by the kill, and only whole lines count.
    for line in child.rest() {
        if let Some(at) = line.find("ACK ") {
            acknowledged = acknowledged.max(line[at + 4..].trim().parse().unwrap());
        }
    }

    let store = SqliteStore::open(&file).unwrap();
    let stored = store.get(&[key], deadline()).await.unwrap()[0];
    assert!(
        stored >= acknowledged,
        "the child acknowledged count {acknowledged}, the file kept {stored}"
    );
    // At most one call per task was in flight when it died.
    assert!(
        stored <= acknowledged + 16,
        "{stored} stored, {acknowledged} acknowledged"
    );
}
