//! `rediss://`: the store over TLS, against a private `redis-server`
//! serving TLS with a self-signed certificate (so the URL says
//! `#insecure`: the handshake and the encrypted calls are what is tested,
//! not the system's trust store). Needs the `tls` feature.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::net::TcpListener;
use tollgate_core::CheckId;

use support::{counter, deadline};
use tollgate_core::CounterStore as _;
use tollgate_redis::RedisStore;
use tollgate_test_support::redis_server::{RedisServer, RedisServerOptions};

/// A private server with a TLS port besides its plain one; its TLS port.
fn tls_server(dir: &tempfile::TempDir) -> (RedisServer, u16) {
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let (cert_file, key_file) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_file, cert.cert.pem()).unwrap();
    std::fs::write(&key_file, cert.key_pair.serialize_pem()).unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .unwrap()
        .port();
    let options = RedisServerOptions::default().args([
        "--tls-port".to_owned(),
        port.to_string(),
        "--tls-cert-file".to_owned(),
        cert_file.display().to_string(),
        "--tls-key-file".to_owned(),
        key_file.display().to_string(),
        "--tls-auth-clients".to_owned(),
        "no".to_owned(),
    ]);
    (RedisServer::start_with(options), port)
}

#[tokio::test]
async fn a_rediss_url_counts_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = tls_server(&dir);
    let store = RedisStore::open(&format!("rediss://127.0.0.1:{port}/#insecure")).unwrap();
    let c = [counter("tls", 2, 10)];
    assert_eq!(
        store.count(&c, CheckId::new(), deadline()).await.unwrap(),
        vec![2]
    );
    assert_eq!(
        store.count(&c, CheckId::new(), deadline()).await.unwrap(),
        vec![4]
    );
}

#[tokio::test]
async fn tls_to_a_plain_port_is_a_connection_failure_never_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (server, _) = tls_server(&dir);
    let url = format!("rediss://127.0.0.1:{}/#insecure", server.port());
    let store = RedisStore::open(&url).unwrap();
    let err = store
        .count(&[counter("plain", 1, 10)], CheckId::new(), deadline())
        .await
        .unwrap_err();
    assert!(matches!(err.kind(), "connection" | "timeout"), "{err:?}");
}
