//! The guard over a tonic server, called by a real tonic client over
//! loopback: 15 calls answered, then `RESOURCE_EXHAUSTED` whose
//! `RetryInfo` and `QuotaFailure` decode; the RateLimit fields as response
//! metadata; `UNAVAILABLE` with `RetryInfo` when the store fails under
//! fail-closed; a lease held until a response stream ends. The service is
//! tonic's own server machinery over `()` messages (no `.proto` needed).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use http::uri::PathAndQuery;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tollgate_core::{Fault, Faulty, Limiter, Rule, Window};
use tollgate_memory::MemoryStore;
use tollgate_tower::{Guard, KeyPart, Trust, VisitorSource};
use tonic::body::Body;
use tonic::server::{Grpc, NamedService, ServerStreamingService, UnaryService};
use tonic::transport::{Channel, Server, server::TcpIncoming};
use tonic::{Code, Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;
use tonic_types::StatusExt;

type Codec = ProstCodec<(), ()>;

/// `test.Ping/Ping` answers `()`; `test.Ping/Watch` streams a `()` for
/// each message its test sends, and ends when the test drops its sender.
#[derive(Clone)]
struct Ping {
    watch: Arc<tokio::sync::Mutex<mpsc::Receiver<()>>>,
}

impl NamedService for Ping {
    const NAME: &'static str = "test.Ping";
}

struct Unary;

impl UnaryService<()> for Unary {
    type Response = ();
    type Future = Ready<Result<Response<()>, Status>>;
    fn call(&mut self, _: Request<()>) -> Self::Future {
        ready(Ok(Response::new(())))
    }
}

type Items = Pin<Box<dyn Stream<Item = Result<(), Status>> + Send>>;

struct Watch(Arc<tokio::sync::Mutex<mpsc::Receiver<()>>>);

impl ServerStreamingService<()> for Watch {
    type Response = ();
    type ResponseStream = Items;
    type Future = Ready<Result<Response<Items>, Status>>;
    fn call(&mut self, _: Request<()>) -> Self::Future {
        let receiver = self.0.clone();
        let items = futures_util::stream::unfold(receiver, |receiver| async move {
            receiver.lock().await.recv().await?;
            Some((Ok(()), receiver))
        });
        ready(Ok(Response::new(Box::pin(items) as Items)))
    }
}

impl tower::Service<http::Request<Body>> for Ping {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let watch = self.watch.clone();
        Box::pin(async move {
            let mut grpc = Grpc::new(Codec::default());
            Ok(match request.uri().path() {
                "/test.Ping/Watch" => grpc.server_streaming(Watch(watch), request).await,
                _ => grpc.unary(Unary, request).await,
            })
        })
    }
}

/// Serves `guard` over [`Ping`] on a loopback port; the test's sender of
/// `Watch` items.
async fn serve(guard: Guard) -> (SocketAddr, mpsc::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (items, receiver) = mpsc::channel(4);
    let ping = Ping {
        watch: Arc::new(tokio::sync::Mutex::new(receiver)),
    };
    tokio::spawn(
        Server::builder()
            .layer(guard)
            .add_service(ping)
            .serve_with_incoming(TcpIncoming::from(listener)),
    );
    (addr, items)
}

async fn client(addr: SocketAddr) -> tonic::client::Grpc<Channel> {
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    tonic::client::Grpc::new(channel)
}

async fn ping(
    client: &mut tonic::client::Grpc<Channel>,
    principal: &str,
) -> Result<Response<()>, Status> {
    client.ready().await.unwrap();
    let mut request = Request::new(());
    request
        .metadata_mut()
        .insert("x-principal", principal.parse().unwrap());
    client
        .unary(
            request,
            PathAndQuery::from_static("/test.Ping/Ping"),
            Codec::default(),
        )
        .await
}

/// 15 calls a day per visitor (the peer tonic records) and principal
/// (trusted metadata).
fn guard(limiter: Limiter) -> Guard {
    let calls = Rule::new("calls", 15, Window::DAY)
        .and_then(|r| r.with_key(&["visitor", "principal"]))
        .unwrap();
    Guard::new(limiter)
        .visitors(VisitorSource::new(Trust::Peer))
        .keyed(&calls, &[KeyPart::Visitor, KeyPart::Header("x-principal")])
        .unwrap()
}

