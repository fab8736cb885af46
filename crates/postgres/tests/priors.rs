//! Priors on the server: each statement variant that reads them (a count
//! with and without floors, a reservation, and their purging variants)
//! answers the prior's count after the counts and leaves the prior as it
//! was, value and lifetime; a reservation decides exactly as
//! `Counter::fits_after`, at the edges too (an expired prior, a cost above
//! the max, a weight above it); a prior out of bounds is refused before
//! anything is written, and a refund ignores priors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use tokio_postgres::Client;
use tollgate_core::{
    CheckId, Counter, CounterStore, Deadline, MAX_COUNT, Prior, StoreError, Window,
};

/// A floor (a time in µs, as a GCRA limit's).
const FLOOR: u64 = 1_000_000_000;

fn counter(key: &str, cost: u64, max: u64, floor: u64, prior: Option<(&str, u64, u64)>) -> Counter {
    Counter {
        key: key.to_owned(),
        ttl: Duration::from_secs(3_600),
        cost,
        max,
        floor,
        prior: prior.map(|(key, part, whole)| Prior {
            key: key.to_owned(),
            part,
            whole,
        }),
        lease: false,
    }
}

fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(5))
}

/// The stored value and expiry (µs since the epoch) of `key`, expired or not.
async fn row(client: &Client, schema: &str, key: &str) -> Option<(i64, i64)> {
    let sql = format!(
        "SELECT value, (extract(epoch FROM expires_at) * 1000000)::bigint \
         FROM \"{schema}\".counters WHERE key = $1"
    );
    client
        .query_opt(&sql, &[&key.as_bytes()])
        .await
        .unwrap()
        .map(|row| (row.get(0), row.get(1)))
}

