//! The one deadline, honoured by the server: a statement held up past its
//! deadline (here by a row lock of another transaction) applies nothing
//! when it finally runs, and a caller still listening gets a timeout.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use tokio_postgres::Client;
use tollgate_core::{
    CheckId, Claim, Counter, CounterStore, Deadline, Limiter, ManualClock, MarkStore, RetryPolicy,
    Rule, StoreError, Window,
};
use tollgate_postgres::{PostgresOptions, PostgresStore};

/// How long the other transaction holds its lock: well past the call's
/// deadline and its skew margin.
const HOLD: Duration = Duration::from_millis(400);
const BUDGET: Duration = Duration::from_millis(100);

fn counter(key: &str) -> Counter {
    Counter {
        key: key.to_owned(),
        ttl: Duration::from_secs(600),
        cost: 5,
        max: 100,
        floor: 0,
        prior: None,
        lease: false,
    }
}

fn long() -> Deadline {
    Deadline::after(Duration::from_secs(5))
}

struct Setup {
    store: PostgresStore,
    schema: String,
    locker: Client,
    reader: Client,
}

async fn setup() -> Setup {
    let url = support::server().url();
    let schema = support::unique_schema();
    Setup {
        store: support::open(&url, &schema).await,
        locker: support::client(&url).await,
        reader: support::client(&url).await,
        schema,
    }
}

/// Runs `call` while another transaction holds the row lock `lock` takes,
/// releasing it after [`HOLD`]; the call's result and how long it took.
async fn while_locked<T, F>(locker: &mut Client, lock: &str, call: F) -> (T, Duration)
where
    F: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute(lock).await.unwrap();
    let started = Instant::now();
    let handle = tokio::spawn(call);
    tokio::time::sleep(HOLD).await;
    tx.commit().await.unwrap();
    let result = handle.await.unwrap();
    (result, started.elapsed())
}