#[tokio::test]
async fn fifteen_calls_then_resource_exhausted_with_retry_info() {
    let (addr, _items) = serve(guard(Limiter::new(MemoryStore::default()))).await;
    let mut client = client(addr).await;
    for call in 1..=15 {
        let response = ping(&mut client, "ada")
            .await
            .unwrap_or_else(|status| panic!("call {call}: {status:?}"));
        let remaining = response
            .metadata()
            .get("ratelimit")
            .unwrap()
            .to_str()
            .unwrap();
        assert!(
            remaining.starts_with(&format!("\"calls\";r={};t=", 15 - call)),
            "{remaining}"
        );
        assert_eq!(
            response.metadata().get("ratelimit-policy").unwrap(),
            "\"calls\";q=15;w=86400"
        );
    }
    let refused = ping(&mut client, "ada").await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message().contains("rate limit `calls` reached"),
        "{}",
        refused.message()
    );
    let details = refused.get_error_details();
    let wait = details
        .retry_info()
        .and_then(|info| info.retry_delay)
        .unwrap();
    assert!(
        wait > Duration::ZERO && wait <= Duration::from_secs(86_400),
        "{wait:?}"
    );
    assert_eq!(wait.subsec_nanos(), 0, "whole seconds, as Retry-After");
    let violations = &details.quota_failure().unwrap().violations;
    assert_eq!(violations.len(), 1);
    assert_eq!(violations[0].subject, "calls");
    assert!(
        violations[0].description.contains("15 per 1d"),
        "{}",
        violations[0].description
    );
    // The refusal carries the fields a 429 carries, and never the key.
    assert!(
        refused
            .metadata()
            .get("ratelimit")
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("\"calls\";r=0;t=")
    );
    let shown = format!("{refused:?}");
    for stored in ["limit:", "127.0.0.1", ":ada", "memory"] {
        assert!(!shown.contains(stored), "{stored} in {shown}");
    }
    // Another principal from the same peer has its own count.
    ping(&mut client, "grace").await.unwrap();
}

#[tokio::test]
async fn a_store_failure_under_fail_closed_is_unavailable_with_retry_info() {
    let store = Arc::new(Faulty::new(MemoryStore::default()));
    store.set(Fault::Permanent);
    let (addr, _items) = serve(guard(Limiter::new(store)).fail_closed()).await;
    let refused = ping(&mut client(addr).await, "ada").await.unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    let wait = refused
        .get_details_retry_info()
        .and_then(|info| info.retry_delay);
    assert_eq!(
        wait,
        Some(Duration::from_secs(tollgate_tower::UNAVAILABLE_RETRY_AFTER))
    );
}

#[tokio::test]
async fn a_call_without_its_key_metadata_is_invalid_argument() {
    let (addr, _items) = serve(guard(Limiter::new(MemoryStore::default()))).await;
    let mut client = client(addr).await;
    client.ready().await.unwrap();
    let refused = client
        .unary(
            Request::new(()),
            PathAndQuery::from_static("/test.Ping/Ping"),
            Codec::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::InvalidArgument, "{refused:?}");
}

async fn watch(client: &mut tonic::client::Grpc<Channel>) -> Result<Streaming<()>, Status> {
    client.ready().await.unwrap();
    let mut request = Request::new(());
    request
        .metadata_mut()
        .insert("x-principal", "ada".parse().unwrap());
    client
        .server_streaming(
            request,
            PathAndQuery::from_static("/test.Ping/Watch"),
            Codec::default(),
        )
        .await
        .map(Response::into_inner)
}

#[tokio::test]
async fn a_lease_is_held_until_the_response_stream_ends() {
    let one = Rule::concurrency("one", 1, Window::from_secs(60).unwrap())
        .and_then(|r| r.with_key(&["principal"]))
        .unwrap();
    let guard = Guard::new(Limiter::new(MemoryStore::default()))
        .keyed(&one, &[KeyPart::Header("x-principal")])
        .unwrap();
    let (addr, items) = serve(guard).await;
    let mut client = client(addr).await;
    let mut stream = watch(&mut client).await.unwrap();
    items.send(()).await.unwrap();
    assert_eq!(stream.message().await.unwrap(), Some(()));
    // Streaming: the lease is held.
    let refused = watch(&mut client).await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(
        refused.get_details_quota_failure().unwrap().violations[0].subject,
        "one"
    );
    // The stream ends: the lease is released (by a task, soon after).
    drop(items);
    assert_eq!(stream.message().await.unwrap(), None);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        match watch(&mut client).await {
            Ok(_) => break,
            Err(status) if tokio::time::Instant::now() < deadline => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Err(status) => panic!("the lease was never released: {status:?}"),
        }
    }
}
