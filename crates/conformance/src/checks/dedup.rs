//! Webhook de-duplication: two-state marks.

use std::time::{Duration, Instant};

use tollgate_core::{Deliveries, Delivery};

use crate::support::{clock, deliveries, ok, unique};
use crate::{Expiry, Harness};

/// One delivery id is begun exactly once, even when deliveries race over
/// two clients; a completed delivery stays a duplicate.
pub async fn delivery_is_first_exactly_once<H: Harness>(harness: &H) {
    let _ = clock(harness);
    let deliveries = [
        deliveries(harness.open().await),
        deliveries(harness.open().await),
    ];
    let id = unique();
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let deliveries = deliveries[i % 2].clone();
            let id = id.clone();
            tokio::spawn(async move { ok(deliveries.begin(&id).await, "begin") })
        })
        .collect();
    let mut begun = Vec::new();
    for task in tasks {
        begun.extend(ok(task.await, "task"));
    }
    assert_eq!(begun.len(), 1, "40 racing deliveries of one id");
    for delivery in begun {
        ok(delivery.complete().await, "complete");
    }
    assert!(
        ok(deliveries[1].begin(&id).await, "begin").is_none(),
        "a completed delivery is a duplicate"
    );
    let other = format!("{id}-other");
    let other = ok(deliveries[0].begin(&other).await, "begin");
    assert!(other.is_some(), "ids are independent");
}

/// A released delivery can be begun again, so a redelivery of a delivery
/// whose processing failed is processed.
pub async fn released_delivery_is_first_again<H: Harness>(harness: &H) {
    let _ = clock(harness);
    let deliveries = deliveries(harness.open().await);
    let id = unique();
    let first = ok(deliveries.begin(&id).await, "begin");
    let first = first.unwrap_or_else(|| panic!("a new id must begin"));
    assert!(ok(deliveries.begin(&id).await, "begin").is_none(), "held");
    ok(first.release().await, "release");
    let again = ok(deliveries.begin(&id).await, "begin");
    let again = again.unwrap_or_else(|| panic!("a released id must begin again"));
    assert!(ok(deliveries.begin(&id).await, "begin").is_none());
    ok(again.complete().await, "complete");
    assert!(ok(deliveries.begin(&id).await, "begin").is_none(), "done");
    assert!(
        deliveries.begin("").await.is_err(),
        "an empty id is refused"
    );
}

/// A delivery dropped without being completed is released in the
/// background: a redelivery begins within a second.
pub async fn a_dropped_delivery_is_released<H: Harness>(harness: &H) {
    let _ = clock(harness);
    let deliveries = deliveries(harness.open().await);
    let id = unique();
    let first = ok(deliveries.begin(&id).await, "begin");
    let first = first.unwrap_or_else(|| panic!("a new id must begin"));
    assert!(ok(deliveries.begin(&id).await, "begin").is_none(), "held");
    drop(first);
    let again = poll(Duration::from_secs(1), || deliveries.begin(&id)).await;
    let again = again.unwrap_or_else(|| panic!("a dropped delivery was never released"));
    ok(again.complete().await, "complete");
    assert!(ok(deliveries.begin(&id).await, "begin").is_none(), "done");
}

/// A process that dies between the mark and its completion (the handle
/// forgotten, so nothing releases it) holds the delivery until the lease
/// ends, and then a redelivery begins: by moving the store's clock past the
/// lease, or in real time with a lease of 300 ms.
pub async fn a_crashed_delivery_is_begun_again_after_its_lease<H: Harness>(harness: &H) {
    const SHORT: Duration = Duration::from_millis(300);
    let _ = clock(harness);
    let lease = if harness.store_clock().is_some() {
        Deliveries::DEFAULT_LEASE
    } else {
        SHORT
    };
    let deliveries = deliveries(harness.open().await).lease(lease);
    let id = unique();
    let crashed = ok(deliveries.begin(&id).await, "begin");
    std::mem::forget(crashed.unwrap_or_else(|| panic!("a new id must begin")));
    let key = ok(deliveries.key(&id), "key");
    match harness.expiry(&key).await {
        Expiry::In(left) => assert!(
            left <= lease + Duration::from_secs(1),
            "a lease of {lease:?} lives {left:?}"
        ),
        other => panic!("{key} must have a lifetime, found {other:?}"),
    }
    let again = match harness.store_clock() {
        Some(store_clock) => {
            store_clock.advance(lease - Duration::from_millis(1));
            assert!(
                ok(deliveries.begin(&id).await, "begin").is_none(),
                "held until the lease ends"
            );
            store_clock.advance(Duration::from_millis(2));
            ok(deliveries.begin(&id).await, "begin")
        }
        None => poll(SHORT + Duration::from_secs(2), || deliveries.begin(&id)).await,
    };
    let again = again.unwrap_or_else(|| panic!("a crashed delivery was never begun again"));
    ok(again.complete().await, "complete");
    assert!(ok(deliveries.begin(&id).await, "begin").is_none(), "done");
}

/// Calls `begin` every 20 ms, in real time, until it returns a delivery or
/// `limit` has passed.
async fn poll<F, Fut>(limit: Duration, begin: F) -> Option<Delivery>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Option<Delivery>, tollgate_core::Error>>,
{
    let until = Instant::now() + limit;
    loop {
        if let Some(delivery) = ok(begin().await, "begin") {
            return Some(delivery);
        }
        if Instant::now() >= until {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
