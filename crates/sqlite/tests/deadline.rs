//! The store-side deadline: while another connection holds the file's
//! write lock, calls wait no longer than their deadline, and a call whose
//! caller was answered with an error (503, degraded) is never applied when
//! the lock comes free. What was answered allowed is exactly what the file
//! holds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rusqlite::Connection;
use tollgate_core::{
    CheckId, Clock, Counter, CounterStore, Deadline, Deliveries, Limiter, ManualClock, RetryPolicy,
    Rule, StoreError, Window,
};
use tollgate_sqlite::SqliteStore;

/// How long the other connection holds the write lock: several times a
/// check's whole budget (350 ms), so checks fail during it.
const HOLD: Duration = Duration::from_millis(1_500);

/// Checks flowing before the hold and after it.
const AROUND: Duration = Duration::from_millis(400);

/// Another connection on `path` takes the write lock and keeps it for
/// `hold`, on its own thread; returns once the lock is held.
fn hold_lock(path: &Path, hold: Duration) -> std::thread::JoinHandle<()> {
    let (held, is_held) = std::sync::mpsc::channel();
    let path = path.to_owned();
    let holder = std::thread::spawn(move || {
        let other = Connection::open(path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        held.send(()).unwrap();
        std::thread::sleep(hold);
        other.execute_batch("COMMIT").unwrap();
    });
    is_held.recv().unwrap();
    holder
}

fn file() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("limits.sqlite");
    (dir, path)
}

