//! The Redis Cluster store when the cluster changes under load: a primary
//! killed (its replica takes over), a slot moved to another primary, and
//! reservations across slots racing and giving back. The tests that kill
//! or move run one at a time, each on a private cluster of its own; the
//! others share one cluster.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::cluster::{Counting, deadline, key_of, limit_where, pttl, raw, slot, stored, tagged};
use support::frozen::Frozen;
use support::{BOUND, assert_a_short_check_gives_up_in_time};
use tokio::sync::Mutex;
use tollgate_core::{
    CheckId, Counter, CounterStore, Error, Limit, Limiter, Prefixed, RetryPolicy, Rule, Window,
};
use tollgate_redis::RedisClusterStore;
use tollgate_test_support::Logs;
use tollgate_test_support::redis_cluster::RedisCluster;

/// The tests that kill nodes or move slots, one at a time (2 cores).
static SERIAL: Mutex<()> = Mutex::const_new(());

async fn private_cluster() -> Arc<RedisCluster> {
    Arc::new(
        tokio::task::spawn_blocking(RedisCluster::start)
            .await
            .unwrap(),
    )
}

async fn shared_cluster() -> &'static RedisCluster {
    tokio::task::spawn_blocking(RedisCluster::shared)
        .await
        .unwrap()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Allowed,
    Limited,
    Unavailable,
}

/// One call of a stream: when it started, how long it took, its outcome.
type Call = (Instant, Duration, Outcome);

/// Runs `check` in a loop (every `every`, or back to back) until `stop`.
fn stream<F, Fut>(
    stop: Arc<AtomicBool>,
    every: Duration,
    check: F,
) -> tokio::task::JoinHandle<Vec<Call>>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<bool, Error>> + Send,
{
    tokio::spawn(async move {
        let mut calls = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let started = Instant::now();
            let outcome = match check().await {
                Ok(true) => Outcome::Allowed,
                Ok(false) => Outcome::Limited,
                Err(Error::Unavailable(_)) => Outcome::Unavailable,
                Err(other) => panic!("a check failed otherwise than by its policy: {other:?}"),
            };
            calls.push((started, started.elapsed(), outcome));
            if !every.is_zero() {
                tokio::time::sleep(every.saturating_sub(started.elapsed())).await;
            }
        }
        calls
    })
}

