//! Webhook marks at the store level: owned by a token, then done.

use std::time::Duration;

use tollgate_core::{CheckId, Claim, Counter, CounterStore, MarkStore};

use crate::support::{clock, deadline, ok, unique};
use crate::{Expiry, Harness};

const LEASE: Duration = Duration::from_secs(60);
const DONE: Duration = Duration::from_secs(3_600);

/// A mark belongs to the token that claimed it: a second claim with the
/// same token (a retried write) is `Acquired`, another token's is `Held`;
/// only the owner finishes or releases it; a done mark is held for every
/// token, and finishing an absent or done key sets it done; counters and
/// marks keep apart.
pub async fn marks_belong_to_their_token<H: Harness>(harness: &H) {
    let _ = clock(harness);
    let store = harness.open().await;
    let id = unique();
    let claim = async |key: &str, token: &str| {
        ok(store.claim(key, token, LEASE, deadline()).await, "claim")
    };
    let finish = async |key: &str, token: &str| {
        ok(store.finish(key, token, DONE, deadline()).await, "finish")
    };
    let release =
        async |key: &str, token: &str| ok(store.release(key, token, deadline()).await, "release");

    let mark = format!("mark:{id}:owned");
    assert_eq!(claim(&mark, "a").await, Claim::Acquired);
    assert_eq!(
        claim(&mark, "a").await,
        Claim::Acquired,
        "a retried claim must see its own first write"
    );
    assert_eq!(
        claim(&mark, "b").await,
        Claim::Held,
        "another token must find the mark held"
    );
    assert!(
        !release(&mark, "b").await,
        "another token released the mark"
    );
    assert!(!finish(&mark, "b").await, "another token finished the mark");
    assert_eq!(
        claim(&mark, "a").await,
        Claim::Acquired,
        "the owner lost its mark to another token"
    );
    assert_eq!(claim(&mark, "b").await, Claim::Held);
    assert!(finish(&mark, "a").await, "the owner finishes its mark");
    for token in ["a", "b"] {
        assert_eq!(
            claim(&mark, token).await,
            Claim::Held,
            "a done mark is held for every token"
        );
    }
    assert!(
        finish(&mark, "a").await,
        "finishing a done mark again succeeds"
    );
    assert!(
        finish(&mark, "c").await,
        "finishing a done mark succeeds for any token"
    );
    assert!(!release(&mark, "a").await, "a done mark is not released");
    assert_eq!(claim(&mark, "c").await, Claim::Held);

    let absent = format!("mark:{id}:absent");
    assert!(
        finish(&absent, "a").await,
        "finishing an absent mark sets it done"
    );
    assert_eq!(
        claim(&absent, "a").await,
        Claim::Held,
        "an absent mark finished is done"
    );
    assert!(
        matches!(harness.expiry(&absent).await, Expiry::In(left) if left <= DONE + Duration::from_secs(1))
    );

    let released = format!("mark:{id}:released");
    assert_eq!(claim(&released, "a").await, Claim::Acquired);
    assert!(release(&released, "a").await, "the owner releases its mark");
    assert_eq!(
        harness.expiry(&released).await,
        Expiry::Absent,
        "a released mark is gone"
    );
    assert!(
        !release(&released, "a").await,
        "an absent mark is not released"
    );
    assert_eq!(
        claim(&released, "b").await,
        Claim::Acquired,
        "a released mark is claimed again"
    );
    assert_eq!(claim(&released, "a").await, Claim::Held);

    let counter = Counter {
        key: format!("limit:marks:{id}:1"),
        ttl: DONE,
        cost: 2,
        max: 10,
        floor: 0,
        prior: None,
        lease: false,
    };
    let apart = format!("mark:{id}:apart");
    assert_eq!(claim(&apart, "a").await, Claim::Acquired);
    assert_eq!(
        ok(
            store
                .count(std::slice::from_ref(&counter), CheckId::new(), deadline())
                .await,
            "count"
        ),
        [2]
    );
    assert!(ok(store.delete(&counter.key, deadline()).await, "delete"));
    assert_eq!(
        claim(&apart, "b").await,
        Claim::Held,
        "a counter's delete touched a mark"
    );
    assert!(finish(&apart, "a").await);
    assert_eq!(
        ok(
            store
                .count(std::slice::from_ref(&counter), CheckId::new(), deadline())
                .await,
            "count"
        ),
        [2],
        "a mark touched a counter"
    );
}
