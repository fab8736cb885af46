//! The `store` label of the store metrics names the store, however an
//! application hands it over: as `open_store` gives it (`Arc<dyn Store>`),
//! under a `Prefixed`, as an `Arc<dyn CounterStore>`, and to `Deliveries`.
//! (One test: the metrics recorder is per process.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use tollgate::{CounterStore, Deliveries, Limiter, Prefixed, Rule, Window, open_store};
use tollgate_test_support::metrics::recorded;
use tollgate_test_support::redis_server::RedisServer;

/// One reservation through `limiter`.
async fn reserve(limiter: &Limiter) {
    let rule = Rule::new("named", 5, Window::DAY).unwrap();
    let limit = rule.limit::<&str>(&[]).unwrap();
    limiter.reserve(&[limit]).await.unwrap();
}

#[test]
fn store_metrics_are_labelled_with_the_stores_name_however_it_is_handed_over() {
    let dir = tempfile::tempdir().unwrap();
    let redis = RedisServer::start();
    let stores = [
        ("memory", "memory".to_owned()),
        (
            "sqlite",
            format!("sqlite:{}", dir.path().join("c.sqlite3").display()),
        ),
        ("redis", redis.url()),
    ];
    let recorded = recorded(async || {
        for (_, url) in &stores {
            let store = open_store(url).unwrap();
            reserve(&Limiter::new(store.clone())).await;
            reserve(&Limiter::new(Prefixed::new("app:", store.clone()))).await;
            let shared: Arc<dyn CounterStore> = store.clone();
            reserve(&Limiter::builder(shared).cache(0).build()).await;
            let deliveries = Deliveries::new(Prefixed::new("app:", store), "hook:").unwrap();
            assert!(deliveries.begin("d1").await.unwrap().is_some());
        }
    });
    let mut seen = BTreeSet::new();
    for (key, _, _, _) in recorded {
        let key = key.key();
        if key.name().starts_with("tollgate_store_") {
            let label = |name: &str| {
                key.labels()
                    .find(|l| l.key() == name)
                    .map(|l| l.value().to_owned())
            };
            seen.insert((label("store").unwrap_or_default(), label("op")));
        }
    }
    for (name, url) in &stores {
        for op in ["reserve", "claim"] {
            let labels = (name.to_string(), Some(op.to_owned()));
            assert!(seen.contains(&labels), "{url}: no {labels:?} in {seen:?}");
        }
    }
    let names: BTreeSet<&str> = seen.iter().map(|(store, _)| store.as_str()).collect();
    assert_eq!(names, BTreeSet::from(["memory", "redis", "sqlite"]));
}
