//! Costs, saturation and the deadline check, against a real server: counts
//! stay exact up to 2^53 in Lua's doubles, never exceed 2^53, a reservation
//! never over-admits, and a script past its deadline writes nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::Value;
use support::{admin, counter, deadline, run, stored};
use tollgate_core::{
    CheckId, Claim, CounterStore, Deadline, MAX_COUNT, MAX_MAX, MarkStore, StoreError,
};
use tollgate_redis::RedisStore;
use tollgate_test_support::redis_server::RedisServer;

const TOP: u64 = MAX_COUNT; // 2^53

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_near_two_to_the_53_are_exact_and_saturate() {
    let server = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let mut admin = admin(&server.url()).await;

    let mut big = counter("big", MAX_MAX, MAX_MAX);
    assert_eq!(
        store
            .count(std::slice::from_ref(&big), CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![MAX_MAX]
    );
    assert_eq!(
        stored(&mut admin, &big.key).await.as_deref(),
        Some("9007199254740991")
    );
    big.cost = 1;
    assert_eq!(
        store
            .count(std::slice::from_ref(&big), CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![TOP]
    );
    big.cost = MAX_MAX;
    assert_eq!(
        store
            .count(std::slice::from_ref(&big), CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![TOP]
    );
    assert_eq!(
        stored(&mut admin, &big.key).await.as_deref(),
        Some("9007199254740992")
    );

    // Odd counts above 2^52 (spacing 1 in a double) stay exact.
    for (start, cost, expected) in [
        (TOP - 3, 2, TOP - 1),
        (TOP - 3, 1, TOP - 2),
        (TOP - 2, 1, TOP - 1),
        (TOP - 1, 1, TOP),
        (TOP - 1, 2, TOP),
        (TOP - 1, TOP, TOP),
        (TOP, TOP, TOP),
        ((1 << 52) + 1, (1 << 52) - 2, TOP - 1),
    ] {
        let mut c = counter("near", cost, MAX_MAX);
        run(&mut admin, &["SET", &c.key, &start.to_string()]).await;
        let counts = store
            .count(std::slice::from_ref(&c), CheckId::new(), deadline())
            .await
            .unwrap();
        assert_eq!(counts, vec![expected], "{start} + {cost}");
        assert_eq!(
            stored(&mut admin, &c.key).await,
            Some(expected.to_string()),
            "{start} + {cost} stored"
        );
        // And back: a refund from there is exact too.
        c.cost = 1;
        let back = store
            .refund(std::slice::from_ref(&c), CheckId::new(), deadline())
            .await
            .unwrap();
        assert_eq!(back, vec![expected - 1], "{expected} - 1");
        assert_eq!(
            stored(&mut admin, &c.key).await,
            Some((expected - 1).to_string())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_near_the_largest_max_never_over_admit() {
    let server = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let mut admin = admin(&server.url()).await;

    let mut c = counter("max", MAX_MAX, MAX_MAX);
    let r = store
        .reserve(std::slice::from_ref(&c), CheckId::new(), deadline())
        .await
        .unwrap();
    assert!(r.applied && r.counts == vec![MAX_MAX], "{r:?}");
    c.cost = 1;
    let r = store
        .reserve(std::slice::from_ref(&c), CheckId::new(), deadline())
        .await
        .unwrap();
    assert!(
        !r.applied && r.counts == vec![MAX_MAX],
        "one past the max: {r:?}"
    );
    assert_eq!(
        stored(&mut admin, &c.key).await.as_deref(),
        Some("9007199254740991")
    );

    // A cost above max never fits, even on an empty counter.
    let over = counter("over", MAX_MAX, MAX_MAX - 1);
    let r = store
        .reserve(std::slice::from_ref(&over), CheckId::new(), deadline())
        .await
        .unwrap();
    assert!(!r.applied && r.counts == vec![0], "{r:?}");
    let top = counter("top", TOP, MAX_MAX);
    let r = store
        .reserve(std::slice::from_ref(&top), CheckId::new(), deadline())
        .await
        .unwrap();
    assert!(!r.applied, "a cost of 2^53 fit a max of 2^53 - 1");
    assert_eq!(stored(&mut admin, &over.key).await, None);
    assert_eq!(stored(&mut admin, &top.key).await, None);

    // count + cost exactly at max fits; one more does not; where the true
    // sum is 2^53 + 1 (not a double), it must not round down to fit.
    for (start, cost, max, fits) in [
        (TOP - 3, 2, MAX_MAX, true),
        (TOP - 3, 3, MAX_MAX, false),
        (TOP - 2, 1, MAX_MAX, true),
        (TOP - 1, 1, MAX_MAX, false),
        (TOP, 1, MAX_MAX, false),
        (1, TOP, MAX_MAX, false),
        (3, MAX_MAX - 3, MAX_MAX, true),
        (3, MAX_MAX - 2, MAX_MAX, false),
        (MAX_MAX - 10, 10, MAX_MAX - 1, false),
    ] {
        let fine = counter("fine", 1, 10);
        let c = counter("edge", cost, max);
        run(&mut admin, &["SET", &c.key, &start.to_string()]).await;
        let r = store
            .reserve(&[fine.clone(), c.clone()], CheckId::new(), deadline())
            .await
            .unwrap();
        assert_eq!(r.applied, fits, "{start} + {cost} <= {max}: {r:?}");
        let expected = if fits { start + cost } else { start };
        assert_eq!(
            r.counts,
            vec![u64::from(fits), expected],
            "{start} + {cost}"
        );
        assert_eq!(stored(&mut admin, &c.key).await, Some(expected.to_string()));
        let first = stored(&mut admin, &fine.key).await;
        assert_eq!(first.as_deref(), fits.then_some("1"), "all or nothing");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refund_floors_at_zero_keeps_the_lifetime_and_leaves_absent_counters_absent() {
    let server = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let mut admin = admin(&server.url()).await;
    let mut c = counter("refund", 5, 100);
    store
        .count(std::slice::from_ref(&c), CheckId::new(), deadline())
        .await
        .unwrap();
    run(&mut admin, &["PEXPIRE", &c.key, "5000"]).await;
    c.cost = 3;
    assert_eq!(
        store
            .refund(std::slice::from_ref(&c), CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![2]
    );
    let Value::Int(ttl) = run(&mut admin, &["PTTL", &c.key]).await else {
        panic!("PTTL");
    };
    assert!(
        (1..=5_000).contains(&ttl),
        "the refund changed the lifetime: {ttl}"
    );
    assert_eq!(
        store
            .refund(std::slice::from_ref(&c), CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![0]
    );
    assert_eq!(stored(&mut admin, &c.key).await.as_deref(), Some("0"));
    let absent = counter("absent", 3, 100);
    assert_eq!(
        store
            .refund(std::slice::from_ref(&absent), CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![0]
    );
    assert_eq!(
        run(&mut admin, &["EXISTS", &absent.key]).await,
        Value::Int(0)
    );
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Runs `script` raw with `keys` and `args`, where the argument `CUTOFF`
/// is `cutoff`. A counter call ([`CHECK`](tollgate_redis::scripts::CHECK))
/// answers its one call's reply as an array of one: this is that reply.
async fn raw_eval(
    conn: &mut redis::aio::MultiplexedConnection,
    script: &str,
    keys: &[&str],
    cutoff: u64,
    args: &[&str],
) -> Value {
    let cutoff = cutoff.to_string();
    let args: Vec<&str> = args
        .iter()
        .map(|arg| {
            if *arg == "CUTOFF" {
                cutoff.as_str()
            } else {
                arg
            }
        })
        .collect();
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script).arg(keys.len()).arg(keys).arg(args);
    let reply = cmd.query_async(conn).await.unwrap();
    match reply {
        Value::Array(mut calls) if script == tollgate_redis::scripts::CHECK => {
            assert_eq!(calls.len(), 1, "one call, one reply");
            calls.remove(0)
        }
        reply => reply,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_write_script_past_its_deadline_writes_nothing() {
    let server = RedisServer::start();
    let mut admin = admin(&server.url()).await;
    let id = tollgate_test_support::unique();
    let (a, b) = (format!("limit:a:{id}:1"), format!("limit:b:{id}:1"));
    let mark = format!("github-delivery:{id}");
    let record = format!("limit:#{id}");
    run(&mut admin, &["SET", &b, "4"]).await;
    run(&mut admin, &["SET", &mark, "token"]).await;
    let deadline_reply = Value::SimpleString("DEADLINE".into());
    let passed = now_millis() - 1;
    let cases: [(&str, &str, Vec<&str>, Vec<&str>); 7] = [
        (
            "count",
            tollgate_redis::scripts::CHECK,
            vec![&a, &b, &record],
            vec![
                "1", "1440", "1", "id-c", "c2.1", "CUTOFF", "60000:1", "60000:1",
            ],
        ),
        (
            "reserve",
            tollgate_redis::scripts::CHECK,
            vec![&a, &b, &record],
            vec![
                "1",
                "1440",
                "1",
                "id-r",
                "r2.1",
                "CUTOFF",
                "60000:1:10",
                "60000:1:10",
            ],
        ),
        (
            "refund",
            tollgate_redis::scripts::CHECK,
            vec![&a, &b, &record],
            vec!["1", "1440", "1", "id-f", "f2.1", "CUTOFF", "1", "1"],
        ),
        (
            "delete",
            tollgate_redis::scripts::DELETE,
            vec![&b],
            vec!["CUTOFF"],
        ),
        (
            "claim",
            tollgate_redis::scripts::CLAIM,
            vec![&a],
            vec!["CUTOFF", "t", "60000"],
        ),
        (
            "finish",
            tollgate_redis::scripts::FINISH,
            vec![&mark],
            vec!["CUTOFF", "token", "60000", "done"],
        ),
        (
            "release",
            tollgate_redis::scripts::RELEASE,
            vec![&mark],
            vec!["CUTOFF", "token"],
        ),
    ];
    for (what, script, keys, args) in &cases {
        let reply = raw_eval(&mut admin, script, keys, passed, args).await;
        assert_eq!(reply, deadline_reply, "{what} past its deadline");
        assert_eq!(stored(&mut admin, &a).await, None, "{what} wrote");
        assert_eq!(stored(&mut admin, &record).await, None, "{what} recorded");
        assert_eq!(
            stored(&mut admin, &b).await.as_deref(),
            Some("4"),
            "{what} wrote"
        );
        assert_eq!(
            stored(&mut admin, &mark).await.as_deref(),
            Some("token"),
            "{what} wrote"
        );
    }
    // The same calls a second ahead of their deadline do write.
    let ahead = now_millis() + 1_000;
    for (what, script, keys, args) in &cases {
        let reply = raw_eval(&mut admin, script, keys, ahead, args).await;
        assert_ne!(reply, deadline_reply, "{what} ahead of its deadline");
    }
    assert_eq!(
        stored(&mut admin, &mark).await.as_deref(),
        Some("done"),
        "finish ran"
    );
    assert_eq!(stored(&mut admin, &b).await, None, "delete ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_call_past_its_deadline_is_a_timeout_and_sends_nothing() {
    let server = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let mut admin = admin(&server.url()).await;
    let c = counter("late", 1, 10);
    store
        .count(std::slice::from_ref(&c), CheckId::new(), deadline())
        .await
        .unwrap();
    let passed = Deadline::after(Duration::ZERO);
    let mark = format!("github-delivery:{}", tollgate_test_support::unique());
    let errors: Vec<StoreError> = vec![
        store
            .count(std::slice::from_ref(&c), CheckId::new(), passed)
            .await
            .unwrap_err(),
        store
            .reserve(std::slice::from_ref(&c), CheckId::new(), passed)
            .await
            .unwrap_err(),
        store
            .refund(std::slice::from_ref(&c), CheckId::new(), passed)
            .await
            .unwrap_err(),
        store.delete(&c.key, passed).await.unwrap_err(),
        store
            .claim(&mark, "t", Duration::from_secs(5), passed)
            .await
            .unwrap_err(),
    ];
    for err in errors {
        assert!(matches!(err, StoreError::Timeout(_)), "{err:?}");
        assert!(err.is_transient());
    }
    assert_eq!(stored(&mut admin, &c.key).await.as_deref(), Some("1"));
    assert_eq!(stored(&mut admin, &mark).await, None);
    assert_eq!(
        store
            .claim(&mark, "t", Duration::from_secs(5), deadline())
            .await
            .unwrap(),
        Claim::Acquired
    );
}

/// A shadow rule's max is 2^53, where a double no longer tells 2^53 + 1
/// from 2^53: a reservation one past it is refused, nothing written, and
/// one that reaches it exactly is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_against_a_max_of_2_pow_53_is_exact() {
    let server = RedisServer::start();
    let store = RedisStore::open(&server.url()).unwrap();
    let mut admin = admin(&server.url()).await;
    let mut top = counter("top-max", 5, TOP);
    run(&mut admin, &["SET", &top.key, "9007199254740988"]).await;
    let over = store
        .reserve(std::slice::from_ref(&top), CheckId::new(), deadline())
        .await
        .unwrap();
    assert!(!over.applied, "2^53 - 4 + 5 is over a max of 2^53");
    assert_eq!(over.counts, vec![TOP - 4]);
    assert_eq!(
        stored(&mut admin, &top.key).await.as_deref(),
        Some("9007199254740988")
    );
    top.cost = 4;
    let fits = store
        .reserve(std::slice::from_ref(&top), CheckId::new(), deadline())
        .await
        .unwrap();
    assert!(fits.applied, "2^53 - 4 + 4 fits a max of 2^53");
    assert_eq!(fits.counts, vec![TOP]);
    assert_eq!(
        stored(&mut admin, &top.key).await.as_deref(),
        Some("9007199254740992")
    );
}

/// A script call with any call or hash not well formed (an unknown op, a
/// counter argument of another op, a counter or id missing, a hash kept for
/// no whole number of ms) applies nothing and answers one error, even when
/// the calls before it are well formed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_call_makes_the_whole_script_call_write_nothing() {
    let server = RedisServer::start();
    let mut admin = admin(&server.url()).await;
    let id = tollgate_test_support::unique();
    let (a, b) = (format!("limit:a:{id}:1"), format!("limit:b:{id}:1"));
    let hash = format!("{}780.{id}", tollgate_redis::RECORD_PREFIX);
    let cutoff = (now_millis() + 10_000).to_string();
    let eval = |keys: &[&str], args: &[&str]| {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(tollgate_redis::scripts::CHECK)
            .arg(keys.len())
            .arg(keys)
            .arg(args);
        cmd
    };
    let c = cutoff.as_str();
    // Each after a well-formed count of `a` (keys `a`, `b` and the hash):
    // how long the hash is kept, its ids, the malformed call.
    let two: &[&str] = &["i", "j"];
    let cases: [(&str, &str, &[&str], Vec<&str>); 10] = [
        ("an unknown op", "1660", two, vec!["x1.1", c, "60000:2"]),
        (
            "a count's argument to a reservation",
            "1660",
            two,
            vec!["r1.1", c, "60000:2"],
        ),
        (
            "a reservation's argument to a count",
            "1660",
            two,
            vec!["c1.1", c, "60000:2:9"],
        ),
        ("text for a cost", "1660", two, vec!["c1.1", c, "60000:two"]),
        ("no cutoff", "1660", two, vec!["c1.1", "soon", "60000:2"]),
        ("a counter's argument missing", "1660", two, vec!["c1.1", c]),
        (
            "a hash that is not there",
            "1660",
            two,
            vec!["c1.2", c, "60000:2"],
        ),
        ("an id missing", "1660", &["i"], vec!["c1.1", c, "60000:2"]),
        ("a hash kept 1.5 ms", "1.5", two, vec!["c1.1", c, "60000:2"]),
        ("a hash kept 0 ms", "0", two, vec!["c1.1", c, "60000:2"]),
    ];
    for (what, keep, ids, bad) in &cases {
        let count = ids.len().to_string();
        let mut args = vec!["1", keep, &count];
        args.extend(ids.iter());
        args.extend(["c1.1", c, "60000:2"]);
        args.extend(bad);
        let reply = raw(&mut admin, eval(&[&a, &b, &hash], &args)).await;
        assert!(
            matches!(&reply, Value::ServerError(e) if e.details() == Some("tollgate: a malformed call")),
            "{what}: {reply:?}"
        );
        assert_eq!(
            stored(&mut admin, &a).await,
            None,
            "{what}: the good call wrote"
        );
        assert_eq!(stored(&mut admin, &b).await, None, "{what} wrote");
        assert_eq!(stored(&mut admin, &hash).await, None, "{what} recorded");
    }
    // Well formed, both are applied; a call of no counters is recorded as
    // nothing, and replays so.
    let args = [
        "1", "1660", "3", "i", "j", "e", "c1.1", c, "60000:2", "c1.1", c, "60000:5", "f0.1", c,
    ];
    let once: Vec<Vec<u64>> = eval(&[&a, &b, &hash], &args)
        .query_async(&mut admin)
        .await
        .unwrap();
    let again: Vec<Vec<u64>> = eval(&[&a, &b, &hash], &args)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(
        (once.clone(), again),
        (vec![vec![2], vec![5], vec![]], once)
    );
    assert_eq!(
        stored(&mut admin, &a).await.as_deref(),
        Some("2"),
        "replayed"
    );
    let recorded = run(&mut admin, &["HMGET", &hash, "i", "j", "e"]).await;
    let field = |text: &str| Value::BulkString(text.as_bytes().to_vec());
    assert_eq!(
        recorded,
        Value::Array(vec![field("2"), field("5"), field("")])
    );
}

/// The reply to `cmd` as the server sent it, error replies inside arrays
/// included (a typed query turns those into an error of the whole reply).
async fn raw(conn: &mut redis::aio::MultiplexedConnection, cmd: redis::Cmd) -> Value {
    use redis::aio::ConnectionLike;
    conn.req_packed_command(&cmd).await.unwrap()
}

/// A floor follows a counter's argument as `@` and 1 to 2^53 in digits
/// without a leading zero: any other floor makes the whole script call
/// write nothing; 2^53 itself is one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_floor_makes_the_whole_script_call_write_nothing() {
    let server = RedisServer::start();
    let mut admin = admin(&server.url()).await;
    let id = tollgate_test_support::unique();
    let (a, b) = (format!("limit:a:{id}:1"), format!("limit:b:{id}:1"));
    let cutoff = (now_millis() + 10_000).to_string();
    let c = cutoff.as_str();
    let eval = |args: &[&str]| {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(tollgate_redis::scripts::CHECK)
            .arg(2)
            .arg(&a)
            .arg(&b)
            .arg(args);
        cmd
    };
    for (op, bad) in [
        ("c1.0", "60000:2@0"),
        ("c1.0", "60000:2@007"),
        ("c1.0", "60000:2@"),
        ("c1.0", "60000:2@-5"),
        ("c1.0", "60000:2@1@2"),
        ("c1.0", "@5"),
        ("c1.0", "60000:2@9007199254740993"),
        ("c1.0", "60000:2@10000000000000000"),
        ("c1.0", "60000:2@1e9"),
        ("r1.0", "60000:2@5"),
        ("f1.0", "60000:2@5"),
        ("g1.0", "60000:2:9@5"),
    ] {
        // A well-formed count of `a` first, then the bad call on `b`.
        let args = ["0", "c1.0", c, "60000:2@5", op, c, bad];
        let reply = raw(&mut admin, eval(&args)).await;
        assert!(
            matches!(&reply, Value::ServerError(e) if e.details() == Some("tollgate: a malformed call")),
            "{op} {bad}: {reply:?}"
        );
        assert_eq!(stored(&mut admin, &a).await, None, "{op} {bad}: a write");
        assert_eq!(stored(&mut admin, &b).await, None, "{op} {bad}: a write");
    }
    // Well formed: applied. (`b` twice: counted, then refunded.)
    let args = [
        "0",
        "c1.0",
        c,
        "60000:2@9007199254740992",
        "c1.0",
        c,
        "60000:2@1000",
    ];
    let replies: Vec<Vec<u64>> = eval(&args).query_async(&mut admin).await.unwrap();
    assert_eq!(replies, [vec![TOP], vec![1_002]]);
    let mut refund = redis::cmd("EVAL");
    refund
        .arg(tollgate_redis::scripts::CHECK)
        .arg(1)
        .arg(&b)
        .arg(&["0", "f1.0", c, "1@1000"]);
    let replies: Vec<Vec<u64>> = refund.query_async(&mut admin).await.unwrap();
    assert_eq!(replies, [vec![1_001]]);
}

/// The give-back (`g`) of a floored counter takes the cost back and
/// removes a counter brought back to its floor or below (as the
/// reservation found or made it: it counts as absent does), keeping the
/// lifetime of one above it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_give_back_of_a_floored_counter_removes_it_at_its_floor() {
    let server = RedisServer::start();
    let mut admin = admin(&server.url()).await;
    let id = tollgate_test_support::unique();
    let (made, ahead) = (format!("limit:made:{id}:1"), format!("limit:ahead:{id}:1"));
    let cutoff = (now_millis() + 10_000).to_string();
    let c = cutoff.as_str();
    // A reservation (no record) at the floor 1000: `made` absent, `ahead` past it.
    run(&mut admin, &["SET", &ahead, "1043", "PX", "5000"]).await;
    let reserve = ["0", "r2.0", c, "60000:7:9000@1000", "60000:7:9000@1000"];
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(tollgate_redis::scripts::CHECK)
        .arg(2)
        .arg(&made)
        .arg(&ahead)
        .arg(&reserve);
    let replies: Vec<Vec<u64>> = cmd.query_async(&mut admin).await.unwrap();
    assert_eq!(replies, [vec![1, 1_007, 1_050]]);
    let give_back = ["0", "g2.0", c, "7@1000", "7@1000"];
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(tollgate_redis::scripts::CHECK)
        .arg(2)
        .arg(&made)
        .arg(&ahead)
        .arg(&give_back);
    let replies: Vec<Vec<u64>> = cmd.query_async(&mut admin).await.unwrap();
    assert_eq!(replies, [vec![0, 1_043]]);
    assert_eq!(run(&mut admin, &["EXISTS", &made]).await, Value::Int(0));
    assert_eq!(stored(&mut admin, &ahead).await.as_deref(), Some("1043"));
    let Value::Int(left) = run(&mut admin, &["PTTL", &ahead]).await else {
        panic!("PTTL");
    };
    assert!(
        (59_000..=60_001).contains(&left),
        "the give-back changed the lifetime the reservation gave: {left}"
    );
}
