//! Visitor identity under each trust setting.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::SocketAddr;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::ConnectInfo;
use axum::routing::get;
use http::request::Parts;
use http::{Request, StatusCode};
use serde_json::Value;
use support::parts;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tollgate_axum::{AddressSource, ClientVisitor, Error, Network, Trust, VisitorSource};
use tower::ServiceExt;

fn visitor(source: &VisitorSource, parts: &Parts) -> Result<String, Error> {
    source.visitor(parts).map(|v| v.to_string())
}

fn proxies(list: &[&str]) -> Trust {
    Trust::XForwardedFor(list.iter().map(|n| n.parse::<Network>().unwrap()).collect())
}

#[test]
fn peer_trust_ignores_spoofed_headers() {
    let source = VisitorSource::new(Trust::Peer);
    let spoofed = parts(
        Some("203.0.113.9:50000"),
        &[
            ("cf-connecting-ip", "198.51.100.1"),
            ("x-forwarded-for", "198.51.100.2"),
        ],
    );
    assert_eq!(visitor(&source, &spoofed).unwrap(), "203.0.113.9");
    let v6 = parts(Some("[2001:db8:0:1::9]:443"), &[]);
    assert_eq!(visitor(&source, &v6).unwrap(), "2001:db8:0:1::/64");
    let mapped = parts(Some("[::ffff:203.0.113.9]:443"), &[]);
    assert_eq!(visitor(&source, &mapped).unwrap(), "203.0.113.9");
}

#[test]
fn missing_peer_is_an_error_in_production_and_local_in_development() {
    let no_peer = parts(None, &[("cf-connecting-ip", "198.51.100.1")]);
    let production = VisitorSource::new(Trust::Peer);
    assert_eq!(
        visitor(&production, &no_peer),
        Err(Error::MissingAddress(AddressSource::Peer))
    );
    let development = VisitorSource::new(Trust::Peer).development(true);
    assert_eq!(visitor(&development, &no_peer).unwrap(), "local");
}

#[test]
fn cf_connecting_ip_is_the_visitor_behind_cloudflare() {
    let source = VisitorSource::new(Trust::cloudflare());
    let behind = parts(
        Some("172.64.0.1:443"),
        &[("cf-connecting-ip", " 2001:0DB8:0:1:ffff::2 ")],
    );
    assert_eq!(visitor(&source, &behind).unwrap(), "2001:db8:0:1::/64");
    let missing = parts(Some("172.64.0.1:443"), &[]);
    assert_eq!(
        visitor(&source, &missing),
        Err(Error::MissingAddress(AddressSource::CfConnectingIp))
    );
    let dev = VisitorSource::new(Trust::cloudflare()).development(true);
    assert_eq!(visitor(&dev, &missing).unwrap(), "local");
    for bad in [
        "not-an-ip",
        "203.0.113.9, 198.51.100.1",
        "203.0.113.9:80",
        "local",
    ] {
        let malformed = parts(Some("172.64.0.1:443"), &[("cf-connecting-ip", bad)]);
        assert_eq!(
            visitor(&dev, &malformed),
            Err(Error::MalformedAddress(AddressSource::CfConnectingIp)),
            "{bad:?} is malformed, even in development"
        );
    }
    let twice = parts(
        Some("172.64.0.1:443"),
        &[
            ("cf-connecting-ip", "203.0.113.9"),
            ("cf-connecting-ip", "198.51.100.1"),
        ],
    );
    assert_eq!(
        visitor(&source, &twice),
        Err(Error::MalformedAddress(AddressSource::CfConnectingIp))
    );
}

