//! The demo's gRPC `tollgate.demo.v1.Ask` service, called by a tonic client
//! generated from the repository's `.proto`, over loopback: the binary
//! started with `--grpc-listen` answers 15 asks and then refuses with
//! `RESOURCE_EXHAUSTED` whose `RetryInfo` is the wait the HTTP route's
//! `Retry-After` gives that visitor; gRPC and HTTP asks count against the
//! same limits; an invalid project is `INVALID_ARGUMENT` and counts
//! nothing; a failing store is `UNAVAILABLE` with `RetryInfo`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/demo_binary.rs"]
mod demo_binary;
#[path = "support/stats.rs"]
mod stats;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use tokio::net::TcpListener;
use tollgate::axum::{Network, Trust, VisitorSource};
use tollgate::memory::MemoryStore;
use tollgate::{Fault, Faulty, Limiter, RuleSet};
use tollgate_demo::grpc::proto::AskRequest;
use tollgate_demo::grpc::proto::ask_client::AskClient;
use tollgate_demo::{Settings, serve, services_with};
use tonic::Code;
use tonic::transport::Channel;
use tonic_types::StatusExt;

use demo_binary::Running;

async fn ask(
    client: &mut AskClient<Channel>,
    project: &str,
) -> Result<tonic::Response<tollgate_demo::grpc::proto::AskReply>, tonic::Status> {
    client
        .ask(AskRequest {
            project: project.into(),
            question: "How do I install it?".into(),
        })
        .await
}

/// The `ratelimit` metadata of an answer.
fn ratelimit<T>(answer: &tonic::Response<T>) -> &str {
    answer
        .metadata()
        .get("ratelimit")
        .unwrap()
        .to_str()
        .unwrap()
}

/// The wait of a `RESOURCE_EXHAUSTED` or `UNAVAILABLE` status, in seconds.
fn retry_delay(status: &tonic::Status) -> u64 {
    let delay = status
        .get_details_retry_info()
        .and_then(|info| info.retry_delay)
        .unwrap_or_else(|| panic!("no RetryInfo in {status:?}"));
    assert_eq!(delay.subsec_nanos(), 0, "{delay:?}");
    delay.as_secs()
}

#[tokio::test]
async fn the_binary_answers_fifteen_grpc_asks_then_waits_as_the_http_route_does() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("grpc.sqlite3").display());
    let demo = Running::start(&["--store", &store, "--grpc-listen", "127.0.0.1:0"]).await;
    let mut client = AskClient::connect(demo.grpc()).await.unwrap();
    for n in 1..=15 {
        let answer = ask(&mut client, "docs")
            .await
            .unwrap_or_else(|s| panic!("ask {n}: {s:?}"));
        assert!(answer.get_ref().tokens > 0);
        let fields = ratelimit(&answer);
        assert!(
            fields.contains(&format!("\"ask\";r={};", 15 - n)),
            "{fields}"
        );
    }
    let refused = ask(&mut client, "docs").await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let violations = refused.get_details_quota_failure().unwrap().violations;
    assert_eq!(violations[0].subject, "ask");
    let grpc_wait = retry_delay(&refused);
    // The HTTP route, for the same visitor (the loopback peer), right after.
    let http_wait = demo.retry_after("/sites/docs/ask").await;
    assert!(
        grpc_wait.abs_diff(http_wait) <= 1,
        "gRPC waits {grpc_wait} s, HTTP {http_wait} s"
    );
    // Another site is another `ask` count.
    ask(&mut client, "blog").await.unwrap();
}

/// The demo's HTTP routes and gRPC service on loopback ports, over `limiter`.
async fn start(limiter: Limiter) -> (String, String) {
    start_with(
        limiter,
        Settings::default(),
        VisitorSource::new(Trust::Peer),
    )
    .await
}

async fn start_with(
    limiter: Limiter,
    settings: Settings,
    visitors: VisitorSource,
) -> (String, String) {
    let marks = MemoryStore::default();
    let rules = RuleSet::defaults();
    let services = services_with(limiter, marks, &rules, visitors, settings).unwrap();
    let http = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http_addr: SocketAddr = http.local_addr().unwrap();
    tokio::spawn(serve(http, services.http, std::future::pending()));
    let grpc = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let grpc_addr: SocketAddr = grpc.local_addr().unwrap();
    tokio::spawn(tollgate_demo::grpc::serve(
        grpc,
        services.grpc,
        std::future::pending(),
    ));
    (format!("http://{http_addr}"), format!("http://{grpc_addr}"))
}

