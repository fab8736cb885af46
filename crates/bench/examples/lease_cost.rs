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

#[path = "support/closed_loop.rs"]
mod closed_loop;

use std::sync::Arc;

use tollgate::{Limit, Limiter, RuleSet};

/// Checks in flight at once (`LEASE_COST_IN_FLIGHT` to change it).
fn in_flight() -> usize {
    std::env::var("LEASE_COST_IN_FLIGHT").map_or(50, |n| n.parse().unwrap())
}

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
    let (limiter, rules) = (limiter.clone(), rules.clone());
    closed_loop::rate(in_flight(), secs, move |visitor| {
        let (limiter, rules) = (limiter.clone(), rules.clone());
        async move {
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
        }
    })
    .await
}

#[tokio::main]
async fn main() {
    let (rounds, secs, url, _server) = closed_loop::arguments().await;
    let store = tollgate::open_store(&url).unwrap();
    let text =
        closed_loop::unrefusing_rules().replace("concurrency = 2\n", "concurrency = 100000\n");
    let rules = Arc::new(RuleSet::from_toml(&text).unwrap());
    let limiter = Limiter::builder(store).cache(0).build();
    round(&limiter, &rules, Side::Plain, 1).await;
    let sides = [Side::Plain, Side::Released, Side::Kept];
    closed_loop::alternate(&sides, rounds, async |side| {
        round(&limiter, &rules, side, secs).await
    })
    .await;
}
