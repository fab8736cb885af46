//! Retries and outages on a real file: a reply delayed by another
//! connection's write lock is awaited, and the one lost after the write is
//! recognised by its id on retry (applied once); two attempts of one call
//! queued together apply once; expired call records go without a sweep;
//! and the limiter's breaker opens while the write lock is held past the
//! checks' budget, then closes once it is free.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::Connection;
use tollgate_core::observe::Op;
use tollgate_core::{
    BreakerPolicy, CheckId, Clock, Counter, CounterStore, Deadline, Error, Fault, Faulty, Limit,
    Limiter, ManualClock, RetryPolicy, Rule, StoreError, Window,
};
use tollgate_sqlite::{SqliteOptions, SqliteStore};

/// A fixed time, so that every check of a test counts in one window.
const NOW: Duration = Duration::from_secs(1_700_000_030);

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

fn limit(name: &str, max: u64) -> Limit {
    Rule::new(name, max, Window::DAY)
        .and_then(|rule| rule.with_key(&["id"]))
        .and_then(|rule| rule.limit(&[tollgate_test_support::unique()]))
        .unwrap()
}

/// The stored count of `limit` in the test's window.
async fn stored(store: &SqliteStore, limit: &Limit) -> u64 {
    let key = limit.counter_key(Window::DAY.index(NOW.as_secs()));
    let deadline = Deadline::after(Duration::from_secs(10));
    store.get(&[key], deadline).await.unwrap()[0]
}

/// Eight reservations through the default limiter (50 ms per attempt in a
/// 350 ms budget) while another connection holds the write lock for 150
/// ms: every reply comes late, and is awaited, not retried; the first
/// reply is then lost as a connection broken after the write would lose
/// it, and its retry is answered from the call's record. Every caller is
/// admitted, and the file counts each exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_delayed_by_a_held_lock_are_applied_once_even_when_one_is_lost() {
    const CALLERS: u64 = 8;
    const HOLD: Duration = Duration::from_millis(150);
    let (_dir, path) = file();
    let store = SqliteStore::open(&path).unwrap();
    let faulty = std::sync::Arc::new(Faulty::new(store.clone()));
    let limiter = Limiter::builder(std::sync::Arc::clone(&faulty))
        .clock(ManualClock::new(NOW))
        .build();
    let limit = limit("delayed", 1_000);
    // The counter exists before the lock is taken.
    assert!(
        limiter
            .reserve(std::slice::from_ref(&limit))
            .await
            .unwrap()
            .is_allowed()
    );
    let before = faulty.calls_to(Op::Reserve);

    faulty.set(Fault::LoseReply);
    let holder = hold_lock(&path, HOLD);
    let started = Instant::now();
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (limiter, limits) = (limiter.clone(), [limit.clone()]);
            tokio::spawn(async move {
                let verdict = limiter.reserve(&limits).await;
                (verdict.map(|v| v.is_allowed()), started.elapsed())
            })
        })
        .collect();
    let mut admitted = 1;
    for caller in callers {
        let (verdict, took) = caller.await.unwrap();
        assert!(
            took >= HOLD - Duration::from_millis(5),
            "answered in {took:?}, while the lock was held"
        );
        match verdict {
            Ok(true) => admitted += 1,
            other => panic!("a delayed reservation answered {other:?} after {took:?}"),
        }
    }
    tokio::task::spawn_blocking(move || holder.join().unwrap())
        .await
        .unwrap();
    let attempts = faulty.calls_to(Op::Reserve) - before;
    assert_eq!(
        attempts,
        CALLERS as usize + 1,
        "{CALLERS} reservations took {attempts} attempts: only the lost reply is retried"
    );
    assert_eq!(admitted, CALLERS + 1);
    assert_eq!(
        stored(&store, &limit).await,
        admitted,
        "the file counts {} for {admitted} admitted reservations",
        stored(&store, &limit).await
    );
}

fn counter(key: &str, cost: u64, max: u64) -> Counter {
    Counter {
        key: key.to_owned(),
        ttl: Duration::from_secs(3_600),
        cost,
        max,
        floor: 0,
        prior: None,
        lease: false,
    }
}

