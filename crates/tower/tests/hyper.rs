//! The guard over services that are not axum routes: a plain tower service
//! served by hyper over real HTTP on loopback, keyed by a path segment and
//! by a principal an authentication layer put in the request's
//! extensions; 200 requests racing through clones of one guarded service,
//! never admitting more than the limit; and refusals an application
//! shapes itself.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tollgate_core::{Limiter, Mode, Rule, Window};
use tollgate_memory::MemoryStore;
use tollgate_tower::{Guard, KeyPart, Rejection};
use tower::{Layer, Service, ServiceBuilder, ServiceExt};

/// Who an authentication layer says the caller is.
#[derive(Clone, Debug)]
struct Principal(String);

fn rules() -> (Rule, Rule) {
    let calls = Rule::new("calls", 15, Window::DAY)
        .and_then(|r| r.with_key(&["site", "principal"]))
        .unwrap();
    let site = Rule::new("site", 1_000, Window::DAY)
        .and_then(|r| r.with_key(&["site"]))
        .unwrap();
    (calls, site)
}

/// A guard keyed by the path's second segment and the principal: `site`
/// by a declared key part (a path without that segment: 400, before any
/// other rule is keyed), `calls` by a key function (whose `None` would be
/// a 500: a misconfigured route).
fn guard(limiter: Limiter) -> Guard {
    let (calls, site) = rules();
    Guard::new(limiter)
        .keyed(&site, &[KeyPart::Segment(1)])
        .unwrap()
        .rule(&calls, |call| {
            let principal = call.extension::<Principal>()?;
            Some(vec![call.segment(1)?.into(), principal.0.clone()])
        })
}

/// The handler: counts its runs.
fn handler(
    runs: Arc<AtomicUsize>,
) -> impl Service<
    Request<hyper::body::Incoming>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Clone {
    tower::service_fn(move |_: Request<hyper::body::Incoming>| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"answered"))))
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_hyper_service_is_guarded_by_segment_and_principal() {
    let limiter = Limiter::new(MemoryStore::new());
    let runs = Arc::new(AtomicUsize::new(0));
    let service = ServiceBuilder::new()
        .map_request(|mut request: Request<hyper::body::Incoming>| {
            let who = request
                .headers()
                .get("x-user")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("anonymous")
                .to_owned();
            request.extensions_mut().insert(Principal(who));
            request
        })
        .layer(guard(limiter))
        .service(handler(runs.clone()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(
                hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service),
            );
        }
    });
    let client = reqwest::Client::new();
    let ask_at = |path: &'static str, user: &'static str| {
        client
            .post(format!("http://{addr}{path}"))
            .header("x-user", user)
            .send()
    };
    let ask = |user: &'static str| ask_at("/sites/docs/ask", user);
    // The declared segment missing: 400, nothing counted, no handler.
    let bad = ask_at("/", "alice").await.unwrap();
    assert_eq!(bad.status(), StatusCode::BAD_REQUEST);
    for i in 0..15 {
        // Percent-encoded, `docs` is the same site and budget.
        let path = if i % 2 == 0 {
            "/sites/docs/ask"
        } else {
            "/sites/%64ocs/ask"
        };
        let response = ask_at(path, "alice").await.unwrap();
        assert_eq!(response.status(), StatusCode::OK, "ask {}", i + 1);
        assert!(response.headers().contains_key("ratelimit-policy"));
        assert_eq!(response.text().await.unwrap(), "answered");
    }
    let refused = ask("alice").await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=86_400).contains(&retry), "{retry}");
    let body: serde_json::Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
    assert_eq!(body["limit"], "calls");
    // Another principal has a budget of its own.
    assert_eq!(ask("bob").await.unwrap().status(), StatusCode::OK);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        16,
        "a refused call ran the handler"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_requests_through_clones_of_one_guard_never_over_admit() {
    let limiter = Limiter::new(MemoryStore::new());
    let (calls, site) = rules();
    let guard = Guard::new(limiter.clone())
        .rule(&calls, |call| {
            Some(vec![call.segment(1)?.into(), "all".into()])
        })
        .rule(&site, |call| Some(vec![call.segment(1)?.into()]));
    assert_eq!(guard.spends(), Mode::Reserve);
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let service = guard.layer(tower::service_fn(move |_: Request<String>| {
        let runs = counted.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
        }
    }));
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let service = service.clone();
            tokio::spawn(async move {
                let request = Request::post("/sites/race/ask")
                    .body(String::new())
                    .unwrap();
                service.oneshot(request).await.unwrap().status()
            })
        })
        .collect();
    let mut allowed = 0;
    for task in tasks {
        match task.await.unwrap() {
            StatusCode::OK => allowed += 1,
            status => assert_eq!(status, StatusCode::TOO_MANY_REQUESTS),
        }
    }
    assert_eq!(allowed, 15);
    assert_eq!(runs.load(Ordering::SeqCst), 15);
    // Reserved all or nothing: the 185 refused spent nothing of `site`.
    let site = site.limit(&["race"]).unwrap();
    let left = limiter.remaining(&[site]).await.unwrap();
    assert_eq!(left[0].remaining(), 1_000 - 15);
}

#[tokio::test]
async fn an_application_shapes_its_own_refusals() {
    let limiter = Limiter::new(MemoryStore::new());
    let (calls, _) = rules();
    let guard = Guard::new(limiter)
        .rule(&calls, |call| {
            Some(vec![call.segment(1)?.into(), "me".into()])
        })
        .on_rejection(|rejection| {
            let text = match rejection {
                Rejection::Limited { limited, .. } => {
                    format!(
                        "slow down: {} for {} s",
                        limited.limit(),
                        limited.retry_after()
                    )
                }
                other => format!("refused: {}", other.status()),
            };
            let mut response = Response::new(text);
            *response.status_mut() = StatusCode::IM_A_TEAPOT;
            response
        });
    let service = guard.layer(tower::service_fn(|_: Request<String>| async {
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
    }));
    let ask = || {
        let service = service.clone();
        async move {
            let request = Request::post("/sites/docs/ask")
                .body(String::new())
                .unwrap();
            service.oneshot(request).await.unwrap()
        }
    };
    for _ in 0..15 {
        assert_eq!(ask().await.status(), StatusCode::OK);
    }
    let refused = ask().await;
    assert_eq!(refused.status(), StatusCode::IM_A_TEAPOT);
    let body = refused.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(text.starts_with("slow down: calls for "), "{text}");
}

/// A key by a path parameter its guard's template does not name (or with
/// no template) is refused when the guard is built, and the error names
/// the template; the guard's debug output shows it too.
#[test]
fn a_key_by_an_unnamed_parameter_is_refused_when_built() {
    let (calls, _) = rules();
    let guard = Guard::new(Limiter::new(MemoryStore::new()))
        .path("/sites/{site}/ask")
        .unwrap();
    assert!(format!("{guard:?}").contains("/sites/{site}/ask"));
    let unnamed = guard
        .clone()
        .keyed(&calls, &[KeyPart::Param("project"), KeyPart::Segment(2)])
        .unwrap_err();
    assert_eq!(
        unnamed.to_string(),
        "rule `calls` is keyed by the path parameter `project`, which the guard's path `/sites/{site}/ask` does not name"
    );
    assert!(
        guard
            .keyed(&calls, &[KeyPart::Param("site"), KeyPart::Segment(2)])
            .is_ok()
    );
}
