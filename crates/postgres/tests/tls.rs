//! The store over TLS, by `sslmode`, against a private Postgres serving TLS
//! only over TCP (a certificate for `localhost` and `127.0.0.1` signed by a
//! CA the test made; plain TCP refused by its `pg_hba.conf`); and the
//! conformance suite over `verify-full`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::error::Error as _;
use std::sync::OnceLock;
use std::time::Duration;

use tokio_postgres::Client;
use tollgate_conformance::Expiry;
use tollgate_core::{CheckId, Counter, CounterStore, Deadline};
use tollgate_postgres::{Error, PostgresOptions, PostgresStore};
use tollgate_test_support::postgres_server::{
    Certificates, PostgresServer, PostgresServerOptions, SCRAM_ROLE,
};

/// The binary's TLS-only server (started on first use).
fn server() -> &'static PostgresServer {
    static SERVER: OnceLock<PostgresServer> = OnceLock::new();
    tokio::task::block_in_place(|| {
        SERVER.get_or_init(|| {
            PostgresServer::start_with(PostgresServerOptions::default().fsync(false).tls(true))
        })
    })
}

/// The server's URL as `user` on `host`, with `params` (`sslmode=…`).
fn url(host: &str, params: &str) -> String {
    format!(
        "postgres://postgres@{host}:{}/postgres?{params}",
        server().port()
    )
}

/// `sslmode=verify-full` (or another mode) with the server's own CA.
fn with_ca(mode: &str) -> String {
    let ca = server().ca_file().unwrap().display().to_string();
    format!("sslmode={mode}&sslrootcert={ca}")
}

fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(5))
}

fn counter(key: &str) -> Counter {
    Counter {
        key: key.to_owned(),
        ttl: Duration::from_secs(600),
        cost: 1,
        max: 10,
    }
}

async fn open(url: &str) -> Result<PostgresStore, Error> {
    let options = PostgresOptions::default()
        .schema(support::unique_schema())
        .connect_timeout(Duration::from_secs(10));
    PostgresStore::open_with(url, options).await
}

/// Opens a store on `url` and counts twice on one key.
async fn counts(url: &str) {
    let store = open(url)
        .await
        .unwrap_or_else(|e| panic!("{url}: {}", chain(&e)));
    let c = [counter(&tollgate_test_support::unique())];
    let deadline = deadline();
    assert_eq!(
        store.count(&c, CheckId::new(), deadline).await.unwrap(),
        [1]
    );
    assert_eq!(
        store.count(&c, CheckId::new(), deadline).await.unwrap(),
        [2]
    );
}

/// An error and its sources, one message after the other.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(next) = source {
        text.push_str(" / ");
        text.push_str(&next.to_string());
        source = next.source();
    }
    text
}

/// The server's answer when a connection fails: the driver's error under
/// the store's.
fn driver_error(err: &Error) -> &tokio_postgres::Error {
    let mut source = err.source();
    while let Some(next) = source {
        if let Some(found) = next.downcast_ref::<tokio_postgres::Error>() {
            return found;
        }
        source = next.source();
    }
    panic!("no driver error in {}", chain(err))
}

/// A client of the test's own, through the Unix socket (plain).
async fn own_client() -> Client {
    support::client(&server().socket_url()).await
}

