//! What a concurrency limit adds to a check, on a private redis-server (or
//! the store whose URL is the third argument; a persistent store keeps the
//! leases of an earlier run: give it a fresh one):
//! checks/s of the seed's 4-limit Ask AI reservation (`ask-burst`, `ask`,
//! `ask-site`, `ask-all`) against the same check with `ask-inflight` added
//! (a lease taken in the same script call), the lease either released at
//! once (a second round trip, as a finished request does) or kept until it
//! expires (the check alone). The sides alternate, `rounds` of `secs`
//! seconds each, 50 checks in flight (`LEASE_COST_IN_FLIGHT`) over 10,000
//! visitors.
//!
//! `cargo run --release -p tollgate-bench --example lease_cost [-- ROUNDS SECS [STORE_URL]]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::{Limit, Limiter, RuleSet};
use tollgate_test_support::redis_server::RedisServer;

/// Checks in flight at once (`LEASE_COST_IN_FLIGHT` to change it).
fn in_flight() -> usize {
    std::env::var("LEASE_COST_IN_FLIGHT").map_or(50, |n| n.parse().unwrap())
}
const VISITORS: u64 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    Plain,
    Released,
    Kept,
}

fn limits(rules: &RuleSet, side: Side, visitor: u64) -> Vec<Limit> {
    let who = format!("198.51.{}.{}", visitor / 256, visitor % 256);
    let mut limits = vec![
        rules.get("ask-burst").unwrap().limit(&[&who]).unwrap(),
        rules.get("ask").unwrap().limit(&["docs", &who]).unwrap(),
        rules.get("ask-site").unwrap().limit(&["docs"]).unwrap(),
        rules.get("ask-all").unwrap().limit::<&str>(&[]).unwrap(),
    ];
    if side != Side::Plain {
        limits.push(rules.get("ask-inflight").unwrap().limit(&[&who]).unwrap());
    }
    limits
}

/// Checks/s of `side` over `secs`.
async fn round(limiter: &Limiter, rules: &Arc<RuleSet>, side: Side, secs: u64) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..in_flight())
        .map(|_| {
            let (limiter, rules) = (limiter.clone(), rules.clone());
            let (stop, done, next) = (stop.clone(), done.clone(), next.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let visitor = next.fetch_add(7919, Ordering::Relaxed) % VISITORS;
                    let verdict = limiter
                        .reserve(&limits(&rules, side, visitor))
                        .await
                        .expect("a check");
                    match side {
                        Side::Released => {
                            for lease in verdict.leases() {
                                lease.release().await.expect("a release");
                            }
                        }
                        Side::Kept => std::mem::forget(verdict),
                        Side::Plain => {}
                    }
                    done.fetch_add(1, Ordering::Relaxed);
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

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(5, |a| a.parse().unwrap());
    let secs: u64 = args.next().map_or(5, |a| a.parse().unwrap());
    let (_server, url) = match args.next() {
        Some(url) => (None, url),
        None => {
            let server = tokio::task::spawn_blocking(RedisServer::start)
                .await
                .unwrap();
            let url = server.url();
            (Some(server), url)
        }
    };
    let store = tollgate::open_store(&url).unwrap();
    // The limits never refuse: only the work is measured.
    let text = tollgate::DEFAULT_RULES_TOML
        .replace("max = 20\n", "max = 100000000\n")
        .replace("max = 15\n", "max = 100000000\n")
        .replace("max = 500\n", "max = 100000000\n")
        .replace("max = 5000\n", "max = 100000000\n")
        .replace("concurrency = 2\n", "concurrency = 100000\n");
    let rules = Arc::new(RuleSet::from_toml(&text).unwrap());
    let limiter = Limiter::builder(store).cache(0).build();
    round(&limiter, &rules, Side::Plain, 1).await;
    let sides = [Side::Plain, Side::Released, Side::Kept];
    let mut seen: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
    for turn in 0..rounds {
        let order: Vec<usize> = match turn % 2 {
            0 => (0..sides.len()).collect(),
            _ => (0..sides.len()).rev().collect(),
        };
        for i in order {
            let rate = round(&limiter, &rules, sides[i], secs).await;
            println!("turn {turn} {:?}: {rate:.0} checks/s", sides[i]);
            seen[i].push(rate);
        }
    }
    let plain = median(seen[0].clone());
    for (side, rates) in sides.iter().zip(seen) {
        let rate = median(rates);
        println!(
            "{side:?}: median {rate:.0} checks/s, {:.2} of Plain",
            rate / plain
        );
    }
}