#[test]
fn cf_connecting_ip_is_believed_only_from_cloudflare_peers() {
    let source = VisitorSource::new("cf-connecting-ip".parse::<Trust>().unwrap());
    let header = [("cf-connecting-ip", "198.51.100.1")];
    for peer in ["203.0.113.9:5000", "127.0.0.1:5000", "[2001:db8::1]:443"] {
        let direct = parts(Some(peer), &header);
        let own: SocketAddr = peer.parse().unwrap();
        assert_eq!(
            visitor(&source, &direct).unwrap(),
            tollgate_core::Visitor::from_ip(own.ip()).to_string(),
            "a header from {peer} is ignored"
        );
    }
    for edge in [
        "173.245.48.1:443",
        "[2400:cb00::1]:443",
        "[::ffff:173.245.48.1]:443",
        "131.0.75.255:443",
        "[2a06:98c7:ffff::1]:443",
    ] {
        let behind = parts(Some(edge), &header);
        assert_eq!(
            visitor(&source, &behind).unwrap(),
            "198.51.100.1",
            "a header from Cloudflare's {edge} is believed"
        );
    }
    // Just outside the published ranges.
    let outside = parts(Some("173.245.64.1:443"), &header);
    assert_eq!(visitor(&source, &outside).unwrap(), "173.245.64.1");
    let no_peer = parts(None, &header);
    assert_eq!(
        visitor(&source, &no_peer),
        Err(Error::MissingAddress(AddressSource::Peer))
    );
    assert_eq!(
        visitor(&source.clone().development(true), &no_peer).unwrap(),
        "local"
    );
}

#[test]
fn forwarded_for_is_read_from_the_right_past_trusted_proxies() {
    let source = VisitorSource::new(proxies(&["10.0.0.0/8", "2001:db8:ffff::/48"]));
    // client, a spoofed entry the client sent, then two trusted hops.
    let chain = parts(
        Some("10.0.0.2:8080"),
        &[("x-forwarded-for", "198.51.100.66, 203.0.113.9, 10.1.1.1")],
    );
    assert_eq!(visitor(&source, &chain).unwrap(), "203.0.113.9");
    // Several header lines form one list, in order.
    let split = parts(
        Some("10.0.0.2:8080"),
        &[
            ("x-forwarded-for", "198.51.100.66"),
            ("x-forwarded-for", "2001:db8:0:1::5, 2001:db8:ffff::1"),
        ],
    );
    assert_eq!(visitor(&source, &split).unwrap(), "2001:db8:0:1::/64");
    // Every hop trusted: the leftmost address is the client.
    let internal = parts(
        Some("10.0.0.2:8080"),
        &[("x-forwarded-for", "10.9.9.9, 10.1.1.1")],
    );
    assert_eq!(visitor(&source, &internal).unwrap(), "10.9.9.9");
}

#[test]
fn forwarded_for_from_an_untrusted_peer_is_ignored() {
    let source = VisitorSource::new(proxies(&["10.0.0.0/8"]));
    let direct = parts(
        Some("203.0.113.9:5000"),
        &[("x-forwarded-for", "198.51.100.1")],
    );
    assert_eq!(visitor(&source, &direct).unwrap(), "203.0.113.9");
    let no_proxies = VisitorSource::new(proxies(&[]));
    let via_lb = parts(
        Some("10.0.0.2:8080"),
        &[("x-forwarded-for", "198.51.100.1")],
    );
    assert_eq!(visitor(&no_proxies, &via_lb).unwrap(), "10.0.0.2");
}

#[test]
fn forwarded_for_malformed_or_missing_hops_are_errors() {
    let source = VisitorSource::new(proxies(&["10.0.0.0/8"]));
    for bad in [
        "203.0.113.9, garbage",
        "203.0.113.9,,10.1.1.1",
        "unknown",
        "203.0.113.9:443",
    ] {
        let chain = parts(Some("10.0.0.2:8080"), &[("x-forwarded-for", bad)]);
        assert_eq!(
            visitor(&source, &chain),
            Err(Error::MalformedAddress(AddressSource::XForwardedFor)),
            "{bad:?}"
        );
    }
    // A malformed hop left of the client is never read.
    let chain = parts(
        Some("10.0.0.2:8080"),
        &[("x-forwarded-for", "garbage, 203.0.113.9")],
    );
    assert_eq!(visitor(&source, &chain).unwrap(), "203.0.113.9");
    let missing = parts(Some("10.0.0.2:8080"), &[]);
    assert_eq!(
        visitor(&source, &missing),
        Err(Error::MissingAddress(AddressSource::XForwardedFor))
    );
    assert_eq!(
        visitor(&source.clone().development(true), &missing).unwrap(),
        "local"
    );
}

