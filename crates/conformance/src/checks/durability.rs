//! Restart survival.

use std::sync::Arc;

use tollgate_core::Window;

use crate::Harness;
use crate::support::{clock, deliveries, limiter, ok, rule, unique};

/// Dropping every client and opening new ones on the same storage loses no
/// count: counted and reserved calls and de-duplication marks are all intact.
pub async fn counts_survive_a_restart<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let id = unique();
    let counted = [ok(
        rule("restart", 10, Window::DAY, 2).limit(&[&id, "count"]),
        "limit",
    )];
    let reserved = [ok(
        rule("restart", 10, Window::DAY, 2).limit(&[&id, "reserve"]),
        "limit",
    )];
    let delivery = format!("delivery-{id}");
    {
        let store = Arc::new(harness.open().await);
        let marks = deliveries(Arc::clone(&store));
        let first = limiter(store, &clock);
        let second = limiter(harness.open().await, &clock);
        for _ in 0..3 {
            ok(first.count(&counted).await, "count");
        }
        for _ in 0..2 {
            ok(second.reserve(&reserved).await, "reserve");
        }
        let begun = ok(marks.begin(&delivery).await, "begin");
        let begun = begun.unwrap_or_else(|| panic!("a new delivery must begin"));
        ok(begun.complete().await, "complete");
    }
    let store = Arc::new(harness.open().await);
    let reopened_marks = deliveries(Arc::clone(&store));
    let reopened = limiter(store, &clock);
    let left = ok(
        reopened
            .remaining(&[counted[0].clone(), reserved[0].clone()])
            .await,
        "remaining",
    );
    assert_eq!(left[0].remaining(), 7, "counted calls lost in the restart");
    assert_eq!(left[1].remaining(), 8, "reserved calls lost in the restart");
    assert!(
        ok(reopened_marks.begin(&delivery).await, "begin").is_none(),
        "a completed delivery was lost in the restart"
    );
    let verdict = ok(reopened.count(&counted).await, "count");
    assert_eq!(verdict.usage()[0].remaining(), 6);
}
