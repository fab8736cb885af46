//! Opening a store: the versioned schema, concurrent first opens, URLs,
//! typed errors that never show the password, the lazy constructor, and a
//! schema tampered with after it was made.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use tollgate_core::{CheckId, Counter, CounterStore, Deadline, StoreError};
use tollgate_postgres::{Error, PostgresOptions, PostgresStore, SCHEMA_VERSION};

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

fn options(schema: &str) -> PostgresOptions {
    PostgresOptions::default().schema(schema)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_opening_one_fresh_schema_at_once_all_succeed() {
    let url = support::server().url();
    let schema = support::unique_schema();
    let opens: Vec<_> = (0..8)
        .map(|_| {
            let (url, options) = (url.clone(), options(&schema));
            tokio::spawn(async move { PostgresStore::open_with(&url, options).await })
        })
        .collect();
    let mut stores = Vec::new();
    for open in opens {
        stores.push(
            open.await
                .unwrap()
                .unwrap_or_else(|e| panic!("open: {e:?}")),
        );
    }
    let key = format!("limit:opened:{}", tollgate_test_support::unique());
    for store in &stores {
        store
            .count(&[counter(&key)], CheckId::new(), deadline())
            .await
            .unwrap();
    }
    assert_eq!(stores[0].get(&[key], deadline()).await.unwrap(), [8]);
    let client = support::client(&url).await;
    let row = client
        .query_one(
            &format!("SELECT count(*), min(version) FROM \"{schema}\".tollgate_schema"),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, i64>(0), 1, "one version row");
    assert_eq!(row.get::<_, i32>(1), SCHEMA_VERSION);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_of_another_version_is_refused() {
    let url = support::server().url();
    let schema = support::unique_schema();
    drop(support::open(&url, &schema).await);
    let client = support::client(&url).await;
    client
        .execute(
            &format!("UPDATE \"{schema}\".tollgate_schema SET version = 99"),
            &[],
        )
        .await
        .unwrap();
    match PostgresStore::open_with(&url, options(&schema)).await {
        Err(Error::UnknownSchemaVersion {
            schema: named,
            found: 99,
            supported: SCHEMA_VERSION,
        }) if named == schema => {}
        other => panic!("opened a schema of version 99: {other:?}"),
    }
    // The lazy store refuses it on its first call, as a permanent error.
    let lazy = PostgresStore::connect_lazy(&url, options(&schema)).unwrap();
    match lazy.get(&["k".to_owned()], deadline()).await {
        Err(err @ StoreError::Backend(_)) => assert!(!err.is_transient()),
        other => panic!("a lazy store used a schema of version 99: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_holding_foreign_tables_is_refused() {
    let url = support::server().url();
    let schema = support::unique_schema();
    let client = support::client(&url).await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA \"{schema}\"; CREATE TABLE \"{schema}\".counters (id int)"
        ))
        .await
        .unwrap();
    match PostgresStore::open_with(&url, options(&schema)).await {
        Err(Error::ForeignSchema { table, .. }) => assert_eq!(table, "counters"),
        other => panic!("opened a schema of another application: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_of_this_version_missing_a_table_is_refused_not_used() {
    let url = support::server().url();
    let client = support::client(&url).await;
    for (dropped, named) in [
        ("marks", "marks"),
        ("counters", "counters"),
        ("counters, \"{s}\".marks", "counters"),
    ] {
        let schema = support::unique_schema();
        drop(support::open(&url, &schema).await);
        let dropped = dropped.replace("{s}", &schema);
        client
            // CASCADE: the leases' reference to the counters goes too.
            .batch_execute(&format!("DROP TABLE \"{schema}\".{dropped} CASCADE"))
            .await
            .unwrap();
        match PostgresStore::open_with(&url, options(&schema)).await {
            Err(err @ Error::IncompleteSchema { .. }) => {
                assert!(!err.is_transient());
                assert_eq!(
                    err.to_string(),
                    format!("schema `{schema}` is a counter store's but lacks its table `{named}`")
                );
            }
            other => panic!("opened a store schema without {dropped}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_count_out_of_range_is_an_invalid_reply_never_a_count() {
    // Only by hand, past the table's own check: the store still refuses
    // to read a count no store wrote.
    let url = support::server().url();
    let schema = support::unique_schema();
    let store = support::open(&url, &schema).await;
    let key = format!("limit:huge:{}", tollgate_test_support::unique());
    store
        .count(&[counter(&key)], CheckId::new(), deadline())
        .await
        .unwrap();
    let client = support::client(&url).await;
    let table = format!("\"{schema}\".counters");
    client
        .batch_execute(&format!(
            "ALTER TABLE {table} DROP CONSTRAINT counters_value_check; \
             UPDATE {table} SET value = 9007199254740993"
        ))
        .await
        .unwrap();
    let read = store.get(std::slice::from_ref(&key), deadline()).await;
    assert!(matches!(read, Err(StoreError::InvalidReply(_))), "{read:?}");
    // A count saturates there, as every count does.
    let counted = store
        .count(&[counter(&key)], CheckId::new(), deadline())
        .await;
    assert_eq!(counted.ok(), Some(vec![tollgate_core::MAX_COUNT]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_refused_by_the_server_fails_at_once_with_that_error() {
    // Only a race with a new counter is tried again; a statement the
    // server refuses (here a check added by hand) is answered as it is.
    let url = support::server().url();
    let schema = support::unique_schema();
    let store = support::open(&url, &schema).await;
    let client = support::client(&url).await;
    client
        .batch_execute(&format!(
            "ALTER TABLE \"{schema}\".counters ADD CONSTRAINT tiny CHECK (value < 1)"
        ))
        .await
        .unwrap();
    let key = format!("limit:refused:{}", tollgate_test_support::unique());
    let started = std::time::Instant::now();
    let batch = [counter(&key)];
    let reserve = store.reserve(&batch, CheckId::new(), deadline());
    let result = tokio::time::timeout(Duration::from_secs(3), reserve).await;
    let took = started.elapsed();
    match result {
        Ok(Err(err @ StoreError::Backend(_))) => assert!(!err.is_transient()),
        other => panic!("after {took:?}: {other:?}"),
    }
    assert!(
        took < Duration::from_secs(2),
        "the refused statement was tried for {took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_empty_schema_is_used_and_both_url_schemes_open() {
    let url = support::server().url();
    let schema = support::unique_schema();
    let client = support::client(&url).await;
    client
        .batch_execute(&format!("CREATE SCHEMA \"{schema}\""))
        .await
        .unwrap();
    let other = url.replacen("postgres://", "postgresql://", 1);
    let store = PostgresStore::open_with(&other, options(&schema))
        .await
        .unwrap();
    assert_eq!(store.schema(), schema);
    drop(support::open(&url, &schema).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_and_debug_output_never_show_the_password() {
    let server = support::server();
    let url = format!(
        "postgres://postgres:hunter2-secret@127.0.0.1:{}/postgres",
        server.port()
    );
    let store = support::open(&url, &support::unique_schema()).await;
    let shown = format!("{store:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("127.0.0.1"), "{shown}");

    // Nothing listens on this port (a server stopped just now freed it).
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let unreachable = format!("postgres://app:hunter2-secret@127.0.0.1:{closed}/db");
    let err = PostgresStore::open_with(
        &unreachable,
        PostgresOptions::default().connect_timeout(Duration::from_secs(2)),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, Error::Connect(_)), "{err:?}");
    assert!(err.is_transient());
    let chain = error_chain(&err);
    assert!(!chain.contains("hunter2"), "{chain}");

    for bad in [
        "redis://app:hunter2-secret@127.0.0.1/db",
        "postgres://app:hunter2-secret@127.0.0.1:x/db",
    ] {
        let err = PostgresStore::connect_lazy(bad, PostgresOptions::default()).unwrap_err();
        assert!(matches!(err, Error::InvalidUrl(_)), "{bad}: {err:?}");
        let chain = error_chain(&err);
        assert!(!chain.contains("hunter2"), "{chain}");
    }
    let err = PostgresStore::connect_lazy(&url, options("no-dashes")).unwrap_err();
    assert!(matches!(err, Error::InvalidSchema(_)), "{err:?}");
    let err = PostgresStore::connect_lazy(&url, PostgresOptions::default().pool_size(0));
    assert!(matches!(err, Err(Error::InvalidOption(_))));
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut shown = format!("{err} {err:?}");
    let mut source = err.source();
    while let Some(inner) = source {
        shown.push_str(&format!(" / {inner} {inner:?}"));
        source = inner.source();
    }
    shown
}

/// `connect_lazy` needs no runtime and no server; it connects and creates
/// the schema on its first call.
#[test]
fn a_lazy_store_is_built_outside_a_runtime_and_connects_on_first_use() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let url = runtime.block_on(async { support::server().url() });
    let schema = support::unique_schema();
    let store = PostgresStore::connect_lazy(&url, options(&schema)).unwrap();
    let client = runtime.block_on(support::client(&url));
    let exists = |client: &tokio_postgres::Client| {
        let sql = format!("SELECT to_regclass('\"{schema}\".counters') IS NOT NULL");
        runtime.block_on(async { client.query_one(&sql, &[]).await.unwrap().get::<_, bool>(0) })
    };
    assert!(!exists(&client), "a lazy store connected at once");
    let key = format!("limit:lazy:{}", tollgate_test_support::unique());
    let counts = runtime.block_on(store.count(&[counter(&key)], CheckId::new(), deadline()));
    assert_eq!(counts.unwrap(), [1]);
    assert!(exists(&client), "the first call created the schema");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_store_on_an_unreachable_server_fails_transiently() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let url = format!("postgres://app@127.0.0.1:{closed}/db");
    let store = PostgresStore::connect_lazy(&url, PostgresOptions::default()).unwrap();
    for _ in 0..2 {
        match store.get(&["k".to_owned()], deadline()).await {
            Err(err @ StoreError::Connection(_)) => assert!(err.is_transient()),
            other => panic!("a store on a closed port answered {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opening_gives_up_at_the_connect_timeout_on_a_server_that_never_answers() {
    // A socket that accepts (the kernel completes the handshake) and never
    // says anything: only the connect timeout ends the wait.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "postgres://app@127.0.0.1:{}/db",
        silent.local_addr().unwrap().port()
    );
    let started = std::time::Instant::now();
    let options = PostgresOptions::default().connect_timeout(Duration::from_millis(300));
    let err = PostgresStore::open_with(&url, options).await.unwrap_err();
    let took = started.elapsed();
    assert!(err.is_transient(), "{err:?}");
    assert!(
        took < Duration::from_secs(3),
        "open waited {took:?}, not its 300 ms"
    );
    drop(silent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_whose_preparation_lost_its_connection_may_be_opened_again() {
    // Another instance holds the schema's advisory lock; the opening one
    // waits for it, and its connection is terminated while it waits.
    let url = support::server().url();
    let schema = support::unique_schema();
    let mut locker = support::client(&url).await;
    let admin = support::client(&url).await;
    let tx = locker.transaction().await.unwrap();
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('tollgate-schema:' || $1::text, 0))",
        &[&schema],
    )
    .await
    .unwrap();
    let opening = tokio::spawn({
        let (url, schema) = (url.clone(), schema.clone());
        async move { PostgresStore::open_with(&url, options(&schema)).await }
    });
    let waiting = "SELECT pid FROM pg_stat_activity \
                   WHERE wait_event_type = 'Lock' AND query LIKE '%tollgate-schema%' \
                   AND pid <> pg_backend_pid()";
    let mut terminated = false;
    for _ in 0..100 {
        let rows = admin.query(waiting, &[]).await.unwrap();
        if let Some(row) = rows.first() {
            let pid: i32 = row.get(0);
            admin
                .execute("SELECT pg_terminate_backend($1)", &[&pid])
                .await
                .unwrap();
            terminated = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(terminated, "the opening store never waited for the lock");
    let err = opening.await.unwrap().unwrap_err();
    tx.rollback().await.unwrap();
    assert!(matches!(err, Error::Schema { .. }), "{err:?}");
    assert!(err.is_transient(), "{err:?}");
    support::open(&url, &schema).await;
}

#[tokio::test]
async fn its_metrics_and_logs_name_it_postgres() {
    // Lazy: no server needed to be named.
    let store =
        PostgresStore::connect_lazy("postgres://u@127.0.0.1:1/db", options("named")).unwrap();
    assert_eq!(tollgate_core::Named::name(&store), "postgres");
}