fn assert_timeout<T: std::fmt::Debug>(result: Result<T, StoreError>, what: &str) {
    match result {
        Err(StoreError::Timeout(_)) => {}
        other => panic!("{what} past its deadline answered {other:?}, not a timeout"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_held_past_its_deadline_applies_nothing() {
    let Setup {
        store,
        schema,
        mut locker,
        reader,
    } = setup().await;
    let key = format!("limit:late:{}", tollgate_test_support::unique());
    store
        .count(&[counter(&key)], CheckId::new(), long())
        .await
        .unwrap();
    // A live counter, locked: the count waits on the row.
    let lock =
        format!("SELECT 1 FROM \"{schema}\".counters WHERE key = '{key}'::text::bytea FOR UPDATE");
    let (s, c) = (store.clone(), counter(&key));
    let (result, took) = while_locked(&mut locker, &lock, async move {
        s.count(&[c], CheckId::new(), Deadline::after(BUDGET)).await
    })
    .await;
    assert_timeout(result, "a count");
    assert!(took >= HOLD, "the count waited on the lock");
    assert_eq!(support::stored(&reader, &schema, &key).await, Some(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_racing_an_insert_past_its_deadline_applies_nothing() {
    let Setup {
        store,
        schema,
        mut locker,
        reader,
    } = setup().await;
    let key = format!("limit:late-new:{}", tollgate_test_support::unique());
    // Another transaction inserts the counter and holds it uncommitted: the
    // store's insert waits for it, then conflicts.
    let lock = format!(
        "INSERT INTO \"{schema}\".counters VALUES ('{key}'::text::bytea, 1, now() + interval '1 hour')"
    );
    let (s, c) = (store.clone(), counter(&key));
    let (result, _) = while_locked(&mut locker, &lock, async move {
        s.count(&[c], CheckId::new(), Deadline::after(BUDGET)).await
    })
    .await;
    assert_timeout(result, "a count");
    assert_eq!(support::stored(&reader, &schema, &key).await, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_and_a_refund_held_past_their_deadline_apply_nothing() {
    let Setup {
        store,
        schema,
        mut locker,
        reader,
    } = setup().await;
    let key = format!("limit:late:{}", tollgate_test_support::unique());
    let fresh = format!("limit:late-fresh:{}", tollgate_test_support::unique());
    store
        .count(&[counter(&key)], CheckId::new(), long())
        .await
        .unwrap();
    let lock =
        format!("SELECT 1 FROM \"{schema}\".counters WHERE key = '{key}'::text::bytea FOR UPDATE");
    // The reservation spans a locked counter and one it would create.
    let (s, batch) = (store.clone(), vec![counter(&fresh), counter(&key)]);
    let (result, _) = while_locked(&mut locker, &lock, async move {
        s.reserve(&batch, CheckId::new(), Deadline::after(BUDGET))
            .await
    })
    .await;
    assert_timeout(result, "a reservation");
    assert_eq!(support::stored(&reader, &schema, &key).await, Some(5));
    assert_eq!(support::stored(&reader, &schema, &fresh).await, None);

    let (s, c) = (store.clone(), counter(&key));
    let (result, _) = while_locked(&mut locker, &lock, async move {
        s.refund(&[c], CheckId::new(), Deadline::after(BUDGET))
            .await
    })
    .await;
    assert_timeout(result, "a refund");
    assert_eq!(support::stored(&reader, &schema, &key).await, Some(5));

    let (s, k) = (store.clone(), key.clone());
    let (result, _) = while_locked(&mut locker, &lock, async move {
        s.delete(&k, Deadline::after(BUDGET)).await
    })
    .await;
    assert_timeout(result, "a delete");
    assert_eq!(support::stored(&reader, &schema, &key).await, Some(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mark_calls_held_past_their_deadline_apply_nothing() {
    let Setup {
        store,
        schema,
        mut locker,
        reader,
    } = setup().await;
    let key = format!("mark:late:{}", tollgate_test_support::unique());
    let ttl = Duration::from_secs(60);
    assert_eq!(
        store.claim(&key, "first", ttl, long()).await.unwrap(),
        Claim::Acquired
    );
    let lock =
        format!("SELECT 1 FROM \"{schema}\".marks WHERE key = '{key}'::text::bytea FOR UPDATE");
    let token = format!("SELECT encode(token, 'escape') FROM \"{schema}\".marks WHERE key = $1");
    let read = async |reader: &Client| -> Option<String> {
        let row = reader.query_opt(&token, &[&key.as_bytes()]).await.unwrap();
        row.map(|r| r.get(0))
    };

    let (s, k) = (store.clone(), key.clone());
    let (result, _) = while_locked(&mut locker, &lock, async move {
        s.finish(&k, "first", ttl, Deadline::after(BUDGET)).await
    })
    .await;
    assert_timeout(result, "a finish");
    assert_eq!(read(&reader).await.as_deref(), Some("first"));

    let (s, k) = (store.clone(), key.clone());
    let (result, _) = while_locked(&mut locker, &lock, async move {
        s.release(&k, "first", Deadline::after(BUDGET)).await
    })
    .await;
    assert_timeout(result, "a release");
    assert_eq!(read(&reader).await.as_deref(), Some("first"));

    // A claim over an expired mark, held up: the mark stays as it was.
    reader
        .execute(
            &format!(
                "UPDATE \"{schema}\".marks SET expires_at = now() - interval '1 second' \
                 WHERE key = $1"
            ),
            &[&key.as_bytes()],
        )
        .await
        .unwrap();
    let (s, k) = (store.clone(), key.clone());
    let (result, _) = while_locked(&mut locker, &lock, async move {
        s.claim(&k, "second", ttl, Deadline::after(BUDGET)).await
    })
    .await;
    assert_timeout(result, "a claim");
    assert_eq!(read(&reader).await.as_deref(), Some("first"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_already_passed_sends_nothing() {
    let Setup {
        store,
        schema,
        reader,
        ..
    } = setup().await;
    let key = format!("limit:passed:{}", tollgate_test_support::unique());
    let passed = Deadline::after(Duration::ZERO);
    assert_timeout(
        store.count(&[counter(&key)], CheckId::new(), passed).await,
        "a count",
    );
    assert_eq!(support::stored(&reader, &schema, &key).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_its_caller_gave_up_on_takes_its_connection_out_of_the_pool() {
    // The abandoned statement may still be running: its connection is
    // closed, never handed to the next call.
    let url = support::server().url();
    let schema = support::unique_schema();
    let name = format!("lease_{}", schema.trim_start_matches("s_"));
    let separator = if url.contains('?') { '&' } else { '?' };
    let store = support::open(&format!("{url}{separator}application_name={name}"), &schema).await;
    let (mut locker, reader) = (support::client(&url).await, support::client(&url).await);
    let key = format!("limit:abandoned:{}", tollgate_test_support::unique());
    store
        .count(&[counter(&key)], CheckId::new(), long())
        .await
        .unwrap();
    let connections = || async {
        let sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1";
        reader
            .query_one(sql, &[&name])
            .await
            .unwrap()
            .get::<_, i64>(0)
    };
    assert_eq!(connections().await, 1);

    let lock =
        format!("SELECT 1 FROM \"{schema}\".counters WHERE key = '{key}'::text::bytea FOR UPDATE");
    let tx = locker.transaction().await.unwrap();
    tx.batch_execute(&lock).await.unwrap();
    let cut = tokio::time::timeout(
        BUDGET,
        store.count(&[counter(&key)], CheckId::new(), long()),
    )
    .await;
    assert!(cut.is_err(), "the call was not cut off");
    tx.commit().await.unwrap();
    let mut left = connections().await;
    for _ in 0..50 {
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = connections().await;
    }
    assert_eq!(
        left, 0,
        "the abandoned call's connection went back to the pool"
    );
    store
        .count(&[counter(&key)], CheckId::new(), long())
        .await
        .unwrap();
}

/// A limiter whose retry policy is not the default (one attempt of 20 ms),
/// on a pool of one connection, facing a counter whose row another session
/// holds locked for 300 ms. The attempt's deadline is what the server
/// checks when the statement finally runs: the check answered unavailable
/// applies nothing once the lock comes free (by a default check's budget,
/// 350 ms, it would have). Meanwhile nothing in the store is held on its
/// behalf: a call on another counter gets the pool's one connection, and
/// is answered, while the lock is still held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_retry_policy_is_the_deadline_the_server_applies_a_held_check_by() {
    const NOW: Duration = Duration::from_secs(1_700_000_030);
    let url = support::server().url();
    let schema = support::unique_schema();
    let options = PostgresOptions::default().schema(&schema).pool_size(1);
    let store = PostgresStore::open_with(&url, options).await.unwrap();
    let mut locker = support::client(&url).await;
    let short = RetryPolicy {
        retries: 0,
        delay: Duration::from_millis(10),
        timeout: Duration::from_millis(20),
    };
    let limiter = Limiter::builder(store.clone())
        .clock(ManualClock::new(NOW))
        .retry(short)
        .build();
    let limits = [Rule::new("short", 100, Window::DAY)
        .and_then(|rule| rule.with_key(&["id"]))
        .and_then(|rule| rule.limit(&[tollgate_test_support::unique()]))
        .unwrap()];
    let key = limits[0].counter_key(Window::DAY.index(NOW.as_secs()));
    let once = Counter {
        cost: 1,
        ..counter(&key)
    };
    store
        .count(std::slice::from_ref(&once), CheckId::new(), long())
        .await
        .unwrap();

    let tx = locker.transaction().await.unwrap();
    tx.execute(
        &format!("SELECT 1 FROM \"{schema}\".counters WHERE key = $1 FOR UPDATE"),
        &[&key.as_bytes()],
    )
    .await
    .unwrap();
    let locked = Instant::now();
    let during = limiter.count(&limits).await;
    assert!(
        matches!(&during, Err(err) if err.is_unavailable()),
        "a check on a locked counter answered {during:?}"
    );
    // The lock is not released until this call is answered: were the
    // pool's one connection still held for the abandoned check, this call
    // would wait for it in vain.
    let other = format!("limit:other:{}", tollgate_test_support::unique());
    let answered = tokio::time::timeout(
        Duration::from_secs(5),
        store.count(&[counter(&other)], CheckId::new(), long()),
    )
    .await;
    match answered {
        Ok(Ok(counts)) => assert_eq!(counts, [5]),
        other => panic!("a call on another counter during the lock answered {other:?}"),
    }
    tokio::time::sleep(Duration::from_millis(300).saturating_sub(locked.elapsed())).await;
    tx.commit().await.unwrap();

    // The abandoned statement, queued first on the row, runs now, past its
    // deadline; the next call on the counter waits for it.
    let after = store.count(&[once], CheckId::new(), long()).await;
    assert_eq!(
        after.unwrap(),
        [2],
        "the check answered unavailable was applied once the lock came free"
    );
}
