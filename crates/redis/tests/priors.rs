//! Priors in `CHECK`'s own terms, against a real server: the argument
//! syntax (`~part/whole`, `~part/whole=count`) and where a prior's key
//! goes among `KEYS`, a malformed prior refused, a prior that holds
//! something other than a count answered as such a counter is; and on
//! Redis Cluster, priors in other slots read first, those in their
//! counter's slot read by the script. (What a prior means, exactness at
//! 2^53 included, is the conformance suite's.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;
use support::{admin, run, stored};
use tollgate_core::{CheckId, Counter, CounterStore, Prior};
use tollgate_redis::RedisClusterStore;
use tollgate_test_support::redis_cluster::RedisCluster;
use tollgate_test_support::redis_server::RedisServer;

fn cutoff() -> String {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    (now.as_millis() + 10_000).to_string()
}

/// An `EVAL` of `CHECK` on `keys` with `args`.
fn eval(keys: &[&str], args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(tollgate_redis::scripts::CHECK)
        .arg(keys.len())
        .arg(keys)
        .arg(args);
    cmd
}

/// The reply to `cmd` as the server sent it, error replies inside arrays
/// included.
async fn raw(conn: &mut redis::aio::MultiplexedConnection, cmd: redis::Cmd) -> Value {
    use redis::aio::ConnectionLike;
    conn.req_packed_command(&cmd).await.unwrap()
}

fn is_malformed(reply: &Value) -> bool {
    matches!(reply, Value::ServerError(e) if e.details() == Some("tollgate: a malformed call"))
}

/// A prior follows a count's or reservation's counter argument as
/// `~part/whole` (its key among the call's) or `~part/whole=count`: any
/// other prior, one on a refund or give-back, or keys that do not match
/// the keyed priors make the whole script call write nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_prior_makes_the_whole_script_call_write_nothing() {
    let server = RedisServer::start();
    let mut admin = admin(&server.url()).await;
    let id = tollgate_test_support::unique();
    let [a, b, p] = ["a", "b", "p"].map(|k| format!("limit:{k}:{id}:1"));
    run(&mut admin, &["SET", &p, "10"]).await;
    let cutoff = cutoff();
    let c = cutoff.as_str();
    let three: &[&str] = &[&a, &b, &p];
    let two: &[&str] = &[&a, &b];
    for (keys, op, bad) in [
        (three, "c1.0", "60000:2~"),
        (three, "c1.0", "60000:2~1"),
        (three, "c1.0", "60000:2~1/0"),
        (three, "c1.0", "60000:2~2/1"),
        (three, "c1.0", "60000:2~1/31622401"),
        (three, "c1.0", "60000:2~31622401/31622401"),
        (three, "c1.0", "60000:2~01/2"),
        (three, "c1.0", "60000:2~1/02"),
        (three, "c1.0", "60000:2~-1/2"),
        (three, "c1.0", "60000:2~1/2/3"),
        (three, "c1.0", "60000:2~a/b"),
        (three, "c1.0", "60000:2~1/2~1/2"),
        (three, "c1.0", "60000:2~1/2@5"),
        (three, "c1.0", "~1/2"),
        (three, "r1.0", "60000:2~1/2"),
        (three, "r1.0", "60000:2:9~1/2@5"),
        (two, "c1.0", "60000:2~1/2="),
        (two, "c1.0", "60000:2~1/2=01"),
        (two, "c1.0", "60000:2~1/2=-1"),
        (two, "c1.0", "60000:2~1/2=9007199254740993"),
        (two, "c1.0", "60000:2~1/2=10000000000000000"),
        (two, "c1.0", "60000:2~1/2=1e3"),
        (two, "r1.0", "60000:2:9~1/2=3=4"),
        // A prior on a refund or a give-back.
        (three, "f1.0", "2~1/2"),
        (two, "f1.0", "2~1/2=3"),
        (two, "g1.0", "2~1/2=3"),
        // A keyed prior without its key, a key without a keyed prior.
        (two, "c1.0", "60000:2~1/2"),
        (three, "c1.0", "60000:2~1/2=3"),
        (three, "c1.0", "60000:2"),
    ] {
        // A well-formed count of `a` first, then the bad call on `b`.
        let args = ["0", "c1.0", c, "60000:2", op, c, bad];
        let reply = raw(&mut admin, eval(keys, &args)).await;
        assert!(is_malformed(&reply), "{op} {bad}: {reply:?}");
        assert_eq!(stored(&mut admin, &a).await, None, "{op} {bad}: a write");
        assert_eq!(stored(&mut admin, &b).await, None, "{op} {bad}: a write");
        assert_eq!(stored(&mut admin, &p).await.as_deref(), Some("10"));
    }
    // The bounds themselves are well formed (`a`'s prior's key after `a`).
    let args = [
        "0",
        "c1.0",
        c,
        "60000:2~31622400/31622400",
        "r1.0",
        c,
        "60000:2:9~0/1=9007199254740992",
    ];
    let keys: &[&str] = &[&a, &p, &b];
    let replies: Vec<Vec<u64>> = eval(keys, &args).query_async(&mut admin).await.unwrap();
    assert_eq!(replies, [vec![2, 10], vec![1, 2, 9_007_199_254_740_992]]);
}

