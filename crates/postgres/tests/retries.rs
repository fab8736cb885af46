//! Retries and outages on a real server: replies delayed by another
//! session's row lock are awaited, and the one lost after the write is
//! recognised by its id on retry (applied once); two attempts of one call
//! running at once on two connections apply once; expired call records go
//! without the sweep; a schema made before the records gets their table;
//! and the limiter's breaker opens while the server is stopped, then
//! closes once it is back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tollgate_core::observe::Op;
use tollgate_core::{
    BreakerPolicy, CheckId, Counter, CounterStore, Deadline, Error, Fault, Faulty, Limit, Limiter,
    ManualClock, RetryPolicy, Rule, StoreError, Window,
};
use tollgate_postgres::{PostgresOptions, PostgresStore};
use tollgate_test_support::postgres_server::PostgresServer;

/// A fixed time, so that every check of a test counts in one window.
const NOW: Duration = Duration::from_secs(1_700_000_030);

fn limit(name: &str, max: u64) -> Limit {
    Rule::new(name, max, Window::DAY)
        .and_then(|rule| rule.with_key(&["id"]))
        .and_then(|rule| rule.limit(&[tollgate_test_support::unique()]))
        .unwrap()
}

fn key_of(limit: &Limit) -> String {
    limit.counter_key(Window::DAY.index(NOW.as_secs()))
}

fn long() -> Deadline {
    Deadline::after(Duration::from_secs(10))
}

/// The stored count of `limit` in the test's window.
async fn stored(store: &PostgresStore, limit: &Limit) -> u64 {
    store.get(&[key_of(limit)], long()).await.unwrap()[0]
}

