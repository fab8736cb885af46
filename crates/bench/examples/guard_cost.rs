//! What the tower guard adds to a check: checks/s of the seed's 4-limit
//! Ask AI reservation (`ask-burst`, `ask`, `ask-site`, `ask-all`) made
//! directly with `Limiter::reserve` (the ceiling) against the same
//! reservation made by a `Guard` in front of a service that answers at
//! once (path template, visitor from the peer, key parts, the verdict and
//! the RateLimit fields on the response), on a private redis-server (or
//! the store whose URL is the third argument: `memory` shows the guard's
//! own cost with no round trip). The sides alternate, `rounds` of `secs`
//! seconds each, 50 checks in flight over 10,000 visitors.
//!
//! `cargo run --release -p tollgate-bench --example guard_cost [-- ROUNDS SECS [STORE_URL]]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tollgate::tower::{Guard, KeyPart, PeerAddr, Trust, VisitorSource};
use tollgate::{Limiter, RuleSet, Visitor};
use tollgate_test_support::redis_server::RedisServer;
use tower::{Layer, ServiceExt};

const IN_FLIGHT: usize = 50;
const VISITORS: u64 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Side {
    Direct,
    Guarded,
}

fn peer(visitor: u64) -> SocketAddr {
    SocketAddr::from((
        [198, 51, (visitor / 256) as u8, (visitor % 256) as u8],
        40_000,
    ))
}

/// Checks/s of `side` over `secs`.
async fn round(
    limiter: &Limiter,
    rules: &Arc<RuleSet>,
    guard: &Guard,
    side: Side,
    secs: u64,
) -> f64 {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let next = Arc::new(AtomicU64::new(0));
    let service = guard.layer(tower::service_fn(|_: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(String::from("answer")))
    }));
    let workers: Vec<_> = (0..IN_FLIGHT)
        .map(|_| {
            let (limiter, rules, service) = (limiter.clone(), rules.clone(), service.clone());
            let (stop, done, next) = (stop.clone(), done.clone(), next.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let peer = peer(next.fetch_add(7919, Ordering::Relaxed) % VISITORS);
                    match side {
                        Side::Direct => {
                            let who = Visitor::from_ip(peer.ip());
                            let who = who.as_str();
                            let limits = [
                                rules.get("ask-burst").unwrap().limit(&[who]).unwrap(),
                                rules.get("ask").unwrap().limit(&["docs", who]).unwrap(),
                                rules.get("ask-site").unwrap().limit(&["docs"]).unwrap(),
                                rules.get("ask-all").unwrap().limit::<&str>(&[]).unwrap(),
                            ];
                            let verdict = limiter.reserve(&limits).await.expect("a check");
                            assert!(verdict.is_allowed(), "{:?}", verdict.limited());
                        }
                        Side::Guarded => {
                            let mut request =
                                http::Request::post("/sites/docs/ask").body(()).unwrap();
                            request.extensions_mut().insert(PeerAddr(peer));
                            let response = service.clone().oneshot(request).await.unwrap();
                            assert_eq!(response.status(), http::StatusCode::OK);
                        }
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                    // The memory store answers without waiting: let the
                    // timer that ends the round run.
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
        .replace("max = 5000\n", "max = 100000000\n");
    let rules = Arc::new(RuleSet::from_toml(&text).unwrap());
    let limiter = Limiter::builder(store).cache(0).build();
    let guard = Guard::new(limiter.clone())
        .path("/sites/{project}/ask")
        .unwrap()
        .visitors(VisitorSource::new(Trust::Peer))
        .keyed(rules.get("ask-burst").unwrap(), &[KeyPart::Visitor])
        .unwrap()
        .keyed(
            rules.get("ask").unwrap(),
            &[KeyPart::Param("project"), KeyPart::Visitor],
        )
        .unwrap()
        .keyed(rules.get("ask-site").unwrap(), &[KeyPart::Param("project")])
        .unwrap()
        .keyed(rules.get("ask-all").unwrap(), &[])
        .unwrap();
    round(&limiter, &rules, &guard, Side::Direct, 1).await;
    let sides = [Side::Direct, Side::Guarded];
    let mut seen: Vec<Vec<f64>> = vec![Vec::new(); sides.len()];
    for turn in 0..rounds {
        let order: Vec<usize> = match turn % 2 {
            0 => (0..sides.len()).collect(),
            _ => (0..sides.len()).rev().collect(),
        };
        for i in order {
            let rate = round(&limiter, &rules, &guard, sides[i], secs).await;
            println!("turn {turn} {:?}: {rate:.0} checks/s", sides[i]);
            seen[i].push(rate);
        }
    }
    let direct = median(seen[0].clone());
    for (side, rates) in sides.iter().zip(seen) {
        let rate = median(rates);
        println!(
            "{side:?}: median {rate:.0} checks/s, {:.2} of Direct",
            rate / direct
        );
    }
}