/// Each call's keyed priors follow its own counters' keys, in counter
/// order, before the next call's; a given count takes no key. The script
/// reads them (0 when absent) without writing them or their lifetimes,
/// weighs them into a reservation's maxes, answers them after the counts
/// and records them: a retry answers what the first attempt read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_calls_priors_follow_its_counters_and_are_answered_and_recorded() {
    let server = RedisServer::start();
    let mut admin = admin(&server.url()).await;
    let id = tollgate_test_support::unique();
    let [x, y, z, px, pz, w, pw] =
        ["x", "y", "z", "px", "pz", "w", "pw"].map(|k| format!("limit:{k}:{id}:1"));
    let hash = format!("{}780.{id}", tollgate_redis::RECORD_PREFIX);
    run(&mut admin, &["SET", &px, "10", "PX", "50000"]).await;
    run(&mut admin, &["SET", &pz, "3"]).await;
    let cutoff = cutoff();
    let c = cutoff.as_str();
    let keys: [&str; 8] = [&x, &y, &z, &px, &pz, &w, &pw, &hash];
    // x within 6 less 10/2, y within 8 less 7 (given), z within 4 less 3;
    // then a count of w, whose prior is absent.
    let args = [
        "1",
        "1660",
        "2",
        "first",
        "second",
        "r3.1",
        c,
        "60000:1:6~1/2",
        "60000:1:8~1/1=7",
        "60000:1:4~1/1",
        "c1.1",
        c,
        "60000:1~5/9",
    ];
    let replies: Vec<Vec<u64>> = eval(&keys, &args).query_async(&mut admin).await.unwrap();
    assert_eq!(replies, [vec![1, 1, 1, 1, 10, 7, 3], vec![1, 0]]);
    assert_eq!(stored(&mut admin, &px).await.as_deref(), Some("10"));
    assert_eq!(stored(&mut admin, &pw).await, None, "an absent prior made");
    let Value::Int(left) = run(&mut admin, &["PTTL", &px]).await else {
        panic!("PTTL");
    };
    assert!((40_000..=50_000).contains(&left), "{left}");
    assert_eq!(run(&mut admin, &["PTTL", &pz]).await, Value::Int(-1));
    let recorded = run(&mut admin, &["HMGET", &hash, "first", "second"]).await;
    let field = |text: &str| Value::BulkString(text.as_bytes().to_vec());
    assert_eq!(
        recorded,
        Value::Array(vec![field("1,1,1,1,10,7,3"), field("1,0")])
    );
    // The priors move; a retry answers what was read, and applies nothing.
    run(&mut admin, &["SET", &px, "2"]).await;
    run(&mut admin, &["SET", &pw, "4"]).await;
    let again: Vec<Vec<u64>> = eval(&keys, &args).query_async(&mut admin).await.unwrap();
    assert_eq!(again, replies);
    assert_eq!(stored(&mut admin, &w).await.as_deref(), Some("1"));
    // A new reservation: z's 1 + 1 is over 4 less 3 (x's would fit 6
    // less 2/2 now), so none is added.
    let args = [
        "0",
        "r3.0",
        c,
        "60000:1:6~1/2",
        "60000:1:8~1/1=7",
        "60000:1:4~1/1",
        "c1.0",
        c,
        "60000:1~5/9",
    ];
    let replies: Vec<Vec<u64>> = eval(&keys[..7], &args)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(replies, [vec![0, 1, 1, 1, 2, 7, 3], vec![2, 4]]);
    for key in [&x, &y, &z] {
        assert_eq!(stored(&mut admin, key).await.as_deref(), Some("1"), "{key}");
    }
}

