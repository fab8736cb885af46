//! Webhook de-duplication: two-state marks.

use crate::Harness;
use crate::support::{clock, limiter, ok, unique};

/// One delivery id is begun exactly once, even when deliveries race over
/// two clients; a completed delivery stays a duplicate.
pub async fn delivery_is_first_exactly_once<H: Harness>(harness: &H) {
    let clock = clock();
    let deliveries = [
        limiter(harness.open().await, &clock).deliveries(),
        limiter(harness.open().await, &clock).deliveries(),
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
    let clock = clock();
    let deliveries = limiter(harness.open().await, &clock).deliveries();
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
    assert!(deliveries.begin("").await.is_err(), "an empty id is refused");
}