/// What one caller saw: calls answered allowed, and calls answered with
/// the store's failure (503 fail-closed, degraded fail-open).
#[derive(Debug, Default)]
struct Seen {
    allowed: u64,
    failed: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn checks_answered_unavailable_or_degraded_during_a_held_lock_spend_nothing() {
    let (_dir, path) = file();
    let store = SqliteStore::open(&path).unwrap();
    // A fixed window: the test may not straddle the end of a day.
    let clock = ManualClock::starting_now();
    let limiter = Limiter::builder(store.clone()).clock(clock.clone()).build();
    let rule = |name| {
        Rule::new(name, 1_000_000, Window::DAY)
            .and_then(|rule| rule.with_key(&["caller"]))
            .unwrap()
    };
    let (closed, open) = (rule("closed"), rule("open"));
    let stop = Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = (0..16)
        .map(|i| {
            let fail_closed = i % 2 == 0;
            let rule = if fail_closed { &closed } else { &open };
            let limit = rule.limit(&[format!("caller-{i}")]).unwrap();
            let (limiter, stop) = (limiter.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                let limits = [limit.clone()];
                let mut seen = Seen::default();
                while !stop.load(Ordering::SeqCst) {
                    let applied = if fail_closed {
                        match limiter.reserve(&limits).await {
                            Ok(verdict) => verdict.is_allowed(),
                            Err(err) if err.is_unavailable() => false,
                            Err(err) => panic!("{err:?}"),
                        }
                    } else {
                        let verdict = limiter.within(&limits).await;
                        verdict.is_allowed() && !verdict.is_degraded()
                    };
                    if applied {
                        seen.allowed += 1;
                    } else {
                        seen.failed += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                (limit, seen)
            })
        })
        .collect();

    tokio::time::sleep(AROUND).await;
    let holder = hold_lock(&path, HOLD);
    tokio::task::spawn_blocking(move || holder.join().unwrap())
        .await
        .unwrap();
    tokio::time::sleep(AROUND).await;
    stop.store(true, Ordering::SeqCst);

    let index = Window::DAY.index(clock.now().as_secs());
    let (mut allowed, mut failed) = (0, 0);
    for caller in callers {
        let (limit, seen) = caller.await.unwrap();
        let key = limit.counter_key(index);
        let deadline = Deadline::after(Duration::from_secs(10));
        let stored = store
            .get(std::slice::from_ref(&key), deadline)
            .await
            .unwrap()[0];
        assert_eq!(
            stored, seen.allowed,
            "{key}: the caller was answered allowed {} times and failed {} times; \
             the file counted {stored}",
            seen.allowed, seen.failed
        );
        allowed += seen.allowed;
        failed += seen.failed;
    }
    eprintln!("{allowed} checks allowed, {failed} failed while the lock was held");
    assert!(failed >= 16, "the held lock failed only {failed} checks");
    assert!(
        allowed >= 32,
        "only {allowed} checks allowed around the hold"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_begun_in_vain_during_a_held_lock_begins_exactly_once_after_it() {
    let (_dir, path) = file();
    let store = SqliteStore::open(&path).unwrap();
    let deliveries = Deliveries::new(store, "github-delivery:").unwrap();
    let holder = hold_lock(&path, HOLD);
    let began = tokio::time::Instant::now();
    let during = deliveries.begin("held-delivery").await;
    let waited = began.elapsed();
    let err = during.expect_err("begin succeeded while the file was locked");
    assert!(err.is_unavailable(), "{err:?}");
    assert!(
        waited < Duration::from_millis(600),
        "begin waited {waited:?}, past its 350 ms budget"
    );
    tokio::task::spawn_blocking(move || holder.join().unwrap())
        .await
        .unwrap();

    let first = deliveries.begin("held-delivery").await.unwrap();
    let first = first.expect(
        "the delivery was held after the lock came free: a claim answered with an error was applied",
    );
    assert!(
        deliveries.begin("held-delivery").await.unwrap().is_none(),
        "begun twice"
    );
    first.complete().await.unwrap();
    assert!(deliveries.begin("held-delivery").await.unwrap().is_none());
}

/// A limiter whose retry policy is not the default (one attempt of 20 ms)
/// facing a file whose write lock another connection holds. Its deadline
/// is what the worker waits for the lock by: the worker gives up on the
/// abandoned check at that deadline, not at a default check's budget
/// (350 ms), so a call made right after, still during the lock, is tried
/// against the lock and answered (a timeout) at its own deadline, 150 ms,
/// rather than left queued behind a wait on the abandoned check's behalf
/// (answered when that wait ends, at 350 ms). Once the lock comes free,
/// the failed check is found to have applied nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_retry_policy_bounds_how_long_the_worker_waits_for_a_held_lock() {
    let (_dir, path) = file();
    let store = SqliteStore::open(&path).unwrap();
    let short = RetryPolicy {
        retries: 0,
        delay: Duration::from_millis(10),
        timeout: Duration::from_millis(20),
    };
    let clock = ManualClock::starting_now();
    let limiter = Limiter::builder(store.clone())
        .clock(clock.clone())
        .retry(short)
        .build();
    let limits = [Rule::new("short", 100, Window::DAY)
        .and_then(|rule| rule.with_key(&["caller"]))
        .and_then(|rule| rule.limit(&["c"]))
        .unwrap()];
    // Longer than a default check's budget, with room to spare: a worker
    // still waiting on the first check's behalf is waiting through the
    // second call's whole deadline.
    let holder = hold_lock(&path, Duration::from_millis(700));

    let during = limiter.count(&limits).await;
    assert!(
        matches!(&during, Err(err) if err.is_unavailable()),
        "a check during the lock answered {during:?}"
    );
    let probe = Counter {
        key: "limit:probe:1".into(),
        ttl: Duration::from_secs(60),
        cost: 1,
        max: 10,
        floor: 0,
        prior: None,
        lease: false,
    };
    let made = std::time::Instant::now();
    let next = store
        .count(
            &[probe],
            CheckId::new(),
            Deadline::after(Duration::from_millis(150)),
        )
        .await;
    let took = made.elapsed();
    assert!(
        matches!(next, Err(StoreError::Timeout(_))),
        "the call during the lock answered {next:?}"
    );
    assert!(
        took < Duration::from_millis(250),
        "the call after the abandoned check was answered after {took:?}, not at its own \
         deadline (150 ms): the worker was still waiting for the lock on the abandoned \
         check's behalf"
    );

    tokio::task::spawn_blocking(move || holder.join().unwrap())
        .await
        .unwrap();
    let key = limits[0].counter_key(Window::DAY.index(clock.now().as_secs()));
    let deadline = Deadline::after(Duration::from_secs(10));
    assert_eq!(
        store.get(&[key], deadline).await.unwrap(),
        [0],
        "the check answered unavailable was applied"
    );
}