/// A prior that holds text, a number past 2^53 or another type is
/// answered as a counter holding it is: an error reply for its call,
/// nothing written by it, the other calls of the script call applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prior_holding_something_else_than_a_count_refuses_its_call() {
    let server = RedisServer::start();
    let mut admin = admin(&server.url()).await;
    let id = tollgate_test_support::unique();
    let [a, b, p] = ["a", "b", "p"].map(|k| format!("limit:{k}:{id}:1"));
    let cutoff = cutoff();
    let c = cutoff.as_str();
    let p = p.as_str();
    for (set, expected) in [
        (&["SET", p, "ten"][..], "counter is not an integer"),
        (&["SET", p, "010"][..], "counter is not an integer"),
        (&["SET", p, "9007199254740993"][..], "counter is over 2^53"),
        (
            &["HSET", p, "f", "1"][..],
            "Operation against a key holding",
        ),
    ] {
        run(&mut admin, &["DEL", p]).await;
        run(&mut admin, set).await;
        for bad in ["c1.0", "r1.0"] {
            let arg = if bad == "c1.0" {
                "60000:1~1/2"
            } else {
                "60000:1:9~1/2"
            };
            let args = ["0", "c1.0", c, "60000:1", bad, c, arg];
            let reply = raw(&mut admin, eval(&[&a, &b, p], &args)).await;
            let Value::Array(replies) = &reply else {
                panic!("{set:?}: {reply:?}");
            };
            assert_eq!(replies[0], Value::Array(vec![Value::Int(1)]), "{set:?}");
            assert!(
                matches!(&replies[1], Value::ServerError(e)
                    if e.details().is_some_and(|d| d.contains(expected))),
                "{set:?} {bad}: {reply:?}"
            );
            assert_eq!(stored(&mut admin, &b).await, None, "{set:?} {bad}: written");
            run(&mut admin, &["DEL", &a]).await;
        }
    }
}

fn counter(key: String, cost: u64, max: u64, prior: Option<(&str, u64, u64)>) -> Counter {
    Counter {
        key,
        ttl: Duration::from_secs(600),
        cost,
        max,
        floor: 0,
        prior: prior.map(|(key, part, whole)| Prior {
            key: key.to_owned(),
            part,
            whole,
        }),
        lease: false,
    }
}

/// On Redis Cluster a prior in another slot than its counter is read
/// first (a value that is not a count refuses the call, as the script
/// would), and one in its counter's slot by the script itself (so a key of
/// another type, which `MGET` would read as absent, is refused too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_priors_are_read_first_or_by_the_script_in_their_counters_slot() {
    let cluster = tokio::task::spawn_blocking(RedisCluster::shared)
        .await
        .unwrap();
    let mut raw = support::cluster::raw(cluster).await;
    let store = RedisClusterStore::open(&cluster.url()).unwrap();
    let id = tollgate_test_support::unique();
    let deadline = support::cluster::deadline;
    // `near`'s prior shares its slot (a tag); `far`'s is found in another.
    let near = format!("limit:near:{{{id}}}:2");
    let near_prior = format!("limit:near:{{{id}}}:1");
    let far = format!("limit:far:{id}:2");
    let far_slot = support::cluster::slot(&mut raw, &far).await;
    let mut far_prior = String::new();
    for i in 0..1_000 {
        let key = format!("limit:far:{id}:{i}:1");
        if support::cluster::slot(&mut raw, &key).await != far_slot {
            far_prior = key;
            break;
        }
    }
    let set = |key: &str, value: &str| {
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(value);
        cmd
    };
    let _: () = set(&near_prior, "8").query_async(&mut raw).await.unwrap();
    let _: () = set(&far_prior, "6").query_async(&mut raw).await.unwrap();
    let batch = |cost| {
        [
            counter(far.clone(), cost, 10, Some((&far_prior, 1, 2))),
            counter(near.clone(), cost, 10, Some((&near_prior, 1, 4))),
        ]
    };
    // 10 less 3 and 10 less 2: 7 fits, then 1 more does not.
    let applied = store.reserve(&batch(7), CheckId::new(), deadline()).await;
    assert_eq!(applied.unwrap().counts, [7, 7, 6, 8]);
    let refused = store
        .reserve(&batch(1), CheckId::new(), deadline())
        .await
        .unwrap();
    assert_eq!((refused.applied, refused.counts), (false, vec![7, 7, 6, 8]));
    // A retried count answers the priors its first attempt read.
    let (counted, at) = (CheckId::new(), deadline());
    let first = store.count(&batch(1), counted, at).await.unwrap();
    assert_eq!(first, [8, 8, 6, 8]);
    let _: () = set(&far_prior, "0").query_async(&mut raw).await.unwrap();
    let _: () = set(&near_prior, "0").query_async(&mut raw).await.unwrap();
    assert_eq!(store.count(&batch(1), counted, at).await.unwrap(), first);
    // Something else than a count in either prior refuses the call.
    let _: () = set(&far_prior, "ten").query_async(&mut raw).await.unwrap();
    let err = store.count(&batch(1), CheckId::new(), deadline()).await;
    assert_eq!(err.map_err(|e| e.kind()), Err("backend"), "far");
    let _: () = set(&far_prior, "0").query_async(&mut raw).await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&near_prior)
        .query_async(&mut raw)
        .await
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(&near_prior)
        .arg("f")
        .arg("1")
        .query_async(&mut raw)
        .await
        .unwrap();
    let err = store.reserve(&batch(1), CheckId::new(), deadline()).await;
    assert_eq!(err.map_err(|e| e.kind()), Err("backend"), "near");
    assert_eq!(support::cluster::stored(&mut raw, &near).await, 8);
    assert_eq!(support::cluster::stored(&mut raw, &far).await, 8);
}
