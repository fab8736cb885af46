//! Retried attempts: a call's [`CheckId`] makes its retry the same call.

use std::time::Duration;

use tollgate_core::{CheckId, Counter, CounterStore, Fault, Faulty, Window};

use crate::Harness;
use crate::support::{clock, deadline, limiter, ok, rule, unique};

fn counter(key: &str, cost: u64, max: u64) -> Counter {
    Counter {
        key: key.to_owned(),
        ttl: Duration::from_secs(3_600),
        cost,
        max,
        floor: 0,
        prior: None,
        lease: false,
    }
}

/// A count retried with its id is applied once and answered with the
/// counts it applied, even after other calls counted since; a count with
/// another id is another call.
pub async fn a_retried_count_applies_once_and_answers_what_it_applied<H: Harness>(harness: &H) {
    let store = harness.open().await;
    let id = unique();
    let [a, b] = ["a", "b"].map(|k| format!("limit:retry:{id}:{k}:1"));
    let batch = [counter(&a, 2, 100), counter(&b, 1, 100)];
    let (first, other) = (CheckId::new(), CheckId::new());
    // Every attempt of a call carries its id and its one deadline.
    let (at, later) = (deadline(), deadline());
    let counts = ok(store.count(&batch, first, at).await, "count");
    assert_eq!(counts, [2, 1]);
    let counts = ok(store.count(&batch, other, later).await, "count");
    assert_eq!(counts, [4, 2], "a call with another id was not applied");
    let again = ok(store.count(&batch, first, at).await, "retry");
    assert_eq!(
        again,
        [2, 1],
        "a retry is not answered what its call applied"
    );
    let read = ok(store.get(&[a, b], deadline()).await, "get");
    assert_eq!(read, [4, 2], "a retried count was applied twice");
}

/// A reservation retried with its id answers what the first attempt did:
/// applied once, or refused even after room was made since.
pub async fn a_retried_reservation_answers_as_its_first_attempt<H: Harness>(harness: &H) {
    let store = harness.open().await;
    let key = format!("limit:retry:{}:1", unique());
    let two = [counter(&key, 2, 3)];
    let (applied, at) = (CheckId::new(), deadline());
    let first = ok(store.reserve(&two, applied, at).await, "reserve");
    assert!(first.applied);
    let again = ok(store.reserve(&two, applied, at).await, "retry");
    assert_eq!(again, first, "a retried reservation is answered otherwise");
    let (refused, refused_at) = (CheckId::new(), deadline());
    let no = ok(store.reserve(&two, refused, refused_at).await, "reserve");
    assert!(!no.applied, "2 + 2 fits a max of 3");
    ok(
        store.refund(&two, CheckId::new(), deadline()).await,
        "refund",
    );
    let again = ok(store.reserve(&two, refused, refused_at).await, "retry");
    assert_eq!(again, no, "a refused reservation's retry was applied");
    let read = ok(store.get(&[key], deadline()).await, "get");
    assert_eq!(read, [0], "a retried reservation changed the counter");
}

/// A refund retried with its id gives back once.
pub async fn a_retried_refund_gives_back_once<H: Harness>(harness: &H) {
    let store = harness.open().await;
    let key = format!("limit:retry:{}:1", unique());
    ok(
        store
            .count(&[counter(&key, 5, 100)], CheckId::new(), deadline())
            .await,
        "count",
    );
    let two = [counter(&key, 2, 100)];
    let (id, at) = (CheckId::new(), deadline());
    assert_eq!(ok(store.refund(&two, id, at).await, "refund"), [3]);
    assert_eq!(ok(store.refund(&two, id, at).await, "retry"), [3]);
    let read = ok(store.get(&[key], deadline()).await, "get");
    assert_eq!(read, [3], "a retried refund gave back twice");
}

/// Through a limiter: a reservation applied by the store whose reply was
/// lost (the connection broke after the write) is retried and recognised,
/// so the caller is admitted and the counter holds one call.
pub async fn a_reply_lost_after_the_write_is_recognised_on_retry<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let store = Faulty::new(harness.open().await);
    store.set(Fault::LoseReply);
    let limiter = limiter(store, &clock);
    let limit = ok(rule("lost", 1, Window::HOUR, 1).limit(&[unique()]), "limit");
    let verdict = ok(
        limiter.reserve(std::slice::from_ref(&limit)).await,
        "reserve",
    );
    assert!(
        verdict.is_allowed(),
        "the retry of an applied reservation was refused: the budget was spent twice"
    );
    let left = ok(
        limiter.remaining(std::slice::from_ref(&limit)).await,
        "remaining",
    );
    assert_eq!(
        left[0].remaining(),
        0,
        "the reservation was not counted once"
    );
    let next = ok(limiter.reserve(&[limit]).await, "reserve");
    assert!(!next.is_allowed(), "a second call got past a max of 1");
}
