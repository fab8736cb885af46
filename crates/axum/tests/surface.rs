//! The crate's smaller public surface: what the accessors, `Display` and
//! `Debug` say, the network grammar's edges, the service's back-pressure,
//! and the one warning a missing peer address deserves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::convert::Infallible;
use std::net::IpAddr;
use std::task::{Context, Poll};

use http::{Request, StatusCode};
use support::parts;
use tollgate_axum::{AddressSource, Error, Guard, Network, Problem, Trust, VisitorSource};
use tollgate_core::{Limiter, Mode, Policy, Rule, Window};
use tollgate_memory::MemoryStore;
use tower::{Layer, Service, ServiceExt};

fn net(text: &str) -> Network {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// A source reports the trust and mode it was built with.
#[test]
fn a_visitor_source_reports_its_trust_and_mode() {
    let source = VisitorSource::new(Trust::cloudflare());
    assert_eq!(source.trust(), &Trust::cloudflare());
    assert!(!source.is_development());
    let source = source.development(true);
    assert!(source.is_development());
    assert_eq!(source.trust(), &Trust::cloudflare());
}

/// A network's prefix is the one written, a bare address's is the whole
/// address, and an IPv4-mapped network's is counted in IPv4 bits.
#[test]
fn a_network_reports_its_prefix_in_its_own_family() {
    assert_eq!(net("10.0.0.0/8").prefix(), 8);
    assert_eq!(net("10.0.0.7").prefix(), 32);
    assert_eq!(net("2001:db8::/32").prefix(), 32);
    assert_eq!(net("2001:db8::1").prefix(), 128);
    assert_eq!(net("::ffff:10.0.0.0/104").prefix(), 8);
}

/// Only an IPv4-mapped network of prefix 96 or more is an IPv4 network; a
/// shorter one is the IPv6 network written.
#[test]
fn a_mapped_network_shorter_than_96_bits_stays_ipv6() {
    let wide = net("::ffff:10.0.0.0/80");
    assert_eq!(wide.prefix(), 80);
    assert!(wide.addr().is_ipv6());
    assert!(wide.contains("::1".parse::<IpAddr>().unwrap()));
    assert!(!wide.contains("2001:db8::1".parse::<IpAddr>().unwrap()));
}

/// A prefix is digits only: a sign is refused, though Rust's integer
/// parser would take a `+`.
#[test]
fn a_prefix_with_a_sign_is_refused() {
    for bad in ["10.0.0.0/+8", "2001:db8::/+32", "10.0.0.0/+"] {
        assert!(
            matches!(bad.parse::<Network>(), Err(Error::InvalidNetwork { .. })),
            "{bad:?} was accepted"
        );
    }
}

/// The sources named in logs.
#[test]
fn address_sources_name_themselves_for_logs() {
    assert_eq!(
        AddressSource::Peer.to_string(),
        "the connection's peer address"
    );
    assert_eq!(
        AddressSource::CfConnectingIp.to_string(),
        "the cf-connecting-ip header"
    );
    assert_eq!(
        AddressSource::XForwardedFor.to_string(),
        "the X-Forwarded-For header"
    );
}

/// A problem reports the status it was built with.
#[test]
fn a_problem_reports_its_status() {
    let problem = Problem::new(StatusCode::TOO_MANY_REQUESTS, "tag:x,2025:y", "Too Many");
    assert_eq!(problem.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(problem.body()["status"], 429);
}

/// A guard's `Debug` names its rules, mode and policy (never a key).
#[test]
fn a_guard_debugs_as_its_rules_mode_and_policy() {
    let limiter = Limiter::new(MemoryStore::new());
    let rule = Rule::new("ask-all", 100, Window::DAY).unwrap();
    let guard = Guard::new(limiter)
        .rule(&rule, |_| Some(vec![]))
        .mode(Mode::Reserve)
        .policy(Policy::FailOpen);
    let text = format!("{guard:?}");
    for part in ["Guard", "ask-all", "Reserve", "FailOpen"] {
        assert!(text.contains(part), "{part} missing from {text}");
    }
}

/// A service that is never ready: it has failed.
#[derive(Clone)]
struct Broken;

impl Service<Request<axum::body::Body>> for Broken {
    type Response = http::Response<String>;
    type Error = &'static str;
    type Future = std::future::Ready<Result<http::Response<String>, &'static str>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), &'static str>> {
        Poll::Ready(Err("the inner service failed"))
    }

    fn call(&mut self, _: Request<axum::body::Body>) -> Self::Future {
        std::future::ready(Ok(http::Response::new("called".into())))
    }
}

/// The guarded service is ready when the service it guards is: its
/// failure (or back-pressure) reaches the caller.
#[tokio::test]
async fn the_guarded_service_is_only_as_ready_as_the_inner_one() {
    let guard = Guard::new(Limiter::new(MemoryStore::new()));
    let mut guarded = guard.layer(Broken);
    let ready = ServiceExt::<Request<axum::body::Body>>::ready(&mut guarded).await;
    assert_eq!(ready.err(), Some("the inner service failed"));

    let mut fine = guard.layer(tower::service_fn(|_: Request<axum::body::Body>| async {
        Ok::<_, Infallible>(http::Response::new(String::from("ok")))
    }));
    assert!(
        ServiceExt::<Request<axum::body::Body>>::ready(&mut fine)
            .await
            .is_ok()
    );
}

/// A missing peer address (the router served without connect info) is
/// warned about, with the fix; a missing header behind a trusted edge is
/// the caller's, not logged.
#[tokio::test]
async fn only_a_missing_peer_address_is_warned_about() {
    let logs = tollgate_test_support::Logs::default();
    let no_peer = VisitorSource::new(Trust::Peer);
    let found = logs
        .capture(async { no_peer.visitor(&parts(None, &[])) })
        .await;
    assert_eq!(
        found.err(),
        Some(Error::MissingAddress(AddressSource::Peer))
    );
    let text = logs.text();
    assert!(
        text.contains("WARN") && text.contains("into_make_service_with_connect_info"),
        "{text}"
    );

    let logs = tollgate_test_support::Logs::default();
    let edge = VisitorSource::new(Trust::cloudflare());
    let found = logs
        .capture(async { edge.visitor(&parts(Some("173.245.48.1:443"), &[])) })
        .await;
    assert_eq!(
        found.err(),
        Some(Error::MissingAddress(AddressSource::CfConnectingIp))
    );
    assert_eq!(logs.text(), "", "nothing to warn about");
}