#[test]
fn trust_settings_parse_by_name() {
    assert_eq!("peer".parse::<Trust>().unwrap(), Trust::Peer);
    assert_eq!(
        "CF-Connecting-IP".parse::<Trust>().unwrap(),
        Trust::cloudflare()
    );
    assert_eq!(Trust::cloudflare().to_string(), "cf-connecting-ip");
    assert_eq!(
        "x-forwarded-for".parse::<Trust>().unwrap(),
        Trust::XForwardedFor(vec![])
    );
    assert!(
        matches!("forwarded".parse::<Trust>(), Err(Error::UnknownTrust(t)) if t == "forwarded")
    );
}

async fn whoami(ClientVisitor(visitor): ClientVisitor) -> String {
    visitor.to_string()
}

fn whoami_app(source: VisitorSource) -> Router {
    Router::new()
        .route("/whoami", get(whoami))
        .with_state(source)
}

async fn problem(response: axum::response::Response) -> Value {
    assert_eq!(
        response.headers().get("content-type").unwrap(),
        "application/problem+json"
    );
    let bytes = to_bytes(response.into_body(), 1 << 16).await.unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// A peer inside Cloudflare's published networks.
fn cloudflare_peer() -> ConnectInfo<SocketAddr> {
    ConnectInfo("173.245.48.1:443".parse().unwrap())
}

#[tokio::test]
async fn unusable_address_is_a_400_problem_in_production() {
    let app = whoami_app(VisitorSource::new(Trust::cloudflare()));
    let mut missing = Request::get("/whoami").body(Body::empty()).unwrap();
    missing.extensions_mut().insert(cloudflare_peer());
    let response = app.clone().oneshot(missing).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body = problem(response).await;
    assert_eq!(body["status"], 400);
    assert_eq!(body["title"], "Bad Request");
    assert_eq!(body["detail"], "missing client address");

    let mut malformed = Request::get("/whoami")
        .header("cf-connecting-ip", "999.1.1.1")
        .body(Body::empty())
        .unwrap();
    malformed.extensions_mut().insert(cloudflare_peer());
    let response = app.oneshot(malformed).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body = problem(response).await;
    assert_eq!(body["detail"], "malformed client address");
}

#[tokio::test]
async fn missing_address_is_local_in_development() {
    let app = whoami_app(VisitorSource::new(Trust::cloudflare()).development(true));
    let request = Request::get("/whoami").body(Body::empty()).unwrap();
    let response = app.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = to_bytes(response.into_body(), 1 << 16).await.unwrap();
    assert_eq!(&bytes[..], b"local");
}

#[tokio::test]
async fn peer_address_comes_from_a_real_connection() {
    let app = whoami_app(VisitorSource::new(Trust::Peer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
    });
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /whoami HTTP/1.1\r\nhost: x\r\ncf-connecting-ip: 198.51.100.1\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    server.abort();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.ends_with("\r\n\r\n127.0.0.1"), "{reply}");
}

#[tokio::test]
async fn an_ignored_cf_connecting_ip_is_logged_at_debug_without_its_value() {
    let source = VisitorSource::new(Trust::cloudflare());
    let forged = parts(
        Some("203.0.113.9:5000"),
        &[("cf-connecting-ip", "198.51.100.77")],
    );
    let logs = tollgate_test_support::Logs::default();
    let found = logs
        .capture_from(tracing::Level::DEBUG, async { visitor(&source, &forged) })
        .await;
    assert_eq!(found.unwrap(), "203.0.113.9");
    let text = logs.text();
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("ignored")).collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(
        lines[0].contains("DEBUG") && lines[0].contains("cf-connecting-ip"),
        "{text}"
    );
    assert!(
        !text.contains("198.51.100.77"),
        "the header value is logged: {text}"
    );
}
