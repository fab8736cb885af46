//! Counter keys: the documented format, and isolation of principals.

use std::time::Duration;

use proptest::collection::vec;
use proptest::prelude::*;
use tollgate_core::{CounterStore, ManualClock, Visitor, Window};

use crate::Harness;
use crate::support::{block_on, clock, deadline, limiter, ok, rule, runner, unique};

/// 2025-11-29T00:00:00Z is UTC day 20421.
const DAY_20421: u64 = 20_421 * 86_400;

/// The documented key format, byte for byte, and the store keeps that exact key.
pub async fn golden_key_vectors<H: Harness>(harness: &H) {
    let ask = rule("ask", 15, Window::DAY, 2);
    let vectors: [(&[&str], &str); 7] = [
        (&["docs", "203.0.113.9"], "limit:ask:docs:203.0.113.9:20421"),
        (
            &["docs", "2001:db8:0:1::/64"],
            "limit:ask:docs:2001:db8:0:1::/64:20421",
        ),
        (&["docs", "local"], "limit:ask:docs:local:20421"),
        (&["a:b", "c"], "limit:ask:a%3Ab:c:20421"),
        (&["100%", "x%y:z"], "limit:ask:100%25:x%y:z:20421"),
        (&["", ""], "limit:ask:::20421"),
        (&["é", "ü"], "limit:ask:é:ü:20421"),
    ];
    for (parts, expected) in vectors {
        let limit = ok(ask.limit(parts), "limit");
        assert_eq!(
            limit.counter_key(Window::DAY.index(DAY_20421 + 5)),
            expected
        );
    }
    let all = ok(
        rule("ask-all", 5_000, Window::DAY, 0).limit::<&str>(&[]),
        "limit",
    );
    assert_eq!(all.counter_key(20_421), "limit:ask-all:20421");
    let github = ok(
        rule("github", 60, Window::HOUR, 1).limit(&["acme"]),
        "limit",
    );
    assert_eq!(
        github.counter_key(Window::HOUR.index(DAY_20421 + 3_599)),
        "limit:github:acme:490104"
    );
    let v6 = ok(Visitor::parse("2001:0DB8:0:1:ffff::9"), "visitor");
    let limit = ok(ask.limit(&["docs", v6.as_str()]), "limit");
    assert_eq!(limit.key(), "ask:docs:2001:db8:0:1::/64");

    // The store keeps the key exactly as given: the counter is found under it.
    let clock = ManualClock::new(Duration::from_secs(DAY_20421 + 5));
    let store = harness.open().await;
    let project = format!("docs-{}", unique());
    let limiter = limiter(harness.open().await, &clock);
    let limit = ok(ask.limit(&[project.as_str(), "2001:db8:0:1::/64"]), "limit");
    ok(limiter.count(&[limit]).await, "count");
    let key = format!("limit:ask:{project}:2001:db8:0:1::/64:20421");
    assert_eq!(ok(store.get(&[key], deadline()).await, "get"), [1]);
}

/// Bytes that make keys collide when a format is careless: separators,
/// escapes, case, spaces, NUL, normalisation look-alikes.
fn part() -> impl Strategy<Value = String> {
    let atoms = [
        ":", "%", "3A", "%3A", "25", "a", "A", "", " ", "é", "e\u{301}", "\u{0}", "\n", "ß", "SS",
        "/", "*",
    ];
    vec(proptest::sample::select(atoms.to_vec()), 0..5).prop_map(|atoms| atoms.concat())
}

/// Two different principals never share a counter, whatever bytes their
/// identifiers hold: distinct parts give distinct keys, and the store keeps
/// their counts apart.
pub async fn principals_never_share_a_counter<H: Harness>(harness: &H) {
    // A rule takes a fixed number of parts; rules of 1 to 4 parts here.
    let rules: Vec<_> = (0..5)
        .map(|n| rule("iso", 1_000, Window::HOUR, n))
        .collect();
    let pairs = (1..4usize)
        .prop_flat_map(|n| (vec(part(), n), vec(part(), n)))
        .prop_filter("distinct", |(a, b)| a != b);
    let keys = runner(harness, 4_096).run(&pairs, |(a, b)| {
        let ka = rules[a.len()]
            .limit(&a)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let kb = rules[b.len()]
            .limit(&b)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_ne!(ka.key(), kb.key());
        Ok(())
    });
    ok(keys, "distinct parts give distinct keys");

    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let stored = runner(harness, 32).run(&pairs, |(a, b)| {
        let run = unique();
        let a: Vec<String> = [run.clone()].into_iter().chain(a).collect();
        let b: Vec<String> = [run].into_iter().chain(b).collect();
        let la = rules[a.len()]
            .limit(&a)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let lb = rules[b.len()]
            .limit(&b)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        for _ in 0..2 {
            block_on(limiter.count(std::slice::from_ref(&la)))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
        }
        let seen = block_on(limiter.count(std::slice::from_ref(&lb)))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(seen.usage()[0].remaining(), 999, "b saw a's calls");
        let left = block_on(limiter.remaining(&[la, lb]))
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(left[0].remaining(), 998);
        prop_assert_eq!(left[1].remaining(), 999);
        Ok(())
    });
    ok(stored, "the store keeps principals apart");
}