/// Whether every connection of `application` to the server is encrypted,
/// and how many there are.
async fn encrypted(application: &str) -> (bool, i64) {
    let row = own_client()
        .await
        .query_one(
            "SELECT coalesce(bool_and(s.ssl), false), count(*) FROM pg_stat_activity a \
             JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = $1",
            &[&application],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread")]
async fn require_counts_over_tls() {
    let application = format!("tls-{}", support::unique_schema());
    let url = url(
        "127.0.0.1",
        &format!("sslmode=require&application_name={application}"),
    );
    let store = open(&url).await.unwrap();
    let c = [counter("require")];
    assert_eq!(
        store.count(&c, CheckId::new(), deadline()).await.unwrap(),
        [1]
    );
    let (all, connections) = encrypted(&application).await;
    assert!(
        connections >= 1 && all,
        "{connections} connections, all TLS: {all}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_full_with_the_servers_ca_counts_by_name_and_by_address() {
    counts(&url("127.0.0.1", &with_ca("verify-full"))).await;
    counts(&url("localhost", &with_ca("verify-full"))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_full_with_another_ca_is_a_certificate_failure() {
    let dir = tempfile::tempdir().unwrap();
    let other = Certificates::make(dir.path(), &["localhost", "127.0.0.1"]);
    for mode in ["verify-full", "verify-ca", "require"] {
        let params = format!("sslmode={mode}&sslrootcert={}", other.ca.display());
        let err = open(&url("127.0.0.1", &params)).await.unwrap_err();
        assert!(matches!(err, Error::Connect(_)), "{mode}: {err:?}");
        let text = chain(&err);
        assert!(
            text.contains("invalid peer certificate") && text.contains("UnknownIssuer"),
            "{mode}: {text}"
        );
        // The handshake failed: nothing came from the server.
        assert!(driver_error(&err).as_db_error().is_none(), "{mode}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_name_not_in_the_certificate_fails_verify_full_but_not_verify_ca() {
    // Connects to 127.0.0.1 while checking the certificate for another name.
    let host = "db.tollgate.invalid";
    let full = url(
        host,
        &format!("hostaddr=127.0.0.1&{}", with_ca("verify-full")),
    );
    let err = open(&full).await.unwrap_err();
    let text = chain(&err);
    assert!(
        text.contains("invalid peer certificate") && text.contains("not valid for name"),
        "{text}"
    );
    counts(&url(
        host,
        &format!("hostaddr=127.0.0.1&{}", with_ca("verify-ca")),
    ))
    .await;
    counts(&url(host, "hostaddr=127.0.0.1&sslmode=require")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_tcp_is_refused_by_the_server() {
    let err = open(&url("127.0.0.1", "sslmode=disable"))
        .await
        .unwrap_err();
    let refused = driver_error(&err)
        .as_db_error()
        .unwrap_or_else(|| panic!("not the server's answer: {}", chain(&err)));
    assert_eq!(refused.code().code(), "28000", "{refused}");
    assert!(
        refused.message().contains("no pg_hba.conf entry")
            && refused.message().contains("no encryption"),
        "{refused}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn prefer_uses_tls_and_falls_back_to_plain_when_tls_fails() {
    // No sslmode: prefer, the certificate unchecked.
    let application = format!("tls-{}", support::unique_schema());
    counts(&url(
        "127.0.0.1",
        &format!("application_name={application}"),
    ))
    .await;
    // A chain that does not verify fails TLS; prefer tries plain, which
    // this server refuses: its refusal is the error.
    let dir = tempfile::tempdir().unwrap();
    let other = Certificates::make(dir.path(), &["127.0.0.1"]);
    let params = format!("sslmode=prefer&sslrootcert={}", other.ca.display());
    let err = open(&url("127.0.0.1", &params)).await.unwrap_err();
    let refused = driver_error(&err)
        .as_db_error()
        .map(|e| e.message().to_owned());
    assert!(
        refused
            .as_deref()
            .is_some_and(|m| m.contains("no encryption")),
        "{}",
        chain(&err)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn require_against_a_server_without_tls_fails() {
    let plain = support::server();
    let url = format!("{}?sslmode=require", plain.url());
    let err = open(&url).await.unwrap_err();
    assert!(
        chain(&err).contains("server does not support TLS"),
        "{}",
        chain(&err)
    );
    // prefer (the default) stays plain there.
    counts(&plain.url()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_password_goes_over_tls_bound_to_the_channel_and_is_never_shown() {
    let password = "Tls-s3cret-pw";
    own_client()
        .await
        .batch_execute(&format!(
            "DO $$ BEGIN CREATE ROLE {SCRAM_ROLE} LOGIN PASSWORD '{password}'; \
             EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
             GRANT CREATE ON DATABASE postgres TO {SCRAM_ROLE};"
        ))
        .await
        .unwrap();
    let params = format!("{}&channel_binding=require", with_ca("verify-full"));
    let base = format!(
        "postgres://{SCRAM_ROLE}:{password}@127.0.0.1:{}/postgres",
        server().port()
    );
    counts(&format!("{base}?{params}")).await;
    let store = open(&format!("{base}?{params}")).await.unwrap();
    let shown = format!("{store:?}");
    assert!(
        shown.contains("sslmode=verify-full") && !shown.contains(password),
        "{shown}"
    );

    let wrong = format!(
        "postgres://{SCRAM_ROLE}:wrong-{password}@127.0.0.1:{}/postgres?{params}",
        server().port()
    );
    let err = open(&wrong).await.unwrap_err();
    let text = format!("{} {err:?}", chain(&err));
    assert!(text.contains("password authentication failed"), "{text}");
    assert!(!text.contains(password), "{text}");
}

/// The conformance suite over `verify-full`: each check in a fresh schema,
/// lifetimes read through the socket.
mod conformance {
    use super::*;

    struct TlsHarness {
        url: String,
        schema: String,
        client: Client,
    }

    impl tollgate_conformance::Harness for TlsHarness {
        type Store = PostgresStore;

        async fn start() -> TlsHarness {
            let url = url("localhost", &with_ca("verify-full"));
            let schema = support::unique_schema();
            drop(support::open(&url, &schema).await);
            TlsHarness {
                client: own_client().await,
                url,
                schema,
            }
        }

        async fn open(&self) -> PostgresStore {
            support::open(&self.url, &self.schema).await
        }

        async fn expiry(&self, key: &str) -> Expiry {
            support::expiry(&self.client, &self.schema, key).await
        }
    }

    tollgate_conformance::conformance_tests!(TlsHarness);
}
