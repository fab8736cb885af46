//! Which URLs install rustls's process-level crypto provider: only TLS
//! ones, so that an application without TLS to Redis keeps the choice of
//! its own provider (`install_default` fails once one is installed). A test
//! binary of its own: the provider is global to the process. Needs the
//! `tls` feature.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use rustls::crypto::CryptoProvider;
use tollgate_redis::{RedisClusterStore, RedisStore};

#[test]
fn only_a_tls_url_installs_a_crypto_provider() {
    // Opening is lazy: nothing needs to listen on these ports.
    RedisStore::open("redis://127.0.0.1:1").unwrap();
    RedisClusterStore::open("redis-cluster://127.0.0.1:1,127.0.0.1:2").unwrap();
    assert!(
        CryptoProvider::get_default().is_none(),
        "a plain URL installed a provider"
    );
    RedisClusterStore::open("rediss-cluster://127.0.0.1:1,127.0.0.1:2").unwrap();
    assert!(
        CryptoProvider::get_default().is_some(),
        "a rediss-cluster URL installed none"
    );
}
