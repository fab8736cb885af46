//! The store over TLS, by `sslmode`, against a private Postgres serving TLS
//! only over TCP (a certificate for `localhost` and `127.0.0.1` signed by a
//! CA the test made; plain TCP refused by its `pg_hba.conf`); `prefer`'s
//! fallback to plain, also against a server taking plain TCP for some
//! roles, through a relay that keeps what the client sends; and the
//! conformance suite over `verify-full`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::error::Error as _;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
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

/// A role that [`mixed_server`] refuses over TLS and lets in over plain TCP.
const PLAIN_ROLE: &str = "tollgate_plain";
/// A role that [`mixed_server`] refuses over TLS and over plain TCP.
const REFUSED_ROLE: &str = "tollgate_refused";
/// A role of [`mixed_server`] that may not log in, though its password
/// passes (by SCRAM over TLS, sent in clear over plain TCP).
const NOLOGIN_ROLE: &str = "tollgate_nologin";
/// [`NOLOGIN_ROLE`]'s password.
const NOLOGIN_PASSWORD: &str = "Nologin-s3cret-pw";

/// The binary's second TLS server (started on first use), which also takes
/// plain TCP for some roles: [`SCRAM_ROLE`] logs in by SCRAM over TLS and by
/// its password sent in clear (`password`) over plain TCP; [`PLAIN_ROLE`]
/// over plain TCP only; [`REFUSED_ROLE`] neither way; [`NOLOGIN_ROLE`]'s
/// password is checked as [`SCRAM_ROLE`]'s; anyone else over TLS only,
/// without a password.
fn mixed_server() -> &'static PostgresServer {
    static SERVER: OnceLock<PostgresServer> = OnceLock::new();
    tokio::task::block_in_place(|| {
        SERVER.get_or_init(|| {
            let options = PostgresServerOptions::default()
                .fsync(false)
                .tls(true)
                .hba(format!("hostnossl all {SCRAM_ROLE} 127.0.0.1/32 password"))
                .hba(format!("hostssl all {PLAIN_ROLE} 127.0.0.1/32 reject"))
                .hba(format!("hostnossl all {PLAIN_ROLE} 127.0.0.1/32 trust"))
                .hba(format!("host all {REFUSED_ROLE} 127.0.0.1/32 reject"))
                .hba(format!(
                    "hostssl all {NOLOGIN_ROLE} 127.0.0.1/32 scram-sha-256"
                ))
                .hba(format!(
                    "hostnossl all {NOLOGIN_ROLE} 127.0.0.1/32 password"
                ));
            let server = PostgresServer::start_with(options);
            server.psql(&format!(
                "CREATE ROLE {SCRAM_ROLE} LOGIN PASSWORD 'Mixed-s3cret-pw'; \
                 CREATE ROLE {PLAIN_ROLE} LOGIN; \
                 CREATE ROLE {NOLOGIN_ROLE} NOLOGIN PASSWORD '{NOLOGIN_PASSWORD}'; \
                 GRANT CREATE ON DATABASE postgres TO {SCRAM_ROLE}, {PLAIN_ROLE};"
            ));
            server
        })
    })
}

/// The first bytes of a connection asking for TLS: an SSLRequest (length
/// 8, code 80877103).
const SSL_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];

/// What a client sent through a [`Relay`] on one connection, as it crossed
/// the wire (TLS records after an SSLRequest).
#[derive(Clone, Default)]
struct Sent(Vec<u8>);

impl Sent {
    /// Whether the connection began by asking for TLS.
    fn asked_tls(&self) -> bool {
        self.0.starts_with(&SSL_REQUEST)
    }

    /// Whether `text` crossed the wire readable.
    fn holds(&self, text: &str) -> bool {
        self.0.windows(text.len()).any(|w| w == text.as_bytes())
    }
}

/// Each connection's kind, in order: `TLS` or `plain`.
fn kinds(sent: &[Sent]) -> Vec<&'static str> {
    sent.iter()
        .map(|s| if s.asked_tls() { "TLS" } else { "plain" })
        .collect()
}

/// A TCP relay on a loopback port to a server's, keeping what clients send
/// through it, one entry per connection in the order they were opened.
struct Relay {
    port: u16,
    sent: Arc<Mutex<Vec<Sent>>>,
    accepting: JoinHandle<()>,
}

