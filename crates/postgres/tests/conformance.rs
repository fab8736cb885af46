//! The shared conformance suite, on the binary's private Postgres server:
//! each check in a fresh schema.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use tokio_postgres::Client;
use tollgate_conformance::Expiry;
use tollgate_postgres::PostgresStore;
use tollgate_test_support::relay::Relay;

/// A fresh schema on the shared server, and a client of the harness's own
/// that reads lifetimes from the tables. The store's clients talk to the
/// server through a relay that loses replies on the wire for the checks of
/// replies lost after the write.
struct PostgresHarness {
    /// The store's clients' URL: through the relay.
    url: String,
    relay: Relay,
    schema: String,
    client: Client,
}

impl tollgate_conformance::Harness for PostgresHarness {
    type Store = PostgresStore;

    async fn start() -> PostgresHarness {
        let server = support::server();
        let schema = support::unique_schema();
        // The schema exists (and `expiry` can read it) before any check runs.
        drop(support::open(&server.url(), &schema).await);
        let relay = Relay::start(server.port()).await;
        PostgresHarness {
            client: support::client(&server.url()).await,
            url: format!("postgres://postgres@127.0.0.1:{}/postgres", relay.port()),
            relay,
            schema,
        }
    }

    async fn open(&self) -> PostgresStore {
        support::open(&self.url, &self.schema).await
    }

    async fn expiry(&self, key: &str) -> Expiry {
        support::expiry(&self.client, &self.schema, key).await
    }

    fn relay(&self) -> Option<&Relay> {
        Some(&self.relay)
    }
}

tollgate_conformance::conformance_tests!(PostgresHarness);
// The Postgres store keeps leases.
tollgate_conformance::lease_conformance_tests!(PostgresHarness);