#[tokio::test]
async fn grpc_and_http_asks_count_against_the_same_limits() {
    let (http, grpc) = start(Limiter::new(MemoryStore::default())).await;
    let web = reqwest::Client::new();
    let post_ask = || web.post(format!("{http}/sites/docs/ask")).send();
    for _ in 0..7 {
        assert_eq!(post_ask().await.unwrap().status(), StatusCode::OK);
    }
    let mut client = AskClient::connect(grpc).await.unwrap();
    for n in 8..=15 {
        ask(&mut client, "docs")
            .await
            .unwrap_or_else(|s| panic!("ask {n}: {s:?}"));
    }
    let refused = ask(&mut client, "docs").await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(
        post_ask().await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    let stats = stats::stats(&web, &http).await;
    assert_eq!(stats["ask"], 15, "{stats}");
}

#[tokio::test]
async fn an_invalid_project_is_invalid_argument_and_counts_nothing() {
    let store = MemoryStore::default();
    let (http, grpc) = start(Limiter::new(store.clone())).await;
    let mut client = AskClient::connect(grpc).await.unwrap();
    for project in ["", "Docs", "../docs", &"a".repeat(65)] {
        let refused = ask(&mut client, project).await.unwrap_err();
        assert_eq!(
            refused.code(),
            Code::InvalidArgument,
            "{project:?}: {refused:?}"
        );
    }
    let stats = stats::stats(&reqwest::Client::new(), &http).await;
    assert_eq!(stats["ask"], 0, "{stats}");
    // The first valid ask is the visitor's first: nothing was counted.
    let answer = ask(&mut client, "docs").await.unwrap();
    let fields = ratelimit(&answer);
    assert!(fields.contains("\"ask\";r=14;"), "{fields}");
}

#[tokio::test]
async fn a_failing_store_is_unavailable_with_retry_info() {
    let store = Arc::new(Faulty::new(MemoryStore::default()));
    store.set(Fault::Transient);
    let (_, grpc) = start(Limiter::new(store)).await;
    let mut client = AskClient::connect(grpc).await.unwrap();
    let refused = tokio::time::timeout(Duration::from_secs(10), ask(&mut client, "docs"))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert_eq!(
        retry_delay(&refused),
        tollgate::axum::UNAVAILABLE_RETRY_AFTER
    );
    assert!(!refused.message().contains("memory"), "{refused:?}");
}

/// With a provider that takes a second, ten asks at once from one visitor
/// get two answers (`ask-inflight`: 2 per visitor) and eight
/// `RESOURCE_EXHAUSTED` naming `ask-inflight`, which spend nothing of
/// `ask`; once the answers have been sent, the leases are back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asks_in_flight_over_grpc_hold_their_leases() {
    let settings = Settings {
        provider_delay: Duration::from_secs(1),
        ..Settings::default()
    };
    let visitors = VisitorSource::new(Trust::Peer);
    let (_, grpc) = start_with(Limiter::new(MemoryStore::default()), settings, visitors).await;
    let client = AskClient::connect(grpc).await.unwrap();
    let asks: Vec<_> = (0..10)
        .map(|_| {
            let mut client = client.clone();
            tokio::spawn(async move { ask(&mut client, "docs").await })
        })
        .collect();
    let mut answered = 0;
    for outcome in asks {
        match outcome.await.unwrap() {
            Ok(_) => answered += 1,
            Err(refused) => {
                assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
                let violations = refused.get_details_quota_failure().unwrap().violations;
                assert_eq!(violations[0].subject, "ask-inflight", "{refused:?}");
            }
        }
    }
    assert_eq!(answered, 2);
    // The two answers spent `ask`; the eight refusals did not. The leases
    // are released by a task once each answer has been sent.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut client = client.clone();
    let answer = loop {
        match ask(&mut client, "docs").await {
            Ok(answer) => break answer,
            Err(refused) if tokio::time::Instant::now() < deadline => {
                assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(refused) => panic!("the leases were never released: {refused:?}"),
        }
    };
    let fields = ratelimit(&answer);
    assert!(fields.contains("\"ask\";r=12;"), "{fields}");
}

/// Behind a trusted edge (`--trust cf-connecting-ip` with loopback as the
/// edge), a gRPC call's visitor is its `cf-connecting-ip` metadata, as an
/// HTTP call's is its header: two visitors have a budget each, and the HTTP
/// route refuses the visitor the gRPC asks used up.
#[tokio::test]
async fn behind_a_trusted_edge_the_visitor_is_the_calls_metadata() {
    let edge: Network = "127.0.0.0/8".parse().unwrap();
    let visitors = VisitorSource::new(Trust::CfConnectingIp(vec![edge]));
    let limiter = Limiter::new(MemoryStore::default());
    let (http, grpc) = start_with(limiter, Settings::default(), visitors).await;
    let mut client = AskClient::connect(grpc).await.unwrap();
    let ask_as = |client: &mut AskClient<Channel>, ip: &str| {
        let mut request = tonic::Request::new(AskRequest {
            project: "docs".into(),
            question: String::new(),
        });
        request
            .metadata_mut()
            .insert("cf-connecting-ip", ip.parse().unwrap());
        let mut client = client.clone();
        async move { client.ask(request).await }
    };
    for n in 1..=15 {
        let answer = ask_as(&mut client, "203.0.113.7").await;
        answer.unwrap_or_else(|s| panic!("ask {n}: {s:?}"));
    }
    let refused = ask_as(&mut client, "203.0.113.7").await.unwrap_err();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let other = ask_as(&mut client, "203.0.113.8").await.unwrap();
    assert!(ratelimit(&other).contains("\"ask\";r=14;"));
    let web = reqwest::Client::new();
    let post_as = |ip: &'static str| {
        web.post(format!("{http}/sites/docs/ask"))
            .header("cf-connecting-ip", ip)
            .send()
    };
    assert_eq!(
        post_as("203.0.113.7").await.unwrap().status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(
        post_as("203.0.113.9").await.unwrap().status(),
        StatusCode::OK
    );
}
