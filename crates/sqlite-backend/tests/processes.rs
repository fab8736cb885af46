//! Several OS processes on one file: limits hold across them, and a killed
//! process loses no count it acknowledged.
//!
//! The children are this test binary itself, started with
//! `TOLLGATE_SQLITE_CHILD_ROLE` set. The binary has its own `main`
//! (`harness = false`), so a child is not a test: without the variable,
//! `main` runs the tests below and prints one line per test and a summary.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{Counter, CounterStore, Deadline, Limiter, ManualClock, Rule, Window};
use tollgate_sqlite::SqliteStore;

const ROLE: &str = "TOLLGATE_SQLITE_CHILD_ROLE";
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

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
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
    type Test = fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;
    let tests: [(&str, Test); 3] = [
        (
            "two_processes_counting_on_one_file_never_allow_more_than_max",
            || Box::pin(two_processes_race(false)),
        ),
        (
            "two_processes_reserving_on_one_file_allow_exactly_max",
            || Box::pin(two_processes_race(true)),
        ),
        ("counts_acknowledged_before_a_kill_survive_it", || {
            Box::pin(counts_acknowledged_before_a_kill_survive_it())
        }),
    ];
    let mut failed = 0;
    println!("\nrunning {} tests", tests.len());
    for (name, test) in tests {
        let result = std::panic::catch_unwind(|| runtime.block_on(test()));
        println!(
            "test {name} ... {}",
            if result.is_ok() { "ok" } else { "FAILED" }
        );
        failed += usize::from(result.is_err());
    }
    println!("\n{} passed, {failed} failed\n", tests.len() - failed);
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
    let file = std::env::var(FILE).unwrap();
    let key = std::env::var(KEY).unwrap();
    let store = SqliteStore::open(&file).unwrap();
    match role {
        "count" | "reserve" => race(store, &key, role == "reserve").await,
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

/// Says READY, waits for GO on stdin, runs TASKS tasks of ROUNDS checks
/// each and prints how many were allowed.
async fn race(store: SqliteStore, key: &str, reserve: bool) {
    let limit = race_rule().limit(&[key]).unwrap();
    let limiter = Limiter::with_parts(store, ManualClock::new(RACE_TIME));
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

/// Increments one counter from 16 tasks forever, printing `ACK <count>`
/// after each call has returned, until it is killed.
async fn burst(store: SqliteStore, key: &str) {
    let store = Arc::new(store);
    let counter = Counter {
        key: key.to_owned(),
        ttl: Duration::from_secs(3_600),
        cost: 1,
        max: u64::MAX,
    };
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let (store, counter) = (Arc::clone(&store), counter.clone());
        tasks.spawn(async move {
            loop {
                let count = match store
                    .count(std::slice::from_ref(&counter), deadline())
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

/// Starts this test binary as a child in `role` on `file`.
fn spawn(role: &str, file: &Path, key: &str) -> (Child, BufReader<ChildStdout>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .env(ROLE, role)
        .env(FILE, file)
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

async fn two_processes_race(reserve: bool) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("limits.sqlite");
    let key = tollgate_test_support::unique();
    drop(SqliteStore::open(&file).unwrap());
    let role = if reserve { "reserve" } else { "count" };
    let mut children: Vec<_> = (0..2).map(|_| spawn(role, &file, &key)).collect();
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
    let (mut child, mut out) = spawn("burst", &file, &key);
    let mut acknowledged = 0;
    for _ in 0..3_000 {
        acknowledged = acknowledged.max(line_after(&mut out, "ACK").parse::<u64>().unwrap());
    }
    child.kill().unwrap(); // SIGKILL, in the middle of the burst
    child.wait().unwrap();
    // Lines written before the kill are still in the pipe.
    let mut line = String::new();
    while out.read_line(&mut line).unwrap() > 0 {
        // The last line may be cut short by the kill: only whole lines count.
        if let (Some(at), true) = (line.find("ACK "), line.ends_with('\n')) {
            acknowledged = acknowledged.max(line[at + 4..].trim().parse().unwrap());
        }
        line.clear();
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
