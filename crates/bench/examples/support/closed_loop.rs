//! What the examples that compare two ways of checking share: a closed
//! loop of checks in flight over a number of seconds, sides measured in
//! alternating order over rounds, medians, and rules that never refuse.
//!
//! Included by each example with
//! `#[path = "support/closed_loop.rs"] mod closed_loop;`.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate_test_support::redis_server::RedisServer;

/// Visitors the checks are spread over.
pub(crate) const VISITORS: u64 = 10_000;

/// Calls of `check` per second over `secs`, `in_flight` at once, each
/// given the next visitor (`0..VISITORS`, in a scattered order).
pub(crate) async fn rate<F, Fut>(in_flight: usize, secs: u64, check: F) -> f64
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..in_flight)
        .map(|_| {
            let check = check.clone();
            let (stop, done, next) = (stop.clone(), done.clone(), next.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    check(next.fetch_add(7919, Ordering::Relaxed) % VISITORS).await;
                    done.fetch_add(1, Ordering::Relaxed);
                    // A store that answers without waiting (memory) must
                    // still let the timer that ends the round run.
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    let checks = done.load(Ordering::Relaxed);
    let took = started.elapsed();
    for worker in workers {
        worker.await.unwrap();
    }
    checks as f64 / took.as_secs_f64()
}

/// Measures each of `sides` `rounds` times with `measure` (checks/s),
/// in alternating order, printing each round and then each side's median
/// as a share of the first side's.
pub(crate) async fn alternate<S: Copy + Debug>(
    sides: &[S],
    rounds: usize,
    mut measure: impl AsyncFnMut(S) -> f64,
) {
    let mut seen: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
    for turn in 0..rounds {
        let order: Vec<usize> = match turn % 2 {
            0 => (0..sides.len()).collect(),
            _ => (0..sides.len()).rev().collect(),
        };
        for i in order {
            let rate = measure(sides[i]).await;
            println!("turn {turn} {:?}: {rate:.0} checks/s", sides[i]);
            seen[i].push(rate);
        }
    }
    let first = median(seen[0].clone());
    for (side, rates) in sides.iter().zip(seen) {
        let rate = median(rates);
        println!(
            "{side:?}: median {rate:.0} checks/s, {:.2} of {:?}",
            rate / first,
            sides[0]
        );
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// `ROUNDS SECS [STORE_URL]` from the command line (5, 5, and a private
/// redis-server when no URL is given): the rounds, the seconds, the URL,
/// and the server to keep alive while it is used.
pub(crate) async fn arguments() -> (usize, u64, String, Option<RedisServer>) {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(5, |a| a.parse().unwrap());
    let secs: u64 = args.next().map_or(5, |a| a.parse().unwrap());
    match args.next() {
        Some(url) => (rounds, secs, url, None),
        None => {
            let server = tokio::task::spawn_blocking(RedisServer::start)
                .await
                .unwrap();
            let url = server.url();
            (rounds, secs, url, Some(server))
        }
    }
}

/// The shipped rules with every call limit's max raised so that none
/// refuses: only the work is measured.
pub(crate) fn unrefusing_rules() -> String {
    tollgate::DEFAULT_RULES_TOML
        .replace("max = 20\n", "max = 100000000\n")
        .replace("max = 15\n", "max = 100000000\n")
        .replace("max = 500\n", "max = 100000000\n")
        .replace("max = 5000\n", "max = 100000000\n")
}
