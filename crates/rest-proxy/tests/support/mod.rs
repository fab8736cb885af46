//! The proxy served in-process in front of its own private redis-server,
//! and what its tests share.

#![allow(dead_code)]

use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;
use tollgate_rest_proxy::{Options, serve};
use tollgate_test_support::redis_server::RedisServer;
use tollgate_test_support::relay::Relay;
use tollgate_test_support::unique;

/// A proxy served in-process in front of its own redis-server.
pub(crate) struct Proxy {
    pub(crate) base: String,
    pub(crate) token: String,
    pub(crate) server: RedisServer,
    pub(crate) http: reqwest::Client,
}

impl Proxy {
    pub(crate) async fn start() -> Proxy {
        Proxy::start_with(|options| options).await
    }

    pub(crate) async fn start_with(configure: impl FnOnce(Options) -> Options) -> Proxy {
        let server = RedisServer::start();
        let url = server.url();
        Proxy::serve(server, url, configure).await
    }

    /// A proxy that reaches its redis-server through a [`Relay`], for
    /// faults on the wire.
    pub(crate) async fn through_relay() -> (Proxy, Relay) {
        Proxy::through_relay_with(|options| options).await
    }

    /// As [`through_relay`](Proxy::through_relay), with `configure`d options.
    pub(crate) async fn through_relay_with(
        configure: impl FnOnce(Options) -> Options,
    ) -> (Proxy, Relay) {
        let server = RedisServer::start();
        server.require_private("put a relay in front of it");
        let relay = Relay::start(server.port()).await;
        (Proxy::serve(server, relay.url(), configure).await, relay)
    }

    /// Serves a proxy of `server`, reached at `url`.
    async fn serve(
        server: RedisServer,
        url: String,
        configure: impl FnOnce(Options) -> Options,
    ) -> Proxy {
        let token = format!("tok-{}", unique());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let addr = listener.local_addr().expect("local address");
        let options = configure(Options::new(url, token.clone()).create_user("tollgate-proxy"));
        tokio::spawn(async move {
            if let Err(e) = serve(listener, options).await {
                panic!("the proxy stopped: {e}");
            }
        });
        Proxy {
            base: format!("http://{addr}"),
            token,
            server,
            // A hang fails the test instead of stalling it.
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .expect("an HTTP client"),
        }
    }

    /// Runs `args` on the private server as its administrator (not
    /// through the proxy).
    pub(crate) async fn admin(&self, args: &[&str]) -> redis::Value {
        let client = redis::Client::open(self.server.url()).expect("the server's URL");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("an admin connection");
        let mut cmd = redis::Cmd::new();
        for arg in args {
            cmd.arg(*arg);
        }
        cmd.query_async(&mut conn).await.expect("the admin command")
    }

    /// `INFO <section>` of the private server, as text.
    pub(crate) async fn info(&self, section: &str) -> String {
        // Statistics count every client's calls: the tests' own only on a
        // server of their own.
        self.server.require_private("read its statistics");
        self.admin_text(&["INFO", section]).await
    }

    /// As [`admin`](Proxy::admin), for a command answering text (`INFO`,
    /// `CLIENT LIST`).
    pub(crate) async fn admin_text(&self, args: &[&str]) -> String {
        match self.admin(args).await {
            redis::Value::BulkString(text) => String::from_utf8_lossy(&text).into_owned(),
            redis::Value::VerbatimString { text, .. } => text,
            other => panic!("{args:?} answered {other:?}"),
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// POSTs `body` as JSON to `path` with the right token.
    pub(crate) async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let request = self
            .http
            .post(self.url(path))
            .bearer_auth(&self.token)
            .json(&body);
        send(request).await
    }

    /// As [`post`](Proxy::post), asking for base64 strings.
    pub(crate) async fn post_base64(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let request = self
            .http
            .post(self.url(path))
            .bearer_auth(&self.token)
            .header("Upstash-Encoding", "base64")
            .json(&body);
        send(request).await
    }

    pub(crate) async fn get(&self, path: &str) -> (StatusCode, Value) {
        send(self.http.get(self.url(path)).bearer_auth(&self.token)).await
    }

    /// The result of one command that must succeed.
    pub(crate) async fn ok(&self, command: Value) -> Value {
        let (status, body) = self.post("/", command.clone()).await;
        assert_eq!(status, StatusCode::OK, "{command} answered {body}");
        body["result"].clone()
    }
}

pub(crate) async fn send(request: reqwest::RequestBuilder) -> (StatusCode, Value) {
    let response = request.send().await.expect("the proxy answers");
    let status = response.status();
    let text = response.text().await.expect("a body");
    let body = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the body is not JSON ({e}): {text:?}"));
    (status, body)
}

pub(crate) fn error_of(body: &Value) -> &str {
    body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error text in {body}"))
}
