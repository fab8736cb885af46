//! What the tower guard adds to a check: checks/s of the seed's 4-limit
//! Ask AI reservation (`ask-burst`, `ask`, `ask-site`, `ask-all`) made
//! directly with `Limiter::reserve` (the ceiling) against the same
//! reservation made by a `Guard` in front of a service that answers at
//! once (path template, visitor from the peer, key parts, the verdict and
//! the RateLimit fields on the response), on a private redis-server (or
//! the store whose URL is the third argument: `memory` shows the guard's
//! own cost with no round trip). The sides alternate, `rounds` of `secs`
//! seconds each, 50 checks in flight over 10,000 visitors (`support/closed_loop.rs`).
//!
//! `cargo run --release -p tollgate-bench --example guard_cost [-- ROUNDS SECS [STORE_URL]]`
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/closed_loop.rs"]
mod closed_loop;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use tollgate::tower::{Guard, KeyPart, PeerAddr, Trust, VisitorSource};
use tollgate::{Limiter, RuleSet, Visitor};
use tower::{Layer, ServiceExt};

const IN_FLIGHT: usize = 50;

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
    let service = guard.layer(tower::service_fn(|_: http::Request<()>| async {
        Ok::<_, Infallible>(http::Response::new(String::from("answer")))
    }));
    let (limiter, rules) = (limiter.clone(), rules.clone());
    closed_loop::rate(IN_FLIGHT, secs, move |visitor| {
        let (limiter, rules, service) = (limiter.clone(), rules.clone(), service.clone());
        async move {
            let peer = peer(visitor);
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
                    let mut request = http::Request::post("/sites/docs/ask").body(()).unwrap();
                    request.extensions_mut().insert(PeerAddr(peer));
                    let response = service.oneshot(request).await.unwrap();
                    assert_eq!(response.status(), http::StatusCode::OK);
                }
            }
        }
    })
    .await
}

#[tokio::main]
async fn main() {
    let (rounds, secs, url, _server) = closed_loop::arguments().await;
    let store = tollgate::open_store(&url).unwrap();
    let rules = Arc::new(RuleSet::from_toml(&closed_loop::unrefusing_rules()).unwrap());
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
    closed_loop::alternate(&sides, rounds, async |side| {
        round(&limiter, &rules, &guard, side, secs).await
    })
    .await;
}
