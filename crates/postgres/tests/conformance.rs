//! The shared conformance suite, on the binary's private Postgres server:
//! each check in a fresh schema.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use tokio_postgres::Client;
use tollgate_conformance::Expiry;
use tollgate_postgres::PostgresStore;

/// A fresh schema on the shared server, and a client of the harness's own
/// that reads lifetimes from the tables.
struct PostgresHarness {
    url: String,
    schema: String,
    client: Client,
}

impl tollgate_conformance::Harness for PostgresHarness {
    type Store = PostgresStore;

    async fn start() -> PostgresHarness {
        let url = support::server().url();
        let schema = support::unique_schema();
        // The schema exists (and `expiry` can read it) before any check runs.
        drop(support::open(&url, &schema).await);
        PostgresHarness {
            client: support::client(&url).await,
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

tollgate_conformance::conformance_tests!(PostgresHarness);
// The Postgres store keeps leases.
tollgate_conformance::lease_conformance_tests!(PostgresHarness);
