//! The demo on Postgres (`--store postgres://…`), on Redis Cluster
//! (`--store redis-cluster://…`) and on Upstash REST (`--store upstash…`,
//! through the local REST proxy over a private redis-server), over real
//! HTTP on loopback: every route serves as on one Redis.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/stats.rs"]
mod stats;

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tollgate::axum::{Trust, VisitorSource};
use tollgate::{Limiter, ManualClock, RuleSet};
use tollgate_demo::{DELIVERY_HEADER, app, serve};
use tollgate_test_support::postgres_server::PostgresServer;
use tollgate_test_support::redis_cluster::RedisCluster;
use tollgate_test_support::unique;

use stats::stats;

#[tokio::test]
async fn every_route_serves_on_postgres() {
    let server = PostgresServer::start();
    every_route_serves(tollgate::open_store(&server.url()).unwrap()).await;
}

#[tokio::test]
async fn every_route_serves_on_upstash_rest_through_the_proxy() {
    let redis = tollgate_test_support::redis_server::RedisServer::start();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = listener.local_addr().unwrap();
    let options =
        tollgate_rest_proxy::Options::new(redis.url(), "demo-token").create_user("tollgate-proxy");
    tokio::spawn(tollgate_rest_proxy::serve(listener, options));
    let url = format!("upstash+http://{proxy}");
    let store = tollgate::upstash::UpstashStore::open(&url, "demo-token").unwrap();
    every_route_serves(std::sync::Arc::new(store)).await;
}

#[tokio::test]
async fn every_route_serves_on_redis_cluster() {
    let cluster = RedisCluster::start();
    let url = cluster.url();
    assert!(url.starts_with("redis-cluster://"), "{url}");
    every_route_serves(tollgate::open_store(&url).unwrap()).await;
}

async fn every_route_serves(store: std::sync::Arc<dyn tollgate::Store>) {
    let clock = ManualClock::new(Duration::from_secs(20_619 * 86_400 + 43_200));
    let loopback = vec!["127.0.0.0/8".parse().unwrap()];
    let router = app(
        Limiter::builder(store.clone()).clock(clock).build(),
        store,
        &RuleSet::defaults(),
        VisitorSource::new(Trust::CfConnectingIp(loopback)),
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, router, std::future::pending()));
    let client = Client::new();
    let base = format!("http://{addr}");
    let url = |path: &str| format!("{base}{path}");
    let project = format!("docs-{}", unique());
    let ask = || {
        client
            .post(url(&format!("/sites/{project}/ask")))
            .header("cf-connecting-ip", "203.0.113.9")
            .body(json!({"question": "how?"}).to_string())
            .send()
    };
    // One ask elsewhere first, so that connecting (to every node of a
    // cluster) is not inside a counted call: a first attempt that answers
    // after its deadline is retried, and may count twice (the documented,
    // safe over-count).
    let warm = client
        .post(url(&format!("/sites/{project}-warm/ask")))
        .header("cf-connecting-ip", "198.51.100.7")
        .send()
        .await
        .unwrap();
    assert_eq!(warm.status(), StatusCode::OK);
    for i in 0..15 {
        assert_eq!(ask().await.unwrap().status(), StatusCode::OK, "ask {i}");
    }
    let refused = ask().await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["limit"], "ask");
    let org = format!("acme-{}", unique());
    for i in 0..10 {
        let run = client
            .post(url(&format!("/orgs/{org}/runs")))
            .send()
            .await
            .unwrap();
        assert_eq!(run.status(), StatusCode::ACCEPTED, "run {i}");
    }
    let run = client
        .post(url(&format!("/orgs/{org}/runs")))
        .send()
        .await
        .unwrap();
    assert_eq!(run.status(), StatusCode::TOO_MANY_REQUESTS);
    let delivery = unique();
    let webhook = || {
        client
            .post(url("/webhooks/github"))
            .header(DELIVERY_HEADER, delivery.as_str())
            .send()
    };
    let first: Value = webhook().await.unwrap().json().await.unwrap();
    assert_eq!(first, json!({"processed": true}));
    let again: Value = webhook().await.unwrap().json().await.unwrap();
    assert_eq!(again, json!({"duplicate": true}));
    let stats = stats(&client, &base).await;
    assert_eq!(stats["ask"], 16, "15 and the warm-up");
    assert_eq!(stats["webhooks"], 1);
    assert_eq!(stats["runs"], 10);
}