/// A call and its retry queued together behind a held lock (behind a
/// third call, which the worker holds while it waits for the lock), so
/// that the worker runs them in one batch: the first applies, the second
/// answers what it applied, for a count, a reservation and a refund.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_attempts_of_one_call_in_one_batch_apply_once() {
    let (_dir, path) = file();
    let store = SqliteStore::open(&path).unwrap();
    let key = format!("limit:twice:{}", tollgate_test_support::unique());
    let other = format!("limit:other:{}", tollgate_test_support::unique());
    let deadline = || Deadline::after(Duration::from_secs(5));
    let twice = async |call: &dyn Fn() -> tokio::task::JoinHandle<Vec<u64>>| {
        let holder = hold_lock(&path, Duration::from_millis(100));
        let (s, ahead) = (store.clone(), [counter(&other, 1, 10)]);
        let ahead = tokio::spawn(async move { s.count(&ahead, CheckId::new(), deadline()).await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (first, second) = (call(), call());
        let (first, second) = (first.await.unwrap(), second.await.unwrap());
        ahead.await.unwrap().unwrap();
        tokio::task::spawn_blocking(move || holder.join().unwrap())
            .await
            .unwrap();
        assert_eq!(first, second, "two attempts of one call answered otherwise");
        first
    };

    let (id, s, batch) = (CheckId::new(), store.clone(), vec![counter(&key, 3, 10)]);
    let count = move || {
        let (s, batch) = (s.clone(), batch.clone());
        tokio::spawn(async move { s.count(&batch, id, deadline()).await.unwrap() })
    };
    assert_eq!(twice(&count).await, [3]);

    let (id, s, batch) = (CheckId::new(), store.clone(), vec![counter(&key, 4, 10)]);
    let reserve = move || {
        let (s, batch) = (s.clone(), batch.clone());
        tokio::spawn(async move {
            let reservation = s.reserve(&batch, id, deadline()).await.unwrap();
            assert!(reservation.applied, "3 + 4 fits 10");
            reservation.counts
        })
    };
    assert_eq!(twice(&reserve).await, [7]);

    let (id, s, batch) = (CheckId::new(), store.clone(), vec![counter(&key, 2, 10)]);
    let refund = move || {
        let (s, batch) = (s.clone(), batch.clone());
        tokio::spawn(async move { s.refund(&batch, id, deadline()).await.unwrap() })
    };
    assert_eq!(twice(&refund).await, [5]);
    let read = store.get(&[key], deadline()).await.unwrap();
    assert_eq!(read, [5], "an attempt of a call was applied twice");
}

/// How many call records the file holds, and how many of them have
/// expired by `now`.
fn records(path: &Path, now: Duration) -> (i64, i64) {
    let conn = Connection::open(path).unwrap();
    let now = i64::try_from(now.as_millis()).unwrap();
    conn.query_row(
        "SELECT count(*), count(*) FILTER (WHERE expires_at <= ?1) FROM calls",
        [now],
        |row| Ok((row.get(0)?, row.get(1)?)),
    )
    .unwrap()
}

/// With the sweep never due, counter calls remove the expired call
/// records themselves (a bounded number now and then), so the table holds
/// about the records of the last budget; reads remove none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_call_records_are_removed_by_counter_calls_without_a_sweep() {
    let (_dir, path) = file();
    let clock = ManualClock::new(NOW);
    let day = Duration::from_secs(86_400);
    let options = SqliteOptions::default()
        .clock(clock.clone())
        .sweep(day, 10_000);
    let store = SqliteStore::open_with(&path, options).unwrap();
    let key = format!("limit:records:{}", tollgate_test_support::unique());
    let batch = [counter(&key, 1, u64::MAX)];
    // A budget of one second: each record lives 1.02 s on the store's clock.
    let deadline = || Deadline::after(Duration::from_secs(1));
    for _ in 0..100 {
        store
            .count(&batch, CheckId::new(), deadline())
            .await
            .unwrap();
    }
    assert_eq!(records(&path, clock.now()), (100, 0));
    clock.advance(Duration::from_secs(2));
    assert_eq!(records(&path, clock.now()), (100, 100));
    for _ in 0..50 {
        store
            .get(std::slice::from_ref(&key), deadline())
            .await
            .unwrap();
    }
    assert_eq!(records(&path, clock.now()), (100, 100), "a read purged");
    for _ in 0..100 {
        store
            .count(&batch, CheckId::new(), deadline())
            .await
            .unwrap();
    }
    let (held, expired) = records(&path, clock.now());
    assert_eq!(expired, 0, "{expired} expired records are left");
    assert_eq!(held, 100, "only the live records are kept");
}

