//! A 400 for a missing or malformed client address never names the header
//! the service reads: that would tell a caller what to forge.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::ConnectInfo;
use axum::routing::get;
use http::{Request, StatusCode};
use serde_json::Value;
use tollgate_axum::{ClientVisitor, Guard, Network, Trust, VisitorSource};
use tollgate_core::{Limiter, ManualClock, Rule, Window};
use tollgate_memory::MemoryStore;
use tower::ServiceExt;

async fn whoami(ClientVisitor(visitor): ClientVisitor) -> String {
    visitor.to_string()
}

/// `/whoami` (the extractor) and `/guarded` (the guard), both with `source`.
fn app(source: VisitorSource) -> Router {
    let clock = ManualClock::new(Duration::from_secs(86_400));
    let limiter = Limiter::builder(MemoryStore::with_clock(clock.clone()))
        .clock(clock)
        .build();
    let rule = Rule::new("ask", 100, Window::DAY).unwrap();
    let guard = Guard::new(limiter)
        .visitors(source.clone())
        .rule(&rule, |call| Some(vec![call.visitor()?.into()]));
    Router::new()
        .route("/whoami", get(whoami))
        .route("/guarded", get(|| async { "done" }).route_layer(guard))
        .with_state(source)
}

/// The 400 body of a request to `path` from `peer` with `headers`.
async fn bad_request(
    app: &Router,
    path: &str,
    peer: Option<&str>,
    headers: &[(&str, &str)],
) -> String {
    let mut request = Request::get(path);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let mut request = request.body(Body::empty()).unwrap();
    if let Some(peer) = peer {
        let addr: SocketAddr = peer.parse().unwrap();
        request.extensions_mut().insert(ConnectInfo(addr));
    }
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = to_bytes(response.into_body(), 1 << 16).await.unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "{path} {peer:?} {headers:?}: {text}"
    );
    text
}

#[tokio::test]
async fn address_400_bodies_never_name_a_header() {
    let cloudflare = Some("173.245.48.1:443");
    let proxy = Some("10.0.0.2:8080");
    let forwarded: Vec<Network> = vec!["10.0.0.0/8".parse().unwrap()];
    type Case<'a> = (Option<&'a str>, &'a [(&'a str, &'a str)]);
    let cases: Vec<(Trust, Vec<Case<'_>>)> = vec![
        (
            Trust::Peer,
            vec![(None, &[("cf-connecting-ip", "198.51.100.1")])],
        ),
        (
            "cf-connecting-ip".parse().unwrap(),
            vec![
                (None, &[("cf-connecting-ip", "198.51.100.1")]),
                (cloudflare, &[]),
                (cloudflare, &[("cf-connecting-ip", " ")]),
                (cloudflare, &[("cf-connecting-ip", "999.1.1.1")]),
                (
                    cloudflare,
                    &[("cf-connecting-ip", "203.0.113.9, 198.51.100.1")],
                ),
                (
                    cloudflare,
                    &[
                        ("cf-connecting-ip", "203.0.113.9"),
                        ("cf-connecting-ip", "198.51.100.1"),
                    ],
                ),
            ],
        ),
        (
            Trust::XForwardedFor(forwarded),
            vec![
                (None, &[("x-forwarded-for", "198.51.100.1")]),
                (proxy, &[]),
                (proxy, &[("x-forwarded-for", "garbage")]),
                (proxy, &[("x-forwarded-for", "203.0.113.9,,10.1.1.1")]),
            ],
        ),
    ];
    for (trust, requests) in cases {
        let app = app(VisitorSource::new(trust.clone()));
        for (peer, headers) in requests {
            for path in ["/whoami", "/guarded"] {
                let text = bad_request(&app, path, peer, headers).await;
                let lower = text.to_lowercase();
                for name in ["cf-connecting-ip", "forwarded"] {
                    assert!(
                        !lower.contains(name),
                        "{trust} {path} {peer:?} {headers:?}: the body names {name}: {text}"
                    );
                }
                let body: Value = serde_json::from_str(&text).unwrap();
                assert!(
                    body["detail"] == "missing client address"
                        || body["detail"] == "malformed client address",
                    "{trust} {path} {peer:?} {headers:?}: {text}"
                );
            }
        }
    }
}
