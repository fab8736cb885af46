//! Shared by the test binaries: the private server, unique schemas, and a
//! client of the tests' own that reads the tables directly.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use tokio_postgres::{Client, NoTls};
use tollgate_conformance::Expiry;
use tollgate_postgres::{PostgresOptions, PostgresStore};
use tollgate_test_support::postgres_server::PostgresServer;

/// The binary's shared private server (started on first use).
pub(crate) fn server() -> &'static PostgresServer {
    tokio::task::block_in_place(PostgresServer::shared)
}

/// A schema name no other test, run or process uses.
pub(crate) fn unique_schema() -> String {
    let name: String = tollgate_test_support::unique()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("s_{name}")
}

/// A client of the test's own on `url`.
pub(crate) async fn client(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    tokio::spawn(connection);
    client
}

/// Opens a store on `url` in `schema`.
pub(crate) async fn open(url: &str, schema: &str) -> PostgresStore {
    PostgresStore::open_with(url, PostgresOptions::default().schema(schema))
        .await
        .unwrap_or_else(|e| panic!("open the store: {e}"))
}

/// The remaining lifetime of `key` in `schema`, counters or marks, read
/// from the tables by the server's clock; for a set of leases, until its
/// last unexpired lease ends (checking that the set's row lives exactly
/// until its last lease ends).
pub(crate) async fn expiry(client: &Client, schema: &str, key: &str) -> Expiry {
    let sql = format!(
        "SELECT count(*), \
             (extract(epoch FROM max(l.ends_at) FILTER (WHERE l.ends_at > clock_timestamp()) \
                 - clock_timestamp()) * 1000000)::bigint, \
             bool_and(c.expires_at IS NOT DISTINCT FROM (SELECT max(m.ends_at) \
                 FROM \"{schema}\".leases m WHERE m.key = $1)) \
         FROM \"{schema}\".leases l LEFT JOIN \"{schema}\".counters c ON c.key = l.key \
         WHERE l.key = $1"
    );
    let row = client.query_one(&sql, &[&key.as_bytes()]).await.unwrap();
    if row.get::<_, i64>(0) > 0 {
        assert_eq!(
            row.get::<_, Option<bool>>(2),
            Some(true),
            "{key}: the set lives until its last lease ends"
        );
        return match row.get::<_, Option<i64>>(1) {
            Some(us) if us > 0 => Expiry::In(Duration::from_micros(us as u64)),
            _ => Expiry::Absent,
        };
    }
    let sql = format!(
        "SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint \
         FROM \"{schema}\".counters WHERE key = $1 \
         UNION ALL \
         SELECT (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint \
         FROM \"{schema}\".marks WHERE key = $1"
    );
    let rows = client.query(&sql, &[&key.as_bytes()]).await.unwrap();
    assert!(rows.len() <= 1, "{key} is both a counter and a mark");
    match rows.first().map(|row| row.get::<_, Option<i64>>(0)) {
        None => Expiry::Absent,
        Some(None) => Expiry::Never,
        Some(Some(us)) if us <= 0 => Expiry::Absent,
        Some(Some(us)) => Expiry::In(Duration::from_micros(us as u64)),
    }
}

/// The stored count of `key` in `schema`, expired or not (None: no row).
pub(crate) async fn stored(client: &Client, schema: &str, key: &str) -> Option<i64> {
    let sql = format!("SELECT value FROM \"{schema}\".counters WHERE key = $1");
    client
        .query_opt(&sql, &[&key.as_bytes()])
        .await
        .unwrap()
        .map(|row| row.get(0))
}
