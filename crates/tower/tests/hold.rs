//! `HoldLeasesLayer`: a handler that checks limits itself and puts its
//! verdict in the response's extensions (as the demo's gRPC handler does)
//! has the verdict's leases held until the response body ends, not until
//! the handler returns; a response without a verdict is left as it is.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use tokio::sync::mpsc;
use tollgate_core::{Limiter, Mode, Policy, Rule, Window};
use tollgate_memory::MemoryStore;
use tollgate_tower::{HoldLeasesLayer, check};
use tower::{Layer, ServiceExt};

type Frames = futures_util::stream::BoxStream<'static, Result<Frame<Bytes>, Infallible>>;

/// One call of a handler behind the layer holding the lease of `one`:
/// its response (whose body streams what `chunks` sends), or `None` when
/// the lease is taken (the handler answers 429 without a verdict).
async fn call(
    limiter: &Limiter,
    chunks: mpsc::Receiver<Bytes>,
) -> Option<Response<impl http_body::Body<Data = Bytes>>> {
    let one = Rule::concurrency("one", 1, Window::MINUTE).unwrap();
    let limit = one.limit::<&str>(&[]).unwrap();
    let limiter = limiter.clone();
    let chunks = std::sync::Mutex::new(Some(chunks));
    let handler = tower::service_fn(move |_: Request<()>| {
        let (limiter, limit) = (limiter.clone(), limit.clone());
        let chunks = chunks.lock().unwrap().take().unwrap();
        async move {
            let frames = futures_util::stream::unfold(chunks, |mut chunks| async move {
                let chunk = chunks.recv().await?;
                Some((Ok(Frame::data(chunk)), chunks))
            });
            let mut response = Response::new(StreamBody::new(Box::pin(frames) as Frames));
            match check(&limiter, &[limit], Mode::Reserve, Policy::FailClosed).await {
                // The handler returns here; the body is still to come.
                Ok(verdict) => drop(response.extensions_mut().insert(verdict)),
                Err(_) => *response.status_mut() = http::StatusCode::TOO_MANY_REQUESTS,
            }
            Ok::<_, Infallible>(response)
        }
    });
    let response = HoldLeasesLayer
        .layer(handler)
        .oneshot(Request::new(()))
        .await
        .unwrap();
    (response.status() == http::StatusCode::OK).then_some(response)
}

// Paused time: the waits are for a task of this runtime, not a server.
#[tokio::test(start_paused = true)]
async fn a_verdict_in_the_response_holds_its_leases_until_the_body_ends() {
    let limiter = Limiter::new(MemoryStore::new());
    let (sender, chunks) = mpsc::channel(1);
    let response = call(&limiter, chunks)
        .await
        .expect("the first call is admitted");
    let mut body = response.into_body();
    sender.send(Bytes::from_static(b"part")).await.unwrap();
    assert!(body.frame().await.is_some());
    // The handler has returned; the body is still being sent: held. (A
    // lease dropped instead would be released by a task: let it run.)
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let (_, idle) = mpsc::channel(1);
    assert!(
        call(&limiter, idle).await.is_none(),
        "the lease was released before the body ended"
    );
    // The body ends: released (by a task, soon after).
    drop(sender);
    assert!(body.frame().await.is_none());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_, idle) = mpsc::channel(1);
        if call(&limiter, idle).await.is_some() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the lease was never released"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