impl Relay {
    async fn to(server_port: u16) -> Relay {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let sent = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&sent);
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let index = {
                    let mut all = kept.lock().unwrap();
                    all.push(Sent::default());
                    all.len() - 1
                };
                tokio::spawn(relay(client, server_port, Arc::clone(&kept), index));
            }
        });
        Relay {
            port,
            sent,
            accepting,
        }
    }

    /// What each connection sent so far.
    fn sent(&self) -> Vec<Sent> {
        self.sent.lock().unwrap().clone()
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// Relays `client` to the server, keeping what it sends (before passing it
/// on, so it is kept by the time the server answers it) in `kept[index]`.
async fn relay(client: TcpStream, server_port: u16, kept: Arc<Mutex<Vec<Sent>>>, index: usize) {
    let Ok(server) = TcpStream::connect((Ipv4Addr::LOCALHOST, server_port)).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let up = async {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = client_read.read(&mut buf).await {
            kept.lock().unwrap()[index].0.extend_from_slice(&buf[..n]);
            if server_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = server_write.shutdown().await;
    };
    let down = async {
        let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
        let _ = client_write.shutdown().await;
    };
    tokio::join!(up, down);
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
        floor: 0,
        prior: None,
        lease: false,
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
async fn prefer_never_sends_a_refused_password_again_in_plain() {
    // The server takes this role's password in clear over plain TCP: a
    // wrong one refused over TLS must not be tried again that way.
    let relay = Relay::to(mixed_server().port()).await;
    let wrong = "Wrong-prefer-pw";
    let url = format!(
        "postgres://{SCRAM_ROLE}:{wrong}@127.0.0.1:{}/postgres?sslmode=prefer",
        relay.port
    );
    let text = refused_over_tls_only(
        &relay,
        &url,
        wrong,
        "28P01",
        "password authentication failed",
    )
    .await;
    assert!(!text.contains(wrong), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn prefer_never_retries_in_plain_once_the_password_was_asked() {
    // The password passes over TLS, then the server refuses the role
    // (28000, as pg_hba's refusals): not pg_hba's answer to TLS, so no
    // plain retry, which would send the right password in clear.
    let relay = Relay::to(mixed_server().port()).await;
    let url = format!(
        "postgres://{NOLOGIN_ROLE}:{NOLOGIN_PASSWORD}@127.0.0.1:{}/postgres",
        relay.port
    );
    refused_over_tls_only(
        &relay,
        &url,
        NOLOGIN_PASSWORD,
        "28000",
        "not permitted to log in",
    )
    .await;
}

/// Opens `url` through `relay` and expects the server's refusal `code`
/// (its message holding `message`) on one TLS connection, `password`
/// never crossing in clear; what the error shows.
async fn refused_over_tls_only(
    relay: &Relay,
    url: &str,
    password: &str,
    code: &str,
    message: &str,
) -> String {
    let err = open(url).await.unwrap_err();
    let text = format!("{} {err:?}", chain(&err));
    let sent = relay.sent();
    assert!(
        !sent.iter().any(|s| s.holds(password)),
        "the password crossed in clear: connections {:?}; {text}",
        kinds(&sent)
    );
    assert_eq!(kinds(&sent), ["TLS"], "{text}");
    let refused = driver_error(&err)
        .as_db_error()
        .unwrap_or_else(|| panic!("not the server's answer: {text}"));
    assert_eq!(refused.code().code(), code, "{text}");
    assert!(refused.message().contains(message), "{text}");
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn prefer_reports_a_wrong_password_not_a_plain_refusal() {
    // The TLS-only server: a plain retry would be refused (`no pg_hba.conf
    // entry … no encryption`), and that refusal would hide the cause.
    let relay = Relay::to(server().port()).await;
    let wrong = "Wrong-prefer-pw";
    let url = format!(
        "postgres://{SCRAM_ROLE}:{wrong}@127.0.0.1:{}/postgres",
        relay.port
    );
    let err = open(&url).await.unwrap_err();
    let text = format!("{} {err:?}", chain(&err));
    assert_eq!(kinds(&relay.sent()), ["TLS"], "{text}");
    let refused = driver_error(&err)
        .as_db_error()
        .unwrap_or_else(|| panic!("not the server's answer: {text}"));
    assert_eq!(refused.code().code(), "28P01", "{text}");
    assert!(
        text.contains("password authentication failed") && !text.contains("no encryption"),
        "{text}"
    );
    assert!(!text.contains(wrong), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn prefer_falls_back_to_plain_when_the_server_refuses_tls_for_the_role() {
    // pg_hba refuses the role over TLS (SQLSTATE 28000) and lets it in plain.
    let relay = Relay::to(mixed_server().port()).await;
    counts(&format!(
        "postgres://{PLAIN_ROLE}@127.0.0.1:{}/postgres?sslmode=prefer",
        relay.port
    ))
    .await;
    let sent = kinds(&relay.sent());
    assert_eq!(sent.get(..2), Some(&["TLS", "plain"][..]), "{sent:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn prefer_names_both_failures_when_plain_fails_too() {
    // TLS fails (a chain that does not verify), then the server refuses
    // plain: both causes are in the error, the password in neither.
    let password = "Both-s3cret-pw";
    let dir = tempfile::tempdir().unwrap();
    let other = Certificates::make(dir.path(), &["127.0.0.1"]);
    let url = format!(
        "postgres://{SCRAM_ROLE}:{password}@127.0.0.1:{}/postgres?sslmode=prefer&sslrootcert={}",
        server().port(),
        other.ca.display()
    );
    let err = open(&url).await.unwrap_err();
    let text = format!("{} {err:?}", chain(&err));
    assert!(
        text.contains("sslmode=prefer")
            && text.contains("invalid peer certificate")
            && text.contains("UnknownIssuer")
            && text.contains("no encryption"),
        "{text}"
    );
    assert!(!text.contains(password), "{text}");

    // The server refuses the role over TLS (28000), then in plain.
    let url = format!(
        "postgres://{REFUSED_ROLE}:{password}@127.0.0.1:{}/postgres",
        mixed_server().port()
    );
    let err = open(&url).await.unwrap_err();
    let text = format!("{} {err:?}", chain(&err));
    assert!(
        text.contains("sslmode=prefer")
            && text.contains("rejects connection")
            && text.contains("SSL encryption")
            && text.contains("no encryption"),
        "{text}"
    );
    assert!(!text.contains(password), "{text}");
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
    tollgate_conformance::lease_conformance_tests!(TlsHarness);
}
