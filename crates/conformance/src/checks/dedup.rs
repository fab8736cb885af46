//! Webhook de-duplication.

use crate::Harness;
use crate::support::{clock, limiter, ok, unique};

/// One delivery id is first exactly once, even when deliveries race over
/// two clients.
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
            tokio::spawn(async move { ok(deliveries.first_delivery(&id).await, "dedup") })
        })
        .collect();
    let mut firsts = 0;
    for task in tasks {
        firsts += usize::from(ok(task.await, "task"));
    }
    assert_eq!(firsts, 1, "40 racing deliveries of one id");
    let other = format!("{id}-other");
    assert!(
        ok(deliveries[0].first_delivery(&other).await, "dedup"),
        "ids are independent"
    );
}

/// A released delivery is first again, so a redelivery of a delivery whose
/// processing failed is processed.
pub async fn released_delivery_is_first_again<H: Harness>(harness: &H) {
    let clock = clock();
    let deliveries = limiter(harness.open().await, &clock).deliveries();
    let id = unique();
    assert!(ok(deliveries.first_delivery(&id).await, "dedup"));
    assert!(!ok(deliveries.first_delivery(&id).await, "dedup"));
    ok(deliveries.release(&id).await, "release");
    assert!(
        ok(deliveries.first_delivery(&id).await, "dedup"),
        "released id must be first again"
    );
    assert!(!ok(deliveries.first_delivery(&id).await, "dedup"));
    assert!(
        deliveries.first_delivery("").await.is_err(),
        "an empty id is refused"
    );
}