/// A limit through a limiter with a short retry policy (two attempts of
/// 100 ms, 20 ms apart: a budget of 220 ms) and the default breaker (5
/// failures over at least 500 ms, a probe every 200 ms at least). Another connection holds the
/// write lock for 3 s: the first checks wait out their budget and fail;
/// after 5 transient failures over 500 ms, checks are answered unavailable
/// at once,
/// the store skipped (fail-closed); once the lock is free, the next probe
/// succeeds and checks reach the file again. Nothing answered unavailable
/// was counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_opens_while_the_write_lock_is_held_and_closes_after() {
    const HOLD: Duration = Duration::from_millis(3_000);
    let short = RetryPolicy {
        retries: 1,
        delay: Duration::from_millis(20),
        timeout: Duration::from_millis(100),
    };
    let budget = short.worst_case();
    let (_dir, path) = file();
    let store = SqliteStore::open(&path).unwrap();
    let limiter = Limiter::builder(store.clone())
        .clock(ManualClock::new(NOW))
        .retry(short)
        .breaker(BreakerPolicy::default())
        .build();
    let limits = [limit("breaker", 1_000)];
    assert!(limiter.reserve(&limits).await.unwrap().is_allowed());
    let mut admitted = 1;

    let holder = hold_lock(&path, HOLD);
    let held = Instant::now();
    // Until the breaker opens: checks that reached the store and failed.
    let mut failed = 0;
    let opened = loop {
        let started = Instant::now();
        match limiter.reserve(&limits).await {
            Err(Error::Unavailable(StoreError::Open)) => break started.elapsed(),
            Err(Error::Unavailable(err)) => {
                assert!(err.is_transient(), "{err:?}");
                failed += 1;
            }
            other => panic!("a check during the held lock answered {other:?}"),
        }
        assert!(
            held.elapsed() < HOLD - Duration::from_millis(1_000),
            "the breaker did not open after {failed} failed checks"
        );
    };
    // `failures` failed attempts (one or two per check, each up to the
    // budget) over at least `failing_for`: then the next check skips the
    // store.
    let breaker = BreakerPolicy::default();
    let opened_after = held.elapsed();
    assert!(
        failed >= breaker.failures.div_ceil(2),
        "the breaker opened after {failed} failed checks"
    );
    assert!(
        opened_after <= breaker.failing_for.max(budget * breaker.failures) + budget * 2,
        "the breaker opened {opened_after:?} after the store went, {failed} failed checks"
    );
    eprintln!("opened after {failed} checks, {opened_after:?} into the hold");
    // While open: answered at once, except a probe now and then, which
    // goes to the store and fails like the checks before.
    let mut fast = vec![opened];
    let mut probes = 0;
    while held.elapsed() < HOLD - Duration::from_millis(300) {
        let started = Instant::now();
        match limiter.reserve(&limits).await {
            Err(Error::Unavailable(StoreError::Open)) => fast.push(started.elapsed()),
            Err(Error::Unavailable(err)) if err.is_transient() => probes += 1,
            other => panic!("a check while the breaker is open answered {other:?}"),
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    fast.sort();
    let slowest = fast[fast.len() - 1];
    eprintln!(
        "{} checks skipped the store (median {:?}, slowest {slowest:?}), {probes} probes failed",
        fast.len(),
        fast[fast.len() / 2]
    );
    assert!(
        fast.len() >= 20,
        "only {} checks answered at once",
        fast.len()
    );
    assert!(
        slowest < budget / 10,
        "a check answered by the open breaker took {slowest:?} of a {budget:?} budget"
    );
    assert!(probes <= 8, "{probes} probes in under 2 s, 200 ms apart");

    tokio::task::spawn_blocking(move || holder.join().unwrap())
        .await
        .unwrap();
    tokio::time::sleep(BreakerPolicy::default().probe_every + Duration::from_millis(50)).await;
    let probe = limiter.reserve(&limits).await;
    assert!(
        matches!(probe, Ok(ref verdict) if verdict.is_allowed()),
        "the probe after the lock was released answered {probe:?}"
    );
    admitted += 1;
    for _ in 0..5 {
        assert!(limiter.reserve(&limits).await.unwrap().is_allowed());
        admitted += 1;
    }
    assert_eq!(
        stored(&store, &limits[0]).await,
        admitted,
        "the checks after the probe reached the file, and no failed one was counted"
    );
}