/// Eight reservations through the default limiter (50 ms per attempt in a
/// 350 ms budget) while another session holds their counter's row lock for
/// 150 ms: every reply comes late, and is awaited, not retried; the first
/// reply is then lost as a connection broken after the write would lose
/// it, and its retry is answered from the call's record. Every caller is
/// admitted, and the table counts each exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_delayed_by_a_row_lock_are_applied_once_even_when_one_is_lost() {
    const CALLERS: u64 = 8;
    const HOLD: Duration = Duration::from_millis(150);
    let url = support::server().url();
    let schema = support::unique_schema();
    let store = support::open(&url, &schema).await;
    let mut locker = support::client(&url).await;
    let faulty = Arc::new(Faulty::new(store.clone()));
    let limiter = Limiter::builder(Arc::clone(&faulty))
        .clock(ManualClock::new(NOW))
        .build();
    let limit = limit("delayed", 1_000);
    // The counter exists before its row is locked.
    assert!(
        limiter
            .reserve(std::slice::from_ref(&limit))
            .await
            .unwrap()
            .is_allowed()
    );
    let before = faulty.calls_to(Op::Reserve);

    faulty.set(Fault::LoseReply);
    let tx = locker.transaction().await.unwrap();
    tx.execute(
        &format!("SELECT 1 FROM \"{schema}\".counters WHERE key = $1 FOR UPDATE"),
        &[&key_of(&limit).as_bytes()],
    )
    .await
    .unwrap();
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
    tokio::time::sleep(HOLD).await;
    tx.commit().await.unwrap();
    let mut admitted = 1;
    for caller in callers {
        let (verdict, took) = caller.await.unwrap();
        assert!(
            took >= HOLD,
            "answered in {took:?}, while the row was locked"
        );
        match verdict {
            Ok(true) => admitted += 1,
            other => panic!("a delayed reservation answered {other:?} after {took:?}"),
        }
    }
    let attempts = faulty.calls_to(Op::Reserve) - before;
    assert_eq!(
        attempts,
        CALLERS as usize + 1,
        "{CALLERS} reservations took {attempts} attempts: only the lost reply is retried"
    );
    assert_eq!(admitted, CALLERS + 1);
    let counted = stored(&store, &limit).await;
    assert_eq!(
        counted, admitted,
        "the table counts {counted} for {admitted} admitted reservations"
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

/// Runs `call` twice at once, on two of the pool's connections, while
/// another session holds the rows back with `hold` (a row lock, or an
/// uncommitted insert, which `commit: false` rolls back): both attempts
/// wait, then race. Both must answer alike.
async fn twice<T, F, Fut>(locker: &mut Client, hold: &str, commit: bool, call: F) -> T
where
    T: std::fmt::Debug + PartialEq + Send + 'static,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
{
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute(hold).await.unwrap();
    let first = tokio::spawn(call());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let second = tokio::spawn(call());
    tokio::time::sleep(Duration::from_millis(100)).await;
    if commit {
        tx.commit().await.unwrap();
    } else {
        tx.rollback().await.unwrap();
    }
    let (first, second) = (first.await.unwrap(), second.await.unwrap());
    let (first, second) = (first.unwrap(), second.unwrap());
    assert_eq!(first, second, "two attempts of one call answered otherwise");
    first
}

/// A first attempt still waiting on a row when its retry arrives on
/// another connection: whichever records the id second fails on it,
/// rolling its writes back, and runs again to find the record. For a count,
/// a reservation and a refund of a stored counter (held by a row lock), and
/// a count and a reservation creating one (held by an uncommitted insert).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_attempts_of_one_call_on_two_connections_apply_once() {
    let url = support::server().url();
    let schema = support::unique_schema();
    let store = support::open(&url, &schema).await;
    let mut locker = support::client(&url).await;
    let hex = |key: &str| key.bytes().map(|b| format!("{b:02x}")).collect::<String>();

    let key = format!("limit:twice:{}", tollgate_test_support::unique());
    store
        .count(&[counter(&key, 1, 100)], CheckId::new(), long())
        .await
        .unwrap();
    let lock = format!(
        "SELECT 1 FROM \"{schema}\".counters WHERE key = '\\x{}'::bytea FOR UPDATE",
        hex(&key)
    );
    let call = |batch: Vec<Counter>| {
        let (store, id) = (store.clone(), CheckId::new());
        move || {
            let (store, batch) = (store.clone(), batch.clone());
            async move { store.count(&batch, id, long()).await }
        }
    };
    let counted = twice(&mut locker, &lock, true, call(vec![counter(&key, 3, 100)])).await;
    assert_eq!(counted, [4]);
    let call = |batch: Vec<Counter>| {
        let (store, id) = (store.clone(), CheckId::new());
        move || {
            let (store, batch) = (store.clone(), batch.clone());
            async move { store.reserve(&batch, id, long()).await }
        }
    };
    let reserved = twice(&mut locker, &lock, true, call(vec![counter(&key, 5, 100)])).await;
    assert!(reserved.applied);
    assert_eq!(reserved.counts, [9]);
    let call = |batch: Vec<Counter>| {
        let (store, id) = (store.clone(), CheckId::new());
        move || {
            let (store, batch) = (store.clone(), batch.clone());
            async move { store.refund(&batch, id, long()).await }
        }
    };
    let refunded = twice(&mut locker, &lock, true, call(vec![counter(&key, 2, 100)])).await;
    assert_eq!(refunded, [7]);
    assert_eq!(store.get(&[key], long()).await.unwrap(), [7]);

    for reserve in [false, true] {
        let key = format!("limit:twice-new:{}", tollgate_test_support::unique());
        let insert = format!(
            "INSERT INTO \"{schema}\".counters VALUES ('\\x{}'::bytea, 1, now() + interval '1 hour')",
            hex(&key)
        );
        let (s, id, batch) = (store.clone(), CheckId::new(), vec![counter(&key, 3, 100)]);
        let call = move || {
            let (store, batch) = (s.clone(), batch.clone());
            async move {
                if reserve {
                    store.reserve(&batch, id, long()).await.map(|r| r.counts)
                } else {
                    store.count(&batch, id, long()).await
                }
            }
        };
        let counts = twice(&mut locker, &insert, false, call).await;
        assert_eq!(counts, [3], "reserve: {reserve}");
        let read = store.get(&[key], long()).await.unwrap();
        assert_eq!(read, [3], "reserve: {reserve}: applied twice");
    }
}

/// How many call records `schema` holds, and how many have expired.
async fn records(client: &Client, schema: &str) -> (i64, i64) {
    let sql = format!(
        "SELECT count(*), count(*) FILTER (WHERE expires_at <= clock_timestamp()) \
         FROM \"{schema}\".calls"
    );
    let row = client.query_one(&sql, &[]).await.unwrap();
    (row.get(0), row.get(1))
}

/// With the background sweep off, counter calls remove the expired call
/// records themselves (one call in 32 removes up to 64), so the table
/// holds about the records of the last budget; reads remove none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_call_records_are_removed_by_counter_calls_without_the_sweep() {
    let url = support::server().url();
    let schema = support::unique_schema();
    let options = PostgresOptions::default()
        .schema(&schema)
        .sweep(Duration::ZERO, 10_000);
    let store = PostgresStore::open_with(&url, options).await.unwrap();
    let client = support::client(&url).await;
    let key = format!("limit:records:{}", tollgate_test_support::unique());
    let batch = [counter(&key, 1, u64::MAX)];
    // A budget of 500 ms: each record lives 520 ms.
    for _ in 0..100 {
        let deadline = Deadline::after(Duration::from_millis(500));
        store.count(&batch, CheckId::new(), deadline).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(records(&client, &schema).await, (100, 100));
    for _ in 0..50 {
        store.get(std::slice::from_ref(&key), long()).await.unwrap();
    }
    assert_eq!(records(&client, &schema).await, (100, 100), "a read purged");
    // The 101st counter call is not the one in 32 that purges.
    store.count(&batch, CheckId::new(), long()).await.unwrap();
    assert_eq!(
        records(&client, &schema).await,
        (101, 100),
        "a call other than the one in 32 purged"
    );
    for _ in 0..99 {
        store.count(&batch, CheckId::new(), long()).await.unwrap();
    }
    let (held, expired) = records(&client, &schema).await;
    assert_eq!(expired, 0, "{expired} expired records are left");
    assert_eq!(held, 100, "only the live records are kept");
}

