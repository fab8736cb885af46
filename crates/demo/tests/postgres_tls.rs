//! The demo binary on Postgres over TLS (`--store postgres://…?sslmode=require`)
//! against a private Postgres that serves TLS only: the ask flow passes over
//! real HTTP on loopback, every connection the demo opened is encrypted, and
//! a demo told `sslmode=disable` is refused by the server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/demo_binary.rs"]
mod demo_binary;
#[path = "support/stats.rs"]
mod stats;

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tollgate_test_support::postgres_server::{PostgresServer, PostgresServerOptions};

use demo_binary::Running;
use stats::stats;

/// Loopback stands in for Cloudflare's edge: `cf-connecting-ip` is believed.
const LOOPBACK_EDGE: [&str; 4] = [
    "--trust",
    "cf-connecting-ip",
    "--trusted-proxy",
    "127.0.0.0/8",
];

async fn ask(client: &Client, demo: &Running, project: &str) -> reqwest::Response {
    client
        .post(demo.url(&format!("/sites/{project}/ask")))
        .header("cf-connecting-ip", "203.0.113.9")
        .header("content-type", "application/json")
        .body(json!({"question": "how?"}).to_string())
        .send()
        .await
        .unwrap()
}

/// The demo's connections to `server` (application `tollgate`): how many,
/// and whether every one is encrypted, as `count|true` or `count|false`.
fn demo_connections(server: &PostgresServer) -> String {
    server.psql(
        "SELECT count(*) || '|' || coalesce(bool_and(s.ssl), false) FROM pg_stat_activity a \
         JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = 'tollgate'",
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ask_flow_passes_on_postgres_with_sslmode_require() {
    let server = PostgresServer::start_with(PostgresServerOptions::default().tls(true));
    let store = format!("{}?sslmode=require", server.url());
    let mut args = vec!["--store", store.as_str()];
    args.extend(LOOPBACK_EDGE);
    let demo = Running::start(&args).await;
    let client = Client::new();
    for i in 0..15 {
        let response = ask(&client, &demo, "docs").await;
        assert_eq!(response.status(), StatusCode::OK, "ask {}", i + 1);
    }
    let refused = ask(&client, &demo, "docs").await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["limit"], "ask");
    let stats = stats(&client, &demo.base).await;
    assert_eq!(stats["ask"], 15);
    let connections = demo_connections(&server);
    let (count, all_tls) = connections.split_once('|').unwrap();
    assert!(
        count.parse::<u32>().unwrap() >= 1 && all_tls == "true",
        "{connections}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_demo_told_sslmode_disable_is_refused_by_the_server() {
    let server = PostgresServer::start_with(PostgresServerOptions::default().tls(true));
    let store = format!("{}?sslmode=disable", server.url());
    let mut args = vec!["--store", store.as_str()];
    args.extend(LOOPBACK_EDGE);
    let demo = Running::start(&args).await;
    let response = ask(&Client::new(), &demo, "docs").await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let log = server.log_tail();
    assert!(
        log.contains("no pg_hba.conf entry") && log.contains("no encryption"),
        "{log}"
    );
    assert_eq!(demo_connections(&server), "0|false");
}