/// Moves `key`'s expiry a second into the past.
async fn expire(client: &Client, schema: &str, key: &str) {
    let sql = format!(
        "UPDATE \"{schema}\".counters SET expires_at = now() - interval '1 second' WHERE key = $1"
    );
    assert_eq!(client.execute(&sql, &[&key.as_bytes()]).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_statement_variant_answers_the_prior_and_leaves_it_alone() {
    let url = support::server().url();
    let schema = support::unique_schema();
    let store = support::open(&url, &schema).await;
    let client = support::client(&url).await;
    let id = tollgate_test_support::unique();
    let [p, c, g, q] = ["p", "c", "g", "q"].map(|k| format!("limit:{k}:{id}"));

    // The prior holds 10, written by another store so that the calls
    // below are the measured store's first: 96 in a row, one in 32 of
    // which runs its purging variant (31, 63 and 95: one of each kind,
    // since 32 is 2 modulo 3).
    let other = support::open(&url, &schema).await;
    other
        .count(
            &[counter(&p, 10, MAX_COUNT, 0, None)],
            CheckId::new(),
            deadline(),
        )
        .await
        .unwrap();
    let before = row(&client, &schema, &p).await;
    let (mut current, mut tat) = (0, FLOOR);
    for n in 0..96 {
        // Half of the prior's 10 counts: the max of 1,000 leaves room.
        let weighed = counter(&c, 1, 1_000, 0, Some((&p, 1, 2)));
        let floored = counter(&g, 1_000, MAX_COUNT, FLOOR, None);
        let counts = match n % 3 {
            0 => {
                current += 1;
                let counts = store.count(&[weighed], CheckId::new(), deadline()).await;
                assert_eq!(counts.unwrap(), [current, 10], "count, call {n}");
                continue;
            }
            1 => {
                (current, tat) = (current + 1, tat + 1_000);
                store
                    .count(&[floored, weighed], CheckId::new(), deadline())
                    .await
                    .unwrap()
            }
            _ => {
                (current, tat) = (current + 1, tat + 1_000);
                let reserved = store
                    .reserve(&[floored, weighed], CheckId::new(), deadline())
                    .await
                    .unwrap();
                assert!(reserved.applied, "call {n}");
                reserved.counts
            }
        };
        assert_eq!(counts, [tat, current, 10], "call {n}");
    }
    assert_eq!(
        row(&client, &schema, &p).await,
        before,
        "the prior was written or its lifetime moved"
    );

    // Two priors, in counter order after every count; one absent, which
    // stays absent.
    let counts = store
        .count(
            &[
                counter(&q, 1, 10, 0, Some((&c, 1, 1))),
                counter(&g, 1_000, MAX_COUNT, FLOOR, None),
                counter(&c, 1, 1_000, 0, Some((&p, 1, 2))),
            ],
            CheckId::new(),
            deadline(),
        )
        .await
        .unwrap();
    assert_eq!(counts, [1, tat + 1_000, current + 1, current, 10]);

    // A refund ignores priors: one count per counter.
    let refunded = store
        .refund(
            &[counter(&c, 1, 1_000, 0, Some((&p, 1, 2)))],
            CheckId::new(),
            deadline(),
        )
        .await
        .unwrap();
    assert_eq!(refunded, [current]);

    // An expired prior reads 0 and is neither removed nor renewed.
    expire(&client, &schema, &p).await;
    let expired = row(&client, &schema, &p).await;
    let counts = store
        .count(
            &[counter(&c, 1, 1_000, 0, Some((&p, 1, 2)))],
            CheckId::new(),
            deadline(),
        )
        .await
        .unwrap();
    assert_eq!(counts, [current + 1, 0]);
    assert_eq!(row(&client, &schema, &p).await, expired);
}

/// A reservation of one counter with a prior: the prior's count (expired
/// or not), its weight, and the counter's count, floor, cost and max.
struct Case {
    prior: u64,
    expired: bool,
    part: u64,
    whole: u64,
    count: u64,
    floor: u64,
    cost: u64,
    max: u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_decides_as_fits_after_at_the_edges() {
    let url = support::server().url();
    let schema = support::unique_schema();
    let store = support::open(&url, &schema).await;
    let client = support::client(&url).await;
    let id = tollgate_test_support::unique();
    let year = Window::MAX_SECS;
    let case = |prior, expired, (part, whole), count, floor, cost, max| Case {
        prior,
        expired,
        part,
        whole,
        count,
        floor,
        cost,
        max,
    };
    let cases = [
        case(10, false, (3, 10), 0, 0, 7, 10),
        case(10, false, (3, 10), 0, 0, 8, 10),
        case(10, true, (3, 10), 0, 0, 8, 10),
        case(0, false, (3, 10), 2, 0, 8, 10),
        case(100, false, (1, 1), 0, 0, 1, 50),
        // A cost of 0 fits an empty counter whatever the weight.
        case(100, false, (1, 1), 0, 0, 0, 50),
        case(100, false, (1, 1), 1, 0, 0, 50),
        case(40, false, (1, 1), 10, 0, 0, 50),
        case(40, false, (1, 1), 11, 0, 0, 50),
        case(MAX_COUNT, false, (year - 1, year), 0, 0, 1, MAX_COUNT),
        case(MAX_COUNT, false, (1, year), 0, 0, MAX_COUNT, u64::MAX),
        case(
            MAX_COUNT,
            false,
            (0, year),
            MAX_COUNT,
            0,
            MAX_COUNT,
            u64::MAX,
        ),
        case(5, false, (1, 1), 0, FLOOR, 10, FLOOR + 15),
        case(5, false, (1, 1), 0, FLOOR, 11, FLOOR + 15),
    ];
    for (n, case) in cases.into_iter().enumerate() {
        let Case {
            prior,
            expired,
            part,
            whole,
            count,
            floor,
            cost,
            max,
        } = case;
        let [p, c] = ["p", "c"].map(|k| format!("limit:{k}:{n}:{id}"));
        if prior > 0 {
            let write = counter(&p, prior, MAX_COUNT, 0, None);
            store
                .count(&[write], CheckId::new(), deadline())
                .await
                .unwrap();
            if expired {
                expire(&client, &schema, &p).await;
            }
        }
        if count > 0 {
            let write = counter(&c, count, MAX_COUNT, 0, None);
            store
                .count(&[write], CheckId::new(), deadline())
                .await
                .unwrap();
        }
        let read = if expired { 0 } else { prior };
        let weighed = counter(&c, cost, max, floor, Some((&p, part, whole)));
        let fits = weighed.fits_after(count, read);
        let after = if fits { weighed.added_to(count) } else { count };
        let reserved = store
            .reserve(std::slice::from_ref(&weighed), CheckId::new(), deadline())
            .await
            .unwrap();
        assert_eq!(
            (reserved.applied, reserved.counts),
            (fits, vec![after, read]),
            "case {n}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prior_out_of_bounds_is_refused_before_anything_is_written() {
    let url = support::server().url();
    let schema = support::unique_schema();
    let store = support::open(&url, &schema).await;
    let client = support::client(&url).await;
    let id = tollgate_test_support::unique();
    let [p, c, plain] = ["p", "c", "plain"].map(|k| format!("limit:{k}:{id}"));
    for (part, whole) in [
        (0, 0),
        (1, Window::MAX_SECS + 1),
        (3, 2),
        (u64::MAX, u64::MAX),
    ] {
        let batch = [
            counter(&plain, 1, 10, 0, None),
            counter(&c, 1, 10, 0, Some((&p, part, whole))),
        ];
        let counted = store.count(&batch, CheckId::new(), deadline()).await;
        assert!(
            matches!(counted, Err(StoreError::Backend(_))),
            "{part}/{whole}: {counted:?}"
        );
        let reserved = store.reserve(&batch, CheckId::new(), deadline()).await;
        assert!(
            matches!(reserved, Err(StoreError::Backend(_))),
            "{part}/{whole}: {reserved:?}"
        );
        for key in [&plain, &c, &p] {
            assert_eq!(row(&client, &schema, key).await, None, "{key} was written");
        }
        // A refund ignores priors, malformed or not.
        let refunded = store.refund(&batch, CheckId::new(), deadline()).await;
        assert_eq!(refunded.unwrap(), [0, 0]);
    }
}