/// A schema made by a version without call records (here: the table
/// dropped) gets the table when a store opens it, and its calls are
/// recorded from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_made_before_call_records_gets_their_table_at_open() {
    let url = support::server().url();
    let schema = support::unique_schema();
    drop(support::open(&url, &schema).await);
    let client = support::client(&url).await;
    client
        .batch_execute(&format!("DROP TABLE \"{schema}\".calls"))
        .await
        .unwrap();
    let store = support::open(&url, &schema).await;
    let key = format!("limit:migrated:{}", tollgate_test_support::unique());
    let (batch, id) = ([counter(&key, 2, 100)], CheckId::new());
    assert_eq!(store.count(&batch, id, long()).await.unwrap(), [2]);
    assert_eq!(store.count(&batch, id, long()).await.unwrap(), [2]);
    assert_eq!(records(&client, &schema).await, (1, 0));
}

/// A limit through a limiter with a short retry policy (two attempts of
/// 100 ms, 20 ms apart: a budget of 220 ms) and the default breaker (5
/// failures, a probe every 200 ms at least), on a private server that is
/// stopped: the first checks fail (connection refused); after 5 transient
/// failures, checks are answered unavailable at once, the store skipped
/// (fail-closed). Restarted on the same port and data directory, the next
/// probe succeeds and checks reach the server again. Nothing answered
/// unavailable was counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_breaker_opens_while_the_server_is_stopped_and_closes_after_its_restart() {
    let short = RetryPolicy {
        retries: 1,
        delay: Duration::from_millis(20),
        timeout: Duration::from_millis(100),
    };
    let budget = short.worst_case();
    let mut server = tokio::task::block_in_place(PostgresServer::start);
    let schema = support::unique_schema();
    let store = support::open(&server.url(), &schema).await;
    let limiter = Limiter::builder(store.clone())
        .clock(ManualClock::new(NOW))
        .retry(short)
        .breaker(BreakerPolicy::default())
        .build();
    let limits = [limit("breaker", 1_000)];
    let mut admitted = 0;
    for _ in 0..3 {
        assert!(limiter.reserve(&limits).await.unwrap().is_allowed());
        admitted += 1;
    }

    tokio::task::block_in_place(|| server.stop_immediate());
    let stopped = Instant::now();
    let mut failed = 0;
    let opened = loop {
        let started = Instant::now();
        match limiter.reserve(&limits).await {
            Err(Error::Unavailable(StoreError::Open)) => break started.elapsed(),
            Err(Error::Unavailable(err)) => {
                assert!(err.is_transient(), "{err:?}");
                failed += 1;
            }
            other => panic!("a check on the stopped server answered {other:?}"),
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(3),
            "the breaker did not open after {failed} failed checks"
        );
    };
    // `failures` failed attempts (one or two per check, each up to the
    // budget) over at least `failing_for`: then the next check skips the
    // store.
    let breaker = BreakerPolicy::default();
    let opened_after = stopped.elapsed();
    assert!(
        failed >= breaker.failures.div_ceil(2),
        "the breaker opened after {failed} failed checks"
    );
    assert!(
        opened_after <= breaker.failing_for.max(budget * breaker.failures) + budget * 2,
        "the breaker opened {opened_after:?} after the store went, {failed} failed checks"
    );
    let mut fast = vec![opened];
    let mut probes = 0;
    let open_since = Instant::now();
    while open_since.elapsed() < Duration::from_millis(1_000) {
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
        "opened after {failed} checks, {opened_after:?} after the stop; {} checks skipped the \
         store (median {:?}, slowest {slowest:?}), {probes} probes failed",
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
    assert!(probes <= 6, "{probes} probes in 1 s, 200 ms apart");

    tokio::task::block_in_place(|| server.restart());
    tokio::time::sleep(BreakerPolicy::default().probe_every + Duration::from_millis(50)).await;
    let probe = limiter.reserve(&limits).await;
    assert!(
        matches!(probe, Ok(ref verdict) if verdict.is_allowed()),
        "the probe after the restart answered {probe:?}"
    );
    admitted += 1;
    for _ in 0..5 {
        assert!(limiter.reserve(&limits).await.unwrap().is_allowed());
        admitted += 1;
    }
    assert_eq!(
        stored(&store, &limits[0]).await,
        admitted,
        "the checks after the probe reached the server, and no failed one was counted"
    );
}
