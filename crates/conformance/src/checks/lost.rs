//! Replies lost after the write: the store applied a call and its reply
//! never reached the client. Where the harness has a server, the reply is
//! lost on the wire ([`Harness::relay`]: the connection closes before the
//! reply arrives, and the client must reconnect); for a store without one,
//! in the client ([`Fault::LoseReply`]). Either way the limiter retries the
//! call with its id, and the retry must be recognised as the same call.

use std::sync::Arc;

use tollgate_core::{Fault, Faulty, Limit, Limiter, Rule, Store, Window};
use tollgate_test_support::relay::Relay;

use crate::Harness;
use crate::support::{clock, deliveries, limiter, ok, rule, unique};

/// Where the next reply is lost.
enum Loss<'h> {
    /// On the wire: the reply to the request holding the marker.
    Wire(&'h Relay),
    /// In the client: the next call's reply.
    Client,
}

impl Loss<'_> {
    /// Fails the check unless a reply was lost since it was armed.
    fn assert_lost(&self, what: &str) {
        if let Loss::Wire(relay) = self {
            assert_eq!(
                relay.lost(),
                1,
                "the relay lost no reply to {what}: its requests never carried the marker"
            );
        }
    }
}

/// A store whose reply to its next call carrying `marker` is lost after
/// the write, and where it is lost.
async fn losing<'h, H: Harness>(harness: &'h H, marker: &str) -> (Arc<dyn Store>, Loss<'h>) {
    let store = harness.open().await;
    match harness.relay() {
        Some(relay) => {
            relay.lose_reply_to(marker.as_bytes());
            (Arc::new(store), Loss::Wire(relay))
        }
        None => {
            let faulty = Faulty::new(store);
            faulty.set(Fault::LoseReply);
            (Arc::new(faulty), Loss::Client)
        }
    }
}

async fn reserve(limiter: &Limiter, limits: &[Limit]) -> bool {
    ok(limiter.reserve(limits).await, "reserve").is_allowed()
}

/// A reservation whose reply was lost after the write is admitted once and
/// counted once: with a max of 2, the lost one and one more are admitted,
/// the third refused, and nothing is over.
pub async fn a_reply_lost_on_the_wire_is_one_call<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let id = unique();
    let (store, loss) = losing(harness, &id).await;
    let limiter = limiter(store, &clock);
    let limit = ok(rule("lost", 2, Window::HOUR, 1).limit(&[&id]), "limit");
    let one = std::slice::from_ref(&limit);
    assert!(
        reserve(&limiter, one).await,
        "the retry of an applied reservation was refused: the budget was spent twice"
    );
    loss.assert_lost("the reservation");
    let left = ok(limiter.remaining(one).await, "remaining");
    assert_eq!(
        left[0].remaining(),
        1,
        "the lost reply's call was not counted once"
    );
    assert!(reserve(&limiter, one).await, "the second call of 2");
    assert!(
        !reserve(&limiter, one).await,
        "a third call got past a max of 2"
    );
}

/// A reservation refused, whose reply was lost, changes nothing when it is
/// retried: the limit with room keeps it all, the full one stays full.
pub async fn a_lost_reply_of_a_refused_reservation_changes_nothing<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let id = unique();
    let full = ok(rule("lost-full", 1, Window::HOUR, 1).limit(&[&id]), "limit");
    let room = ok(rule("lost-room", 5, Window::HOUR, 1).limit(&[&id]), "limit");
    let plain = limiter(harness.open().await, &clock);
    assert!(
        reserve(&plain, std::slice::from_ref(&full)).await,
        "the first call"
    );
    let (store, loss) = losing(harness, &id).await;
    let limiter = limiter(store, &clock);
    let both = [full.clone(), room.clone()];
    assert!(
        !reserve(&limiter, &both).await,
        "a full limit let a call through"
    );
    loss.assert_lost("the refused reservation");
    let left = ok(plain.remaining(&both).await, "remaining");
    assert_eq!(left[0].remaining(), 0, "the full limit");
    assert_eq!(
        left[1].remaining(),
        5,
        "a refused reservation, retried after its reply was lost, spent the other limit"
    );
}

/// A webhook delivery whose claim's reply was lost is still this caller's
/// to process: the retry recognises its own mark (the token it wrote), and
/// a redelivery is a duplicate.
pub async fn a_lost_reply_of_a_delivery_claim_is_recognised<H: Harness>(harness: &H) {
    let _ = clock(harness);
    let id = unique();
    let (store, loss) = losing(harness, &id).await;
    let losing = deliveries(store);
    let begun = ok(losing.begin(&id).await, "begin");
    let begun = begun.unwrap_or_else(|| {
        panic!("a claim whose reply was lost was not recognised as its own on retry")
    });
    loss.assert_lost("the claim");
    let other = deliveries(harness.open().await);
    assert!(
        ok(other.begin(&id).await, "begin").is_none(),
        "a delivery claimed once was begun twice"
    );
    ok(begun.complete().await, "complete");
    assert!(ok(other.begin(&id).await, "begin").is_none(), "done");
}

/// A concurrency rule of one lease.
fn one_lease() -> Rule {
    let rule = ok(Rule::concurrency("lost-lease", 1, Window::MINUTE), "rule");
    ok(rule.with_key(&["id"]), "key")
}

/// A lease whose reply was lost is held once, by its caller: the retry
/// finds its own lease (the check's id), the next caller is refused, and
/// releasing it frees the set.
pub async fn a_lost_reply_of_a_lease_is_recognised<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let id = unique();
    let limit = ok(one_lease().limit(&[&id]), "limit");
    let one = std::slice::from_ref(&limit);
    let (store, loss) = losing(harness, &id).await;
    let losing = limiter(store, &clock);
    let verdict = ok(losing.reserve(one).await, "reserve");
    assert!(
        verdict.is_allowed(),
        "a lease whose reply was lost was refused on retry: the caller's own lease filled the set"
    );
    loss.assert_lost("the lease");
    let plain = limiter(harness.open().await, &clock);
    assert!(
        !reserve(&plain, one).await,
        "a second lease of one was taken"
    );
    for lease in verdict.leases() {
        assert!(
            ok(lease.release().await, "release"),
            "the lease was not held"
        );
    }
    let again = ok(plain.reserve(one).await, "reserve");
    assert!(
        again.is_allowed(),
        "the released lease did not free the set"
    );
}
