//! The server crashing, frozen and restarted, each test on a private
//! server of its own (fsync on): acknowledged counts survive a crash, a
//! frozen server costs a check its bound and nothing more, and stores
//! (eager and lazy) recover when the server is back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate_core::{
    CounterStore, Deadline, Limiter, ManualClock, RetryPolicy, Rule, StoreError, Window,
};
use tollgate_postgres::{PostgresOptions, PostgresStore};
use tollgate_test_support::postgres_server::PostgresServer;

/// A fixed time, so that every check of a test counts in one window.
const NOW: Duration = Duration::from_secs(1_700_000_030);

fn start() -> PostgresServer {
    tokio::task::block_in_place(PostgresServer::start)
}

fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(5))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_acknowledged_before_a_crash_survive_it() {
    const TASKS: u64 = 16;
    let mut server = start();
    let schema = support::unique_schema();
    let store = support::open(&server.url(), &schema).await;
    let rule = Rule::new("crash", 1_000_000, Window::DAY)
        .unwrap()
        .with_key(&["id"])
        .unwrap();
    let limit = rule.limit(&[tollgate_test_support::unique()]).unwrap();
    let key = limit.counter_key(Window::DAY.index(NOW.as_secs()));
    // One attempt per check, so that no check is counted twice: at most
    // one call per task is in flight, unacknowledged, when the server dies.
    let once = RetryPolicy {
        retries: 0,
        delay: Duration::ZERO,
        timeout: Duration::from_secs(2),
    };
    let limiter = Limiter::builder(store.clone())
        .clock(ManualClock::new(NOW))
        .retry(once)
        .build();
    let acknowledged = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (limiter, limits, acked) =
                (limiter.clone(), [limit.clone()], Arc::clone(&acknowledged));
            tokio::spawn(async move {
                while let Ok(verdict) = limiter.count(&limits).await {
                    assert!(verdict.is_allowed());
                    acked.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    while acknowledged.load(Ordering::SeqCst) < 400 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::task::block_in_place(|| server.stop_immediate());
    for task in tasks {
        task.await.unwrap();
    }
    let acknowledged = acknowledged.load(Ordering::SeqCst);
    tokio::task::block_in_place(|| server.restart());

    // The same store, its connections to the dead server now closed.
    let mut stored = None;
    for _ in 0..3 {
        match store.get(std::slice::from_ref(&key), deadline()).await {
            Ok(counts) => {
                stored = Some(counts[0]);
                break;
            }
            Err(err) => assert!(err.is_transient(), "{err:?}"),
        }
    }
    let stored = stored.unwrap_or_else(|| panic!("the store did not recover"));
    eprintln!("acknowledged {acknowledged}, stored {stored} after the crash");
    assert!(
        stored >= acknowledged,
        "{acknowledged} checks acknowledged, {stored} survived the crash"
    );
    assert!(
        stored <= acknowledged + TASKS,
        "{stored} stored, {acknowledged} acknowledged, at most {TASKS} in flight"
    );
}

/// A frozen server (every process stopped): checks through the default
/// limiter answer within its bound, by policy; once it thaws, nothing
/// answered as failed was applied, and checks are allowed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_server_bounds_checks_and_applies_nothing_they_gave_up() {
    let mut server = start();
    let schema = support::unique_schema();
    let store = support::open(&server.url(), &schema).await;
    let limiter = Limiter::builder(store.clone())
        .clock(ManualClock::new(NOW))
        .build();
    let rule = Rule::new("frozen", 100, Window::DAY)
        .unwrap()
        .with_key(&["id"])
        .unwrap();
    let limits = [rule.limit(&[tollgate_test_support::unique()]).unwrap()];
    let key = limits[0].counter_key(Window::DAY.index(NOW.as_secs()));
    let mut allowed = 0;
    for _ in 0..3 {
        allowed += u64::from(limiter.count(&limits).await.unwrap().is_allowed());
    }

    server.freeze();
    for round in 0..2 {
        let started = Instant::now();
        let closed = limiter.count(&limits).await;
        let took = started.elapsed();
        assert!(
            matches!(&closed, Err(e) if e.is_unavailable()),
            "round {round}: a frozen store answered {closed:?}"
        );
        assert!(took < Duration::from_secs(1), "fail-closed took {took:?}");

        let started = Instant::now();
        let reserved = limiter.reserve(&limits).await;
        assert!(matches!(&reserved, Err(e) if e.is_unavailable()));
        assert!(started.elapsed() < Duration::from_secs(1));

        let started = Instant::now();
        let open = limiter.within(&limits).await;
        let took = started.elapsed();
        assert!(open.is_allowed() && open.is_degraded(), "{open:?}");
        assert!(took < Duration::from_secs(1), "fail-open took {took:?}");
    }
    server.thaw();

    // The statements sent while frozen run now, past their deadline.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut stored = None;
    for _ in 0..3 {
        match store.get(std::slice::from_ref(&key), deadline()).await {
            Ok(counts) => {
                stored = Some(counts[0]);
                break;
            }
            Err(err) => assert!(err.is_transient(), "{err:?}"),
        }
    }
    assert_eq!(
        stored,
        Some(allowed),
        "only the checks answered allowed were counted"
    );
    // Checks are allowed again (one attempt with time to spare, so that a
    // loaded machine neither fails it nor counts it twice).
    let once = RetryPolicy {
        retries: 0,
        delay: Duration::ZERO,
        timeout: Duration::from_secs(5),
    };
    let after = Limiter::builder(store.clone())
        .clock(ManualClock::new(NOW))
        .retry(once)
        .build();
    let verdict = after.count(&limits).await.unwrap();
    assert!(verdict.is_allowed() && !verdict.is_degraded());
    let client = support::client(&server.url()).await;
    assert_eq!(
        support::stored(&client, &schema, &key).await,
        Some(allowed as i64 + 1)
    );
}

/// A lazily connected store on a server that is down fails transiently,
/// then works once the server is up; an opened store recovers from a
/// restart by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_recover_when_the_server_comes_back() {
    let mut server = start();
    let schema = support::unique_schema();
    let opened = support::open(&server.url(), &schema).await;
    tokio::task::block_in_place(|| server.stop_immediate());
    let lazy =
        PostgresStore::connect_lazy(&server.url(), PostgresOptions::default().schema(&schema))
            .unwrap();
    let key = vec![format!("limit:back:{}", tollgate_test_support::unique())];
    for store in [&lazy, &opened] {
        match store.get(&key, deadline()).await {
            Err(err @ StoreError::Connection(_)) => assert!(err.is_transient()),
            other => panic!("a store on a stopped server answered {other:?}"),
        }
    }
    tokio::task::block_in_place(|| server.restart());
    for store in [&lazy, &opened] {
        assert_eq!(store.get(&key, deadline()).await.unwrap(), [0]);
    }
}