/// Runs `call` with `limits` in a loop (every `every`, or back to back)
/// until `stop`.
fn calling<F, Fut>(
    limiter: &Arc<Limiter>,
    limits: Vec<Limit>,
    stop: &Arc<AtomicBool>,
    every: Duration,
    call: F,
) -> tokio::task::JoinHandle<Vec<Call>>
where
    F: Fn(Arc<Limiter>, Arc<Vec<Limit>>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<bool, Error>> + Send,
{
    let limiter = Arc::clone(limiter);
    let limits = Arc::new(limits);
    stream(Arc::clone(stop), every, move || {
        call(Arc::clone(&limiter), Arc::clone(&limits))
    })
}

fn reserving(
    limiter: &Arc<Limiter>,
    limits: Vec<Limit>,
    stop: &Arc<AtomicBool>,
    every: Duration,
) -> tokio::task::JoinHandle<Vec<Call>> {
    calling(limiter, limits, stop, every, |limiter, limits| async move {
        limiter.reserve(&limits).await.map(|v| v.is_allowed())
    })
}

fn counting(
    limiter: &Arc<Limiter>,
    limits: Vec<Limit>,
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<Call>> {
    calling(
        limiter,
        limits,
        stop,
        Duration::ZERO,
        |limiter, limits| async move { limiter.count(&limits).await.map(|v| v.is_allowed()) },
    )
}

async fn joined(handles: Vec<tokio::task::JoinHandle<Vec<Call>>>) -> Vec<Call> {
    let mut calls = Vec::new();
    for handle in handles {
        calls.extend(handle.await.unwrap());
    }
    calls.sort_by_key(|c| c.0);
    calls
}

fn tally(calls: &[Call], outcome: Outcome) -> usize {
    calls.iter().filter(|c| c.2 == outcome).count()
}

/// From `at` to the end of the first call answered after the last call
/// that was not (`None` if none was answered after it).
fn outage(calls: &[Call], at: Instant) -> Option<Duration> {
    let last_failed = calls
        .iter()
        .rposition(|c| c.0 >= at && c.2 == Outcome::Unavailable);
    let from = last_failed.map_or(0, |i| i + 1);
    calls[from..]
        .iter()
        .find(|c| c.0 >= at && c.2 != Outcome::Unavailable)
        .map(|c| c.0 + c.1 - at)
}

/// From the start of the first unavailable call after `at` to the end of
/// the last one: how long callers saw failures.
fn failing(calls: &[Call], at: Instant) -> Duration {
    let failed: Vec<&Call> = calls
        .iter()
        .filter(|c| c.0 >= at && c.2 == Outcome::Unavailable)
        .collect();
    match (failed.first(), failed.last()) {
        (Some(first), Some(last)) => last.0 + last.1 - first.0,
        _ => Duration::ZERO,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_fails_closed_within_the_bound_until_its_replica_takes_over() {
    let _serial = SERIAL.lock().await;
    let mut cluster = private_cluster().await;
    let mut raw = raw(&cluster).await;
    let victim = cluster.primaries()[0];
    let replica = cluster.replica_of(victim);
    let served: Vec<(u16, u16)> = cluster
        .nodes()
        .into_iter()
        .find(|n| n.port == victim)
        .unwrap()
        .slots;
    let on_victim = move |s: u16| served.iter().any(|&(a, b)| a <= s && s <= b);
    let off_victim = {
        let on_victim = on_victim.clone();
        move |s: u16| !on_victim(s)
    };
    const MAX: u64 = 300;
    let (reach, _) = limit_where(&mut raw, "fo-reach", MAX, on_victim.clone()).await;
    let (big, _) = limit_where(&mut raw, "fo-big", 10_000_000, on_victim).await;
    let (other, _) = limit_where(&mut raw, "fo-other", 10_000_000, off_victim).await;
    let store = RedisClusterStore::open(&cluster.url()).unwrap();
    let limiter = Arc::new(Limiter::new(store));

    let stop = Arc::new(AtomicBool::new(false));
    let paced = Duration::from_millis(10);
    let reach_calls = vec![
        reserving(&limiter, vec![reach.clone()], &stop, paced),
        reserving(&limiter, vec![reach.clone()], &stop, paced),
    ];
    let big_calls = vec![
        reserving(&limiter, vec![big.clone()], &stop, Duration::ZERO),
        reserving(&limiter, vec![big.clone()], &stop, Duration::ZERO),
    ];
    let other_calls = vec![reserving(&limiter, vec![other.clone()], &stop, paced)];
    tokio::time::sleep(Duration::from_millis(500)).await;

    let killed = Instant::now();
    Arc::get_mut(&mut cluster).unwrap().kill(victim);
    println!("killed the primary on port {victim}; its replica is on port {replica}");
    // Until the replica serves the slot again, then long enough to reach MAX.
    let recovered = loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let primaries = tokio::task::spawn_blocking({
            let cluster = Arc::clone(&cluster);
            move || cluster.primaries()
        })
        .await
        .unwrap();
        if primaries.contains(&replica) {
            break killed.elapsed();
        }
        assert!(
            killed.elapsed() < Duration::from_secs(30),
            "the replica was not promoted"
        );
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    stop.store(true, Ordering::Relaxed);
    let reach_calls = joined(reach_calls).await;
    let big_calls = joined(big_calls).await;
    let other_calls = joined(other_calls).await;

    let slowest = reach_calls
        .iter()
        .chain(&big_calls)
        .chain(&other_calls)
        .map(|c| c.1)
        .max()
        .unwrap();
    let victim_calls: Vec<Call> = {
        let mut all = reach_calls.clone();
        all.extend(&big_calls);
        all.sort_by_key(|c| c.0);
        all
    };
    let unavailable = tally(&victim_calls, Outcome::Unavailable);
    let seen = outage(&victim_calls, killed).expect("no call succeeded on the slot after the kill");
    let other_outage = failing(&other_calls, killed);
    let allowed = tally(&reach_calls, Outcome::Allowed) as u64;
    let big_allowed = tally(&big_calls, Outcome::Allowed) as u64;
    let big_stored = stored(&mut raw, &key_of(&big)).await;
    let reach_stored = stored(&mut raw, &key_of(&reach)).await;
    println!(
        "replica promoted {recovered:?} after the kill; outage seen by callers on the slot: {seen:?} \
         ({unavailable} calls unavailable), on another primary's slot: failures for {other_outage:?} \
         ({} unavailable); slowest call {slowest:?}",
        tally(&other_calls, Outcome::Unavailable)
    );
    println!(
        "reachable limit: {allowed} allowed of {MAX}, stored {reach_stored}, {} limited; \
         unreached limit: {big_allowed} allowed, stored {big_stored} \
         ({} lost by the failover, {} over-counted)",
        tally(&reach_calls, Outcome::Limited),
        big_allowed.saturating_sub(big_stored),
        big_stored.saturating_sub(big_allowed),
    );
    assert!(unavailable > 0, "the kill was not seen");
    assert!(slowest < BOUND, "a call took {slowest:?}, over {BOUND:?}");
    assert!(allowed <= MAX, "over-admitted: {allowed} allowed of {MAX}");
    assert!(
        tally(&reach_calls, Outcome::Limited) > 0,
        "the reachable limit was not reached after the failover"
    );
    let last = victim_calls.last().unwrap();
    assert_ne!(last.2, Outcome::Unavailable, "not recovered by the end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_a_slot_under_load_surfaces_no_error_and_keeps_counts_exact() {
    let _serial = SERIAL.lock().await;
    let cluster = private_cluster().await;
    let mut raw = raw(&cluster).await;
    let tag = tollgate_test_support::unique();
    let a = tagged("mv-a", 10_000_000, &tag);
    let b = tagged("mv-b", 10_000_000, &tag);
    let c = tagged("mv-c", 10_000_000, &tag);
    // Two counters of one rule in the moving slot: a refund of that rule
    // is one call on both keys, which a half-moved slot answers `TRYAGAIN`.
    let given_back: Vec<Limit> = ["1", "2"]
        .iter()
        .map(|part| {
            let limit = Rule::new("mv-d", 10_000_000, Window::DAY)
                .and_then(|r| r.with_key(&["id"]))
                .and_then(|r| r.limit(&[format!("{{{tag}}}{part}")]))
                .and_then(|l| l.with_cost(2));
            limit.unwrap()
        })
        .collect();
    let moving = slot(&mut raw, &key_of(&a)).await;
    // Keys for the move to carry, one at a time, while the checks run.
    for i in 0..200 {
        let _: () = redis::cmd("SET")
            .arg(format!("{{{tag}}}:filler:{i}"))
            .arg(i)
            .query_async(&mut raw)
            .await
            .unwrap();
    }
    let from = cluster.primary_of(moving);
    let to = *cluster.primaries().iter().find(|&&p| p != from).unwrap();
    let store = Counting::around(
        RedisClusterStore::open(&cluster.url()).unwrap(),
        Arc::default(),
    );
    let failures = Arc::clone(&store.hook);
    let limiter = Arc::new(Limiter::new(store));
    // A store that learns the slot map now and is idle during the move: its
    // first call after it is answered `MOVED`, which it follows within the
    // call (no retry to find the slot).
    let stale = RedisClusterStore::open(&cluster.url()).unwrap();
    let late = minute_counter(&format!("limit:mv-stale:{{{tag}}}:1"), 1);
    stale
        .count(std::slice::from_ref(&late), CheckId::new(), deadline())
        .await
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let counts = vec![
        counting(&limiter, vec![a.clone()], &stop),
        counting(&limiter, vec![a.clone()], &stop),
    ];
    let reservations = vec![
        reserving(&limiter, vec![b.clone(), c.clone()], &stop, Duration::ZERO),
        reserving(&limiter, vec![b.clone(), c.clone()], &stop, Duration::ZERO),
    ];
    // Each counts 2 and, when allowed, gives 1 back: a refund across the
    // keys of the moving slot.
    let refunds = vec![calling(
        &limiter,
        given_back.clone(),
        &stop,
        Duration::ZERO,
        |limiter, limits| async move {
            let verdict = limiter.count(&limits).await?;
            if verdict.is_allowed() {
                limiter.refund(&verdict, limits[0].rule().name(), 1).await?;
            }
            Ok(verdict.is_allowed())
        },
    )];
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let moved = tokio::task::spawn_blocking({
        let cluster = Arc::clone(&cluster);
        move || cluster.move_slot(moving, to, Duration::from_millis(5))
    })
    .await
    .unwrap();
    let took = started.elapsed();
    let after_move = stale
        .count(std::slice::from_ref(&late), CheckId::new(), deadline())
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let counts = joined(counts).await;
    let reservations = joined(reservations).await;
    let refunds = joined(refunds).await;

    let (busy, timeout, connection, other) = failures.get();
    let during = |calls: &[Call]| {
        calls
            .iter()
            .filter(|c| c.0 >= started && c.0 <= started + took)
            .count()
    };
    println!(
        "moved slot {moving} ({moved} keys) from port {from} to port {to} in {took:?}; \
         {} counts and {} reservations ran during the move; attempts failed and retried \
         within the deadline: {busy} busy, {timeout} timeout, {connection} connection, {other} other \
         ({:?}); {} counts and {} reservations allowed; {} counts refunded ({} during the move)",
        during(&counts),
        during(&reservations),
        failures.causes.lock().unwrap(),
        tally(&counts, Outcome::Allowed),
        tally(&reservations, Outcome::Allowed),
        tally(&refunds, Outcome::Allowed),
        during(&refunds),
    );
    assert_eq!(cluster.primary_of(moving), to);
    assert_eq!(
        after_move.map_err(|e| e.to_string()),
        Ok(vec![2]),
        "a store with the old slot map follows the MOVED in one call"
    );
    assert!(
        during(&counts) > 0 && during(&reservations) > 0 && during(&refunds) > 0,
        "no load during the move"
    );
    let surfaced = tally(&counts, Outcome::Unavailable)
        + tally(&reservations, Outcome::Unavailable)
        + tally(&refunds, Outcome::Unavailable);
    assert_eq!(surfaced, 0, "errors surfaced to callers");
    assert_eq!(other, 0, "attempts failed with non-transient errors");
    let counted = tally(&counts, Outcome::Allowed) as u64;
    let reserved = tally(&reservations, Outcome::Allowed) as u64;
    assert_eq!(stored(&mut raw, &key_of(&a)).await, counted, "counts");
    assert_eq!(
        stored(&mut raw, &key_of(&b)).await,
        reserved,
        "reservations"
    );
    assert_eq!(
        stored(&mut raw, &key_of(&c)).await,
        reserved,
        "reservations"
    );
    // Each allowed call counted 2 and gave 1 back, once.
    let refunded = tally(&refunds, Outcome::Allowed) as u64;
    for limit in &given_back {
        assert_eq!(stored(&mut raw, &key_of(limit)).await, refunded, "refunds");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_slot_reservations_racing_allow_exactly_max() {
    const MAX: u64 = 25;
    const CALLERS: usize = 100;
    let cluster = shared_cluster().await;
    let mut raw = raw(cluster).await;
    let store = RedisClusterStore::open(&cluster.url()).unwrap();
    // A generous attempt: this test is about atomicity, not latency.
    let policy = RetryPolicy {
        timeout: Duration::from_secs(2),
        ..RetryPolicy::default()
    };
    let limiter = Arc::new(Limiter::builder(store).retry(policy).build());
    for round in 0..3 {
        let (shared, shared_slot) = limit_where(&mut raw, "race-site", MAX, |_| true).await;
        let mut own = Vec::new();
        for _ in 0..CALLERS {
            let (limit, _) =
                limit_where(&mut raw, "race-visitor", 1_000, |s| s != shared_slot).await;
            own.push(limit);
        }
        let (spent, _) = limit_where(&mut raw, "race-all", 1_000_000, |s| s != shared_slot).await;
        let tasks: Vec<_> = own
            .iter()
            .map(|mine| {
                let limiter = Arc::clone(&limiter);
                let limits = [mine.clone(), shared.clone(), spent.clone()];
                tokio::spawn(async move { limiter.reserve(&limits).await.unwrap().is_allowed() })
            })
            .collect();
        let mut allowed = Vec::new();
        for task in tasks {
            allowed.push(task.await.unwrap());
        }
        let admitted = allowed.iter().filter(|a| **a).count() as u64;
        let on_shared = stored(&mut raw, &key_of(&shared)).await;
        let on_spent = stored(&mut raw, &key_of(&spent)).await;
        println!(
            "round {round}: {CALLERS} callers, max {MAX}: {admitted} allowed; stored {on_shared} \
             on the shared limit, {on_spent} on the global one"
        );
        assert_eq!(admitted, MAX, "allowed");
        assert_eq!(on_shared, MAX, "the shared counter");
        assert_eq!(on_spent, MAX, "a refused caller's give-back was lost");
        for (mine, was) in own.iter().zip(&allowed) {
            let key = key_of(mine);
            assert_eq!(stored(&mut raw, &key).await, u64::from(*was), "own counter");
            if !was {
                assert_eq!(
                    pttl(&mut raw, &key).await,
                    -2,
                    "a refused caller left a counter"
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_refused_on_one_slot_leaves_the_others_as_they_were() {
    let cluster = shared_cluster().await;
    let mut raw = raw(cluster).await;
    let store = RedisClusterStore::open(&cluster.url()).unwrap();
    let (full, full_slot) = limit_where(&mut raw, "gb-full", 10, |_| true).await;
    let (some, some_slot) = limit_where(&mut raw, "gb-some", 10, |s| s != full_slot).await;
    let (none, _) = limit_where(&mut raw, "gb-none", 10, |s| {
        s != full_slot && s != some_slot
    })
    .await;
    let now = support::cluster::now();
    let at = |limit: &Limit, cost: u64| Counter {
        cost,
        ..limit.counter(now)
    };
    store
        .count(&[at(&full, 10)], CheckId::new(), deadline())
        .await
        .unwrap();
    store
        .count(&[at(&some, 3)], CheckId::new(), deadline())
        .await
        .unwrap();
    let ttl_before = pttl(&mut raw, &key_of(&some)).await;
    let logs = Logs::default();
    let started = Instant::now();
    let reply = logs
        .capture(store.reserve(
            &[at(&some, 2), at(&full, 1), at(&none, 4)],
            CheckId::new(),
            deadline(),
        ))
        .await
        .unwrap();
    let took = started.elapsed();
    println!("refused across 3 slots, given back, in {took:?}: {reply:?}");
    assert!(!reply.applied);
    assert_eq!(
        reply.counts,
        [3, 10, 0],
        "counts after the give-back, in caller order"
    );
    assert_eq!(stored(&mut raw, &key_of(&some)).await, 3);
    assert_eq!(stored(&mut raw, &key_of(&full)).await, 10);
    assert_eq!(
        pttl(&mut raw, &key_of(&none)).await,
        -2,
        "a counter was left behind"
    );
    let ttl_after = pttl(&mut raw, &key_of(&some)).await;
    assert!(
        ttl_after <= ttl_before && ttl_after > ttl_before - 1_000,
        "the give-back changed a lifetime: {ttl_before} ms, then {ttl_after} ms"
    );
    assert!(
        logs.text().is_empty(),
        "a give-back failed: {}",
        logs.text()
    );
    // Once the full slot has room, the same reservation applies on every slot.
    store
        .refund(&[at(&full, 1)], CheckId::new(), deadline())
        .await
        .unwrap();
    let reply = store
        .reserve(
            &[at(&some, 2), at(&full, 1), at(&none, 4)],
            CheckId::new(),
            deadline(),
        )
        .await
        .unwrap();
    assert!(reply.applied);
    assert_eq!(reply.counts, [5, 10, 4]);
}

/// A reservation refused on one slot gives floored counters (GCRA times)
/// back too: one it created is absent again, one past its floor holds what
/// it held, and one it raised from below its floor (where a time counts as
/// absent does) is removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_cross_slot_reservation_gives_floored_counters_back() {
    let cluster = shared_cluster().await;
    let mut raw = raw(cluster).await;
    let store = RedisClusterStore::open(&cluster.url()).unwrap();
    let (full, full_slot) = limit_where(&mut raw, "gbf-full", 10, |_| true).await;
    let (made, _) = limit_where(&mut raw, "gbf-made", 10, |s| s != full_slot).await;
    let (ahead, _) = limit_where(&mut raw, "gbf-ahead", 10, |s| s != full_slot).await;
    let (behind, _) = limit_where(&mut raw, "gbf-behind", 10, |s| s != full_slot).await;
    let now = support::cluster::now();
    let floor = now * 1_000_000;
    let timed = |limit: &Limit, cost: u64, floor: u64| Counter {
        cost,
        max: tollgate_core::MAX_COUNT,
        floor,
        prior: None,
        lease: false,
        ..limit.counter(now)
    };
    let plain = |limit: &Limit, cost: u64| Counter {
        cost,
        ..limit.counter(now)
    };
    for counter in [
        plain(&full, 10),
        timed(&ahead, 50, floor),
        timed(&behind, 5, floor - 1_000),
    ] {
        store
            .count(std::slice::from_ref(&counter), CheckId::new(), deadline())
            .await
            .unwrap();
    }
    let logs = Logs::default();
    let reply = logs
        .capture(store.reserve(
            &[
                timed(&made, 7, floor),
                timed(&ahead, 7, floor),
                timed(&behind, 7, floor),
                plain(&full, 1),
            ],
            CheckId::new(),
            deadline(),
        ))
        .await
        .unwrap();
    assert!(!reply.applied);
    assert_eq!(reply.counts, [0, floor + 50, 0, 10], "after the give-back");
    assert_eq!(pttl(&mut raw, &key_of(&made)).await, -2, "left behind");
    assert_eq!(stored(&mut raw, &key_of(&ahead)).await, floor + 50);
    assert_eq!(pttl(&mut raw, &key_of(&behind)).await, -2, "left raised");
    assert_eq!(stored(&mut raw, &key_of(&full)).await, 10);
    assert!(
        logs.text().is_empty(),
        "a give-back failed: {}",
        logs.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prefixed_cluster_store_keeps_its_counters_under_its_prefix() {
    let cluster = shared_cluster().await;
    let store = Prefixed::new("app1:", RedisClusterStore::open(&cluster.url()).unwrap());
    let key = format!("limit:prefixed:{}:1", tollgate_test_support::unique());
    let counter = minute_counter(&key, 3);
    assert_eq!(
        store
            .count(&[counter], CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![3]
    );
    let mut raw = raw(cluster).await;
    assert_eq!(stored(&mut raw, &format!("app1:{key}")).await, 3);
    assert_eq!(
        stored(&mut raw, &key).await,
        0,
        "written without its prefix"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_deadline_is_answered_as_a_timeout_and_applies_nothing() {
    let cluster = shared_cluster().await;
    let store = RedisClusterStore::open(&cluster.url()).unwrap();
    let key = format!("limit:late:{}:1", tollgate_test_support::unique());
    let counter = minute_counter(&key, 1);
    // A deadline already passed: the store answers it as a timeout (it
    // sends nothing; the next test has the primary's script refuse one).
    let past = tollgate_core::Deadline::after(Duration::ZERO);
    let err = store
        .count(&[counter], CheckId::new(), past)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "timeout", "{err:?}");
    let mut raw = raw(cluster).await;
    assert_eq!(stored(&mut raw, &key).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_its_primary_runs_past_the_deadline_is_a_timeout_and_applies_nothing() {
    // A private cluster: its primary is kept busy for 300 ms.
    let _serial = SERIAL.lock().await;
    let cluster = private_cluster().await;
    let store = RedisClusterStore::open(&cluster.url()).unwrap();
    let tag = tollgate_test_support::unique();
    let key = format!("limit:busy-late:{{{tag}}}:1");
    let counter = minute_counter(&key, 1);
    store
        .count(std::slice::from_ref(&counter), CheckId::new(), deadline())
        .await
        .unwrap();
    // A script that holds the slot's primary for 300 ms; the call, sent
    // 100 ms into it with a deadline of 50 ms, queues behind it and is run
    // about 200 ms after it was sent: the store's script finds the deadline
    // passed and answers DEADLINE, well before the client's own response
    // timeout (the longest check budget among the store's calls: the
    // first call's second here) would answer.
    let mut raw = raw(&cluster).await;
    let hold = tokio::spawn(async move {
        let _: () = redis::cmd("EVAL")
            .arg(
                "local t = redis.call('TIME') local from = t[1] * 1e6 + t[2] \
                 repeat t = redis.call('TIME') until t[1] * 1e6 + t[2] - from > 300000",
            )
            .arg(1)
            .arg(format!("{{{tag}}}:hold"))
            .query_async(&mut raw)
            .await
            .unwrap();
        raw
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let late = store
        .count(
            std::slice::from_ref(&counter),
            CheckId::new(),
            tollgate_core::Deadline::after(Duration::from_millis(50)),
        )
        .await;
    let took = started.elapsed();
    let mut raw = hold.await.unwrap();
    assert!(
        late.is_err(),
        "applied in {took:?}: the call reached the primary before the script"
    );
    assert_eq!(late.map_err(|e| e.kind()), Err("timeout"));
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_millis(330),
        "answered in {took:?}: not by the primary's script once it ran the call"
    );
    assert_eq!(stored(&mut raw, &key).await, 1, "the late call was applied");
}

/// A counter on `key` costing `cost`, of max 10, living a minute.
fn minute_counter(key: &str, cost: u64) -> Counter {
    Counter {
        key: key.to_owned(),
        ttl: Duration::from_secs(60),
        cost,
        max: 10,
        floor: 0,
        prior: None,
        lease: false,
    }
}

/// The cluster client waits for nothing longer than the limiter's policy
/// allows: under a limiter of one 25 ms attempt, a seed node that accepts
/// connections and never answers is given up within that budget, every
/// time the client tries it (the default policy's would hold it 350 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_policy_bounds_what_the_cluster_client_waits_for() {
    let frozen = Frozen::start(0).await;
    let url = format!("redis-cluster://127.0.0.1:{}", frozen.port());
    let store = RedisClusterStore::open(&url).unwrap();
    let limits = [tagged("short", 10, "a")];
    assert_a_short_check_gives_up_in_time(store, &limits, &frozen, "redis-cluster").await;
}

/// A call that failed otherwise than by Cluster's `TRYAGAIN` (here the
/// server refused its key, `NOPERM`) is not sent again without its record:
/// such a failure may have been applied, and a resend would count it twice.
/// The node's ACL log counts each refusal of the key: one per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_failed_otherwise_than_by_tryagain_is_sent_once() {
    let cluster = shared_cluster().await;
    let user = format!("once{}", std::process::id());
    for port in cluster.ports() {
        let acl = [
            "ACL",
            "SETUSER",
            &user,
            "on",
            ">pw",
            "~{allowed}*",
            "&*",
            "+@all",
        ];
        cluster.cli(port, &acl).unwrap();
    }
    let with_user = format!("redis-cluster://{user}:pw@");
    let url = cluster.url().replacen("redis-cluster://", &with_user, 1);
    let store = RedisClusterStore::open(&url).unwrap();
    let key = format!("{{denied}}{}", CheckId::new());
    let primary = cluster.primary_of(slot(&mut raw(cluster).await, &key).await);
    let c = [minute_counter(&key, 1)];
    let counted = store.count(&c, CheckId::new(), deadline()).await;
    let reserved = store.reserve(&c, CheckId::new(), deadline()).await;
    let refunded = store.refund(&c, CheckId::new(), deadline()).await;
    for failed in [counted.err(), reserved.err(), refunded.err()] {
        assert_eq!(failed.map(|e| e.kind()), Some("backend"));
    }
    // `ACL LOG`: each entry's fields, one per line, an entry's first `count`.
    let log = cluster.cli(primary, &["ACL", "LOG", "128"]).unwrap();
    let lines: Vec<&str> = log.lines().map(str::trim).collect();
    let refusals: u64 = lines
        .split(|line| *line == "count")
        .filter(|entry| entry.contains(&key.as_str()))
        .filter_map(|entry| entry.first()?.parse::<u64>().ok())
        .sum();
    assert_eq!(refusals, 3, "{log}");
}
