//! A guard holds a concurrency rule's lease until the response body has
//! been sent in full or dropped: a second call meanwhile is a 429 naming
//! the rule, and a call after the body ended is admitted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, to_bytes};
use axum::routing::get;
use http::{Request, StatusCode};
use serde_json::Value;
use tokio::sync::mpsc;
use tollgate_axum::{Guard, Trust, VisitorSource};
use tollgate_core::{Limiter, Rule, Window};
use tollgate_memory::MemoryStore;
use tower::ServiceExt;

/// A route streaming what `chunks` sends, behind one lease of `inflight`;
/// "done" once `chunks` was taken.
fn app(limiter: Limiter, chunks: mpsc::Receiver<Bytes>) -> Router {
    let inflight = Rule::concurrency("inflight", 1, Window::MINUTE).unwrap();
    let guard = Guard::new(limiter)
        .visitors(VisitorSource::new(Trust::Peer))
        .rule(&inflight, |_| Some(Vec::new()));
    let chunks = std::sync::Arc::new(std::sync::Mutex::new(Some(chunks)));
    Router::new().route(
        "/stream",
        get(move || {
            let chunks = chunks.lock().unwrap().take();
            async move {
                match chunks {
                    Some(chunks) => Body::from_stream(futures_util::stream::unfold(
                        chunks,
                        |mut chunks| async move {
                            let chunk = chunks.recv().await?;
                            Some((Ok::<_, Infallible>(chunk), chunks))
                        },
                    )),
                    None => Body::from("done"),
                }
            }
        })
        .route_layer(guard),
    )
}

fn request() -> Request<Body> {
    let mut request = Request::get("/stream").body(Body::empty()).unwrap();
    let peer: std::net::SocketAddr = "203.0.113.9:4000".parse().unwrap();
    request
        .extensions_mut()
        .insert(axum::extract::ConnectInfo(peer));
    request
}

// Paused time: the waits below are for a task of this runtime, not a server.
#[tokio::test(start_paused = true)]
async fn a_lease_is_held_until_the_body_has_been_sent() {
    let store = MemoryStore::new();
    let limiter = Limiter::builder(store.clone()).cache(0).build();
    let (send, chunks) = mpsc::channel(4);
    let app = app(limiter, chunks);
    let streaming = app.clone().oneshot(request()).await.unwrap();
    assert_eq!(streaming.status(), StatusCode::OK);
    // Time for a release in the background, were the lease let go.
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The body is still being sent: the one lease is held.
    let refused = app.clone().oneshot(request()).await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    let body: Value =
        serde_json::from_slice(&to_bytes(refused.into_body(), 1 << 16).await.unwrap()).unwrap();
    assert_eq!(body["limit"], "inflight", "{body}");
    send.send(Bytes::from_static(b"part")).await.unwrap();
    drop(send);
    let sent = to_bytes(streaming.into_body(), 1 << 16).await.unwrap();
    assert_eq!(&sent[..], b"part");
    // Released in the background once the body ended.
    let mut admitted = false;
    for _ in 0..100 {
        let again = app.clone().oneshot(request()).await.unwrap();
        if again.status() == StatusCode::OK {
            admitted = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(admitted, "the lease outlived the body");
}
