//! Sets of leases in `CHECK`'s own terms, against a real server: the
//! `#id` argument (malformed ones refused, nothing written), the sorted
//! set it keeps, and a retry applied without its record (as Redis Cluster
//! sends one while a slot migrates) fitting the set that holds its own
//! lease. (What a lease means is the conformance suite's.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{SystemTime, UNIX_EPOCH};

use redis::Value;
use support::admin;
use tollgate_test_support::redis_server::RedisServer;

fn cutoff() -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    (now.as_millis() + 10_000).to_string()
}

/// The reply to an `EVAL` of `CHECK` on `keys` with `args`, error replies
/// inside arrays included.
async fn check(
    conn: &mut redis::aio::MultiplexedConnection,
    keys: &[&str],
    args: &[&str],
) -> Value {
    use redis::aio::ConnectionLike;
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(tollgate_redis::scripts::CHECK)
        .arg(keys.len())
        .arg(keys)
        .arg(args);
    conn.req_packed_command(&cmd).await.unwrap()
}

/// The numbers of a one-call reply.
fn numbers(reply: &Value) -> Vec<i64> {
    match reply {
        Value::Array(calls) => match calls.as_slice() {
            [Value::Array(items)] => items
                .iter()
                .map(|v| match v {
                    Value::Int(n) => *n,
                    other => panic!("not a number: {other:?}"),
                })
                .collect(),
            other => panic!("not one call's reply: {other:?}"),
        },
        other => panic!("not an array: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_without_its_record_fits_the_set_holding_its_lease() {
    let server = RedisServer::start();
    let mut admin = admin(&server.url()).await;
    let set = format!("limit:inflight:{}:lease", tollgate_test_support::unique());
    let cutoff = cutoff();
    let (mine, other) = (format!("{:032x}", 0xa1u8), format!("{:032x}", 0xb2u8));
    // No record (`m` 0, hash 0): a reservation of one lease of at most 1.
    let reserve = |id: &str| {
        [
            "0".to_owned(),
            "r1.0".into(),
            cutoff.clone(),
            format!("60000:1:1#{id}"),
        ]
    };
    let first = numbers(
        &check(
            &mut admin,
            &[&set],
            &reserve(&mine).each_ref().map(String::as_str),
        )
        .await,
    );
    assert_eq!((first[0], first[1], first[3]), (1, 1, 0), "{first:?}");
    assert!((59_000..=60_000).contains(&first[2]), "{first:?}");
    // Sent again, unrecorded: the set holds its lease, so it fits, and
    // holds one lease still.
    let again = numbers(
        &check(
            &mut admin,
            &[&set],
            &reserve(&mine).each_ref().map(String::as_str),
        )
        .await,
    );
    assert_eq!((again[0], again[1]), (1, 1), "{again:?}");
    // Another call does not fit.
    let refused = numbers(
        &check(
            &mut admin,
            &[&set],
            &reserve(&other).each_ref().map(String::as_str),
        )
        .await,
    );
    assert_eq!((refused[0], refused[1]), (0, 1), "{refused:?}");
    let members: Vec<String> = redis::cmd("ZRANGE")
        .arg(&set)
        .arg(0)
        .arg(-1)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(members, [mine]);
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&set)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!((1..=60_000).contains(&ttl), "{ttl}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_lease_argument_makes_the_call_write_nothing() {
    let server = RedisServer::start();
    let mut admin = admin(&server.url()).await;
    let set = format!("limit:inflight:{}:lease", tollgate_test_support::unique());
    let cutoff = cutoff();
    let id = format!("{:032x}", 7u8);
    for bad in [
        format!("60000:2:1#{id}"),
        format!("60000:1:1#{}", &id[1..]),
        format!("60000:1:1#{id}0"),
        format!("60000:1:1#{}g", &id[1..]),
        format!("60000:1:1@5#{id}"),
        format!("60000:1:1~1/2#{id}"),
        format!("60000:1#{id}"),
        "60000:1:1#".to_owned(),
    ] {
        let reply = check(&mut admin, &[&set], &["0", "r1.0", &cutoff, &bad]).await;
        assert!(
            matches!(&reply, Value::ServerError(e) if e.details() == Some("tollgate: a malformed call")),
            "{bad}: {reply:?}"
        );
        let exists: i64 = redis::cmd("EXISTS")
            .arg(&set)
            .query_async(&mut admin)
            .await
            .unwrap();
        assert_eq!(exists, 0, "{bad}: a write");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_before_a_full_counter_is_neither_taken_nor_taken_back() {
    let server = RedisServer::start();
    let mut admin = admin(&server.url()).await;
    let id = tollgate_test_support::unique();
    let (set, full) = (
        format!("limit:inflight:{id}:lease"),
        format!("limit:ask:{id}:1"),
    );
    let _: () = redis::cmd("SET")
        .arg(&full)
        .arg("1")
        .query_async(&mut admin)
        .await
        .unwrap();
    let cutoff = cutoff();
    let lease = format!("60000:1:5#{:032x}", 0xc3u8);
    // The set fits, then the counter's INCRBY goes past its max of 1: the
    // fast path takes its increment back (passing the set over) and the
    // exact path refuses the whole call.
    let reply = check(
        &mut admin,
        &[&set, &full],
        &["0", "r2.0", &cutoff, &lease, "60000:1:1"],
    )
    .await;
    assert_eq!(numbers(&reply), [0, 0, 1, 0, 0], "{reply:?}");
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&set)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(exists, 0, "a refused call took a lease");
    let count: String = redis::cmd("GET")
        .arg(&full)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(count, "1");
}
