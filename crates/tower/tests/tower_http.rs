//! The guard inside a tower-http stack (a trace layer and a timeout around
//! it), served by hyper over real HTTP on loopback to a real client, with
//! its path template guarding one route of a service that has others: a
//! tenant's calls keyed by the path parameter and the principal an
//! authentication layer put in the request's extensions, and the visitor
//! from the peer the accept loop recorded. Other paths pass through
//! unchecked; a call without a principal is the service's mistake (500).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tollgate_core::{Limiter, Rule, Window};
use tollgate_memory::MemoryStore;
use tollgate_tower::{Guard, KeyPart, PeerAddr, Trust, VisitorSource};
use tower::ServiceBuilder;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;

/// Who an authentication layer says the caller is.
#[derive(Clone, Debug)]
struct Principal(String);

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn guard(limiter: Limiter) -> Guard {
    let calls = Rule::new("calls", 5, Window::DAY)
        .and_then(|r| r.with_key(&["tenant", "principal"]))
        .unwrap();
    let visitors = Rule::new("visitors", 1_000, Window::DAY)
        .and_then(|r| r.with_key(&["visitor"]))
        .unwrap();
    Guard::new(limiter)
        .path("/v1/{tenant}/complete")
        .unwrap()
        .visitors(VisitorSource::new(Trust::Peer))
        .keyed(
            &calls,
            &[KeyPart::Param("tenant"), KeyPart::extension::<Principal>()],
        )
        .unwrap()
        .keyed(&visitors, &[KeyPart::Visitor])
        .unwrap()
}

/// Serves the stack on a loopback port; its address.
async fn serve(limiter: Limiter) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stack = ServiceBuilder::new()
        .layer(TraceLayer::new_for_http())
        .map_request(|mut request: Request<hyper::body::Incoming>| {
            // An authentication layer: a bearer token is the principal.
            let principal = request
                .headers()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .map(|token| Principal(token.to_owned()));
            if let Some(principal) = principal {
                request.extensions_mut().insert(principal);
            }
            request
        })
        .layer(guard(limiter))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            Duration::from_secs(5),
        ))
        .service_fn(|_: Request<hyper::body::Incoming>| async {
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
        });
    tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            // What the server knows of the connection, for the visitor.
            let stack = ServiceBuilder::new()
                .map_request(move |mut request: Request<hyper::body::Incoming>| {
                    request.extensions_mut().insert(PeerAddr(peer));
                    request
                })
                .service(stack.clone());
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), TowerToHyperService::new(stack)),
            );
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tower_http_stack_guards_its_route_by_tenant_and_principal() {
    let limiter = Limiter::new(MemoryStore::new());
    let addr = serve(limiter.clone()).await;
    let client = reqwest::Client::new();
    let call = |path: &str, token: Option<&str>| {
        let mut request = client.post(format!("http://{addr}{path}"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        request.send()
    };
    for n in 1..=5 {
        let response = call("/v1/acme/complete", Some("ada")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "call {n}");
        let fields = response.headers()["ratelimit"].to_str().unwrap().to_owned();
        assert!(
            fields.starts_with(&format!("\"calls\";r={};", 5 - n)),
            "{fields}"
        );
    }
    // The route however its path is written (empty segments, a trailing
    // slash, an encoded literal): a lenient service answers all of them.
    for path in [
        "/v1/acme/complete",
        "/v1/acme/complete/",
        "//v1/acme//complete",
        "/v1/acme/%63omplete",
    ] {
        let refused = call(path, Some("ada")).await.unwrap();
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "{path}");
    }
    // Another principal, another tenant: budgets of their own.
    assert_eq!(
        call("/v1/acme/complete", Some("grace"))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        call("/v1/globex/complete", Some("ada"))
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    // Other paths are not this guard's route: through, unchecked, uncounted.
    for path in ["/healthz", "/v1/acme/other", "/v1/acme/complete/extra"] {
        let response = call(path, Some("ada")).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{path}");
        assert!(!response.headers().contains_key("ratelimit"), "{path}");
    }
    // No principal where the authentication layer should have put one.
    let unkeyed = call("/v1/acme/complete", None).await.unwrap();
    assert_eq!(unkeyed.status(), StatusCode::INTERNAL_SERVER_ERROR);
    // The visitor is the loopback peer, and its count the 7 calls admitted:
    // rules keyed by different parts reserve all or nothing, so the refused
    // calls spent nothing, and the 500's keys failed before any count.
    let visitors = Rule::new("visitors", 1_000, Window::DAY)
        .and_then(|r| r.with_key(&["visitor"]))
        .unwrap();
    let left = limiter
        .remaining(&[visitors.limit(&["127.0.0.1"]).unwrap()])
        .await
        .unwrap();
    assert_eq!(left[0].remaining(), 1_000 - 7);
}
