//! A frozen server (SIGSTOP) runs the requests it queued once it resumes:
//! every write script then finds its deadline passed and applies nothing,
//! so a check answered as failed (503 or degraded) spends nothing, and a
//! check answered allowed spends once. Each test runs its own private
//! `redis-server`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::{BOUND, admin, command_calls, deadline, limit, run, stored};
use tokio::sync::watch;
use tollgate_core::{
    CheckId, Clock, Counter, Deadline, Deliveries, Error, Limit, Limiter, SystemClock,
};
use tollgate_redis::RedisStore;
use tollgate_test_support::redis_server::RedisServer;

/// What the burst's callers were told.
#[derive(Default)]
struct Answers {
    /// Reservations answered allowed: each spent its cost once.
    reserved: AtomicU64,
    /// Reservations answered refused by the limit (nothing spent).
    refused: AtomicU64,
    /// Reservations answered 503 (`Unavailable`).
    unavailable: AtomicU64,
    /// Counts answered by the store (allowed or over): each spent once.
    counted: AtomicU64,
    /// Counts answered degraded (fail-open): nothing may be spent.
    degraded: AtomicU64,
}

/// Callers that check while a gate is open, and a way to wait until none
/// is in a check.
struct Burst {
    gate: watch::Sender<bool>,
    in_check: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    answers: Arc<Answers>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Burst {
    fn start(limiter: &Limiter, reserved: &Limit, counted: &Limit, callers: usize) -> Burst {
        let (gate, open) = watch::channel(true);
        let in_check = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(Answers::default());
        let tasks = (0..callers)
            .map(|i| {
                let (limiter, mut open) = (limiter.clone(), open.clone());
                let (in_check, stop) = (Arc::clone(&in_check), Arc::clone(&stop));
                let answers = Arc::clone(&answers);
                let reserve = [reserved.clone()];
                let count = [counted.clone()];
                tokio::spawn(async move {
                    let mut n = i;
                    while !stop.load(Ordering::SeqCst) {
                        // Enter first, then look at the gate: once the gate
                        // is shut and no caller is in, none gets in.
                        in_check.fetch_add(1, Ordering::SeqCst);
                        if !*open.borrow() {
                            in_check.fetch_sub(1, Ordering::SeqCst);
                            let _ = open.wait_for(|open| *open).await;
                            continue;
                        }
                        n += 1;
                        if n % 2 == 0 {
                            match limiter.reserve(&reserve).await {
                                Ok(v) if v.is_allowed() => &answers.reserved,
                                Ok(_) => &answers.refused,
                                Err(_) => &answers.unavailable,
                            }
                            .fetch_add(1, Ordering::SeqCst);
                        } else if limiter.within(&count).await.is_degraded() {
                            answers.degraded.fetch_add(1, Ordering::SeqCst);
                        } else {
                            answers.counted.fetch_add(1, Ordering::SeqCst);
                        }
                        in_check.fetch_sub(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        Burst {
            gate,
            in_check,
            stop,
            answers,
            tasks,
        }
    }

    /// Shuts the gate and waits until every caller has its answer.
    async fn pause(&self) {
        self.gate.send_replace(false);
        let started = Instant::now();
        while self.in_check.load(Ordering::SeqCst) > 0 {
            assert!(started.elapsed() < Duration::from_secs(5), "checks hang");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn resume(&self) {
        self.gate.send_replace(true);
    }

    async fn end(self) -> Arc<Answers> {
        self.pause().await;
        self.stop.store(true, Ordering::SeqCst);
        self.gate.send_replace(true);
        for task in self.tasks {
            task.await.unwrap();
        }
        self.answers
    }
}

fn load(n: &AtomicU64) -> u64 {
    n.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checks_answered_during_a_freeze_spend_nothing_when_the_server_resumes() {
    let mut server = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let limiter = Limiter::new(store);
    // Limits no burst reaches: every stalled reservation would fit if it
    // were applied, and every count stays allowed.
    let reserved = limit("frozen-reserve", 10_000_000);
    let counted = limit("frozen-count", 10_000_000);
    let burst = Burst::start(&limiter, &reserved, &counted, 50);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The burst stops for a moment at each edge of the freeze, so that no
    // request is between its execution and its reply when the server
    // stops (a lost reply, which may over-count: the documented, safe
    // direction) and every stalled attempt is past its deadline plus the
    // skew margin when the server resumes (within the margin, a late
    // attempt may be applied, as the contract allows). Checks run all
    // through the freeze: their requests queue on the frozen server.
    burst.pause().await;
    server.freeze();
    burst.resume();
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    burst.pause().await;
    tokio::time::sleep(Deadline::SKEW_MARGIN * 5).await;
    let before_thaw = (
        load(&burst.answers.unavailable),
        load(&burst.answers.degraded),
    );
    server.thaw();
    burst.resume();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let answers = burst.end().await;

    let now = SystemClock.now().as_secs();
    let key = |l: &Limit| l.counter_key(l.rule().window().index(now));
    let mut admin = admin(&server.url()).await;
    let spent = |value: Option<String>| value.map_or(0, |v| v.parse::<u64>().unwrap());
    let reserve_spent = spent(stored(&mut admin, &key(&reserved)).await);
    let count_spent = spent(stored(&mut admin, &key(&counted)).await);
    let (reserved_n, counted_n) = (load(&answers.reserved), load(&answers.counted));
    println!(
        "reserve: {reserved_n} allowed, {} refused, {} unavailable ({} before the thaw), {reserve_spent} stored; \
         count: {counted_n} answered, {} degraded ({} before the thaw), {count_spent} stored",
        load(&answers.refused),
        load(&answers.unavailable),
        before_thaw.0,
        load(&answers.degraded),
        before_thaw.1,
    );
    assert!(
        before_thaw.0 >= 25 && before_thaw.1 >= 25,
        "too few checks failed during the freeze"
    );
    assert!(reserved_n > 0 && counted_n > 0, "nothing was allowed");
    assert_eq!(load(&answers.refused), 0, "the limit was reached");
    assert_eq!(
        reserve_spent, reserved_n,
        "reservations stored vs answered allowed"
    );
    assert_eq!(
        count_spent, counted_n,
        "counts stored vs answered (not degraded)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_claim_that_failed_during_a_freeze_is_not_written() {
    let mut server = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let deliveries = Deliveries::new(store, "github-delivery:").unwrap();
    let warm = deliveries.begin("warm-up").await.unwrap().unwrap();
    warm.complete().await.unwrap();

    let id = tollgate_test_support::unique();
    server.freeze();
    let started = Instant::now();
    let begun = deliveries.begin(&id).await;
    let took = started.elapsed();
    assert!(matches!(begun, Err(Error::Unavailable(_))), "{begun:?}");
    assert!(took < BOUND, "begin during the freeze took {took:?}");
    tokio::time::sleep(Deadline::SKEW_MARGIN * 5).await;
    server.thaw();

    // The stalled claims ran on the resumed server, past their deadlines.
    let mut admin = admin(&server.url()).await;
    run(&mut admin, &["PING"]).await;
    let key = deliveries.key(&id).unwrap();
    assert_eq!(
        stored(&mut admin, &key).await,
        None,
        "a failed claim was written"
    );
    let first = deliveries.begin(&id).await.unwrap();
    let second = deliveries.begin(&id).await.unwrap();
    assert!(
        first.is_some(),
        "the redelivery after the freeze was refused"
    );
    assert!(second.is_none(), "a delivery began twice");
    first.unwrap().complete().await.unwrap();
}

/// Freezes `server` and has a call on `store` cut off by its own 200 ms
/// deadline: the request stays queued on the frozen server, unanswered, so
/// the store probes the connection (a caller that merely stops waiting
/// leaves its batch waiting for the reply, and nothing to probe).
async fn cut_off_in_a_freeze(server: &mut RedisServer, store: &RedisStore, c: &[Counter]) {
    use tollgate_core::CounterStore as _;
    server.freeze();
    let short = Deadline::after(Duration::from_millis(200));
    let cut = tokio::time::timeout(
        Duration::from_secs(5),
        store.count(c, CheckId::new(), short),
    )
    .await
    .expect("a call outlived its deadline by seconds");
    assert_eq!(cut.map_err(|e| e.kind()), Err("timeout"));
}

/// The `PING`s the server has received, answered or refused: a probe is one.
async fn pings(admin: &mut redis::aio::MultiplexedConnection) -> u64 {
    command_calls(admin).await.get("ping").copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_cut_off_by_its_deadline_keeps_a_connection_that_answers() {
    let mut server = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let c = [support::counter("cut", 1, 10)];
    use tollgate_core::CounterStore as _;
    store.count(&c, CheckId::new(), deadline()).await.unwrap();
    assert_eq!(store.connections_made(), 1);
    let mut admin = admin(&server.url()).await;
    let before = pings(&mut admin).await;

    // A short stall: the call gives up, the server answers its probe 100 ms
    // later.
    cut_off_in_a_freeze(&mut server, &store, &c).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.thaw();
    // Longer than any stale limit, with nothing sent meanwhile.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert!(pings(&mut admin).await > before, "no probe was sent");
    store.count(&c, CheckId::new(), deadline()).await.unwrap();
    assert_eq!(
        store.connections_made(),
        1,
        "a cut-off call made a connection that answers look stale"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_answered_with_an_error_reply_keeps_the_connection() {
    // The store's user may not PING: the probe after a cut-off call is
    // answered NOPERM, an answer all the same.
    let mut server = RedisServer::start();
    let mut admin = admin(&server.url()).await;
    let user = [
        "ACL", "SETUSER", "noping", "on", "nopass", "~*", "&*", "+@all", "-ping",
    ];
    run(&mut admin, &user).await;
    let url = server.url().replacen("redis://", "redis://noping:any@", 1);
    let store = RedisStore::open(&url).unwrap();
    let c = [support::counter("noping", 1, 10)];
    use tollgate_core::CounterStore as _;
    store.count(&c, CheckId::new(), deadline()).await.unwrap();
    let before = pings(&mut admin).await;

    cut_off_in_a_freeze(&mut server, &store, &c).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.thaw();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(pings(&mut admin).await > before, "no probe was sent");
    store.count(&c, CheckId::new(), deadline()).await.unwrap();
    assert_eq!(
        store.connections_made(),
        1,
        "a probe's error reply was taken for a broken connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_that_finds_the_connection_gone_has_it_remade_before_the_next_call() {
    let mut server = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let c = [support::counter("gone", 1, 10)];
    use tollgate_core::CounterStore as _;
    store.count(&c, CheckId::new(), deadline()).await.unwrap();

    // The call is cut off while the server is frozen; its probe is still
    // waiting when the server dies, so it sees the connection drop.
    cut_off_in_a_freeze(&mut server, &store, &c).await;
    server.stop();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.restart();
    let next = store.count(&c, CheckId::new(), deadline()).await;
    assert!(
        next.is_ok(),
        "the first call after the restart used the dropped connection: {next:?}"
    );
    assert_eq!(store.connections_made(), 2);
}
