//! The local cache of full counters, shadow rules and metrics, through the
//! limiter over the memory store.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tollgate_core::Faulty;
use tollgate_core::{
    Clock, Counter, CounterStore, Deadline, Limit, Limiter, Mode, Policy, Reservation, RetryPolicy,
    Rule, StoreError, Window, async_trait,
};
use tollgate_memory::MemoryStore;
use tollgate_test_support::metrics::{DebugValue, counters, labels, recorded, recorded_paused};

/// A clock the tests move (`ManualClock` is behind the core's `test-util`).
#[derive(Clone, Debug)]
struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    fn new(at: Duration) -> ManualClock {
        ManualClock(Arc::new(AtomicU64::new(at.as_secs())))
    }

    fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_secs(), Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_secs(self.0.load(Ordering::SeqCst))
    }
}

/// 2026-06-15T12:00:30Z.
const NOON: u64 = 20_619 * 86_400 + 43_230;

/// The memory store, counting the calls it receives.
type Counted = Faulty<MemoryStore>;

fn rule(name: &str, max: u64, window: Window) -> Rule {
    Rule::new(name, max, window)
        .and_then(|r| r.with_key(&["id"]))
        .unwrap()
}

fn limiter(clock: &ManualClock) -> (Limiter, Arc<Counted>) {
    let store = Arc::new(Faulty::new(MemoryStore::with_clock(clock.clone())));
    (
        Limiter::builder(store.clone()).clock(clock.clone()).build(),
        store,
    )
}

fn calls(store: &Counted) -> usize {
    store.calls()
}

#[tokio::test]
async fn refused_callers_cost_no_round_trip_and_get_the_stores_verdict() {
    let clock = ManualClock::new(Duration::from_secs(NOON));
    let (cached, store) = limiter(&clock);
    let plain = Limiter::builder(MemoryStore::with_clock(clock.clone()))
        .clock(clock.clone())
        .cache(0)
        .build();
    let limits = |who: &str| -> Vec<Limit> {
        vec![
            rule("ask", 3, Window::DAY).limit(&[who]).unwrap(),
            rule("burst", 100, Window::MINUTE).limit(&[who]).unwrap(),
        ]
    };
    for limiter in [&cached, &plain] {
        for _ in 0..3 {
            assert!(limiter.reserve(&limits("a")).await.unwrap().is_allowed());
        }
    }
    let refused = cached.reserve(&limits("a")).await.unwrap();
    assert!(
        !refused.is_allowed() && !refused.is_local(),
        "the store answers first"
    );
    let before = calls(&store);
    for _ in 0..50 {
        let local = cached.reserve(&limits("a")).await.unwrap();
        let stored = plain.reserve(&limits("a")).await.unwrap();
        assert!(local.is_local());
        assert_eq!(local.limited(), stored.limited(), "the same diagnostic");
        assert_eq!(local.usage()[0].remaining(), stored.usage()[0].remaining());
    }
    assert_eq!(calls(&store), before, "refused calls went to the store");
    // Counting always reaches the store; another principal is untouched.
    let counted = cached.count(&limits("a")).await.unwrap();
    assert!(!counted.is_allowed() && !counted.is_local());
    assert_eq!(calls(&store), before + 1);
    assert!(cached.reserve(&limits("b")).await.unwrap().is_allowed());
    // A reset through this limiter clears the entry; the next window starts fresh.
    assert!(cached.reset(&limits("a")[0]).await.unwrap());
    assert!(cached.reserve(&limits("a")).await.unwrap().is_allowed());
    for _ in 0..3 {
        let _ = cached.reserve(&limits("a")).await.unwrap();
    }
    assert!(cached.reserve(&limits("a")).await.unwrap().is_local());
    clock.advance(Duration::from_secs(86_400));
    let next = cached.reserve(&limits("a")).await.unwrap();
    assert!(next.is_allowed() && !next.is_local());
}

#[tokio::test]
async fn a_refund_through_the_limiter_makes_room_again_at_once() {
    let clock = ManualClock::new(Duration::from_secs(NOON));
    let (limiter, _) = limiter(&clock);
    let tokens = rule("tokens", 100, Window::DAY);
    let big = [tokens.limit(&["a"]).unwrap().with_cost(90).unwrap()];
    let spent = limiter.reserve(&big).await.unwrap();
    assert!(spent.is_allowed());
    assert!(!limiter.reserve(&big).await.unwrap().is_allowed());
    assert!(limiter.reserve(&big).await.unwrap().is_local());
    let small = [tokens.limit(&["a"]).unwrap().with_cost(10).unwrap()];
    let fits = limiter.reserve(&small).await.unwrap();
    assert!(
        fits.is_allowed(),
        "a cost that fits is never refused locally"
    );
    limiter.settle(&spent, "tokens", 0).await.unwrap(); // 90 back: 10 of 100 spent
    let again = limiter.reserve(&big).await.unwrap();
    assert!(again.is_allowed(), "the refund cleared the entry");
}

#[tokio::test]
async fn a_shadow_rule_is_counted_and_reported_but_never_refuses() {
    let clock = ManualClock::new(Duration::from_secs(NOON));
    let (limiter, _) = limiter(&clock);
    let dark = rule("dark", 1, Window::DAY).with_shadow(true);
    let real = rule("real", 5, Window::DAY);
    let limits = [dark.limit(&["a"]).unwrap(), real.limit(&["a"]).unwrap()];
    let mut reported = Vec::new();
    for mode in [Mode::Count, Mode::Count, Mode::Reserve, Mode::Reserve] {
        let verdict = limiter
            .check(&limits, mode, Policy::FailClosed)
            .await
            .unwrap();
        assert!(verdict.is_allowed(), "{mode:?}: a shadow rule refused");
        reported.push(verdict.shadow_limited().count());
    }
    assert_eq!(
        reported,
        [0, 1, 1, 1],
        "over its max from the second call on"
    );
    let left = limiter.remaining(&limits).await.unwrap();
    assert_eq!(
        left[0].remaining(),
        -3,
        "the shadow rule was counted 4 times"
    );
    assert_eq!(left[1].remaining(), 1);
}

#[tokio::test]
async fn a_shadow_rule_over_its_max_is_logged_by_name() {
    let clock = ManualClock::new(Duration::from_secs(NOON));
    let (limiter, _) = limiter(&clock);
    let dark = rule("dark", 1, Window::DAY).with_shadow(true);
    let limits = [
        dark.limit(&["a"]).unwrap(),
        rule("real", 5, Window::DAY).limit(&["a"]).unwrap(),
    ];
    let logs = tollgate_test_support::Logs::default();
    logs.capture(limiter.count(&limits)).await.unwrap();
    assert_eq!(logs.text(), "", "within its max: nothing to say");
    logs.capture(limiter.count(&limits)).await.unwrap();
    let text = logs.text();
    assert!(
        text.contains("shadow rule would have refused the call") && text.contains("rule=\"dark\""),
        "{text}"
    );
}

#[tokio::test]
async fn a_local_refusal_reads_as_the_stores_shadow_rules_included() {
    let clock = ManualClock::new(Duration::from_secs(NOON));
    let (limiter, store) = limiter(&clock);
    let dark = rule("dark", 1, Window::DAY).with_shadow(true);
    let limits = [
        rule("full", 1, Window::DAY).limit(&["a"]).unwrap(),
        rule("roomy", 100, Window::MINUTE).limit(&["a"]).unwrap(),
        dark.limit(&["a"]).unwrap(),
    ];
    assert!(limiter.reserve(&limits).await.unwrap().is_allowed());
    let stored = limiter.reserve(&limits).await.unwrap();
    assert!(!stored.is_allowed() && !stored.is_local());
    let before = calls(&store);
    let local = limiter.reserve(&limits).await.unwrap();
    assert!(local.is_local() && !local.has_spent());
    assert_eq!(local.limited(), stored.limited());
    let read = |v: &tollgate_core::Verdict| -> Vec<_> {
        v.usage()
            .iter()
            .map(|u| {
                let over = (u.is_over(), u.is_shadow_over(), u.never_fits());
                (
                    u.name().to_owned(),
                    u.remaining(),
                    u.reset(),
                    u.retry_after(),
                    over,
                )
            })
            .collect()
    };
    assert_eq!(read(&local), read(&stored));
    assert_eq!(
        local.shadow_limited().count(),
        1,
        "the shadow rule is reported"
    );
    // It spent nothing: nothing to give back, and no round trip to try.
    limiter.refund(&local, "full", 1).await.unwrap();
    assert_eq!(calls(&store), before);
}

#[test]
fn metrics_count_checks_by_rule_and_outcome() {
    let recorded = recorded(|| async {
        let clock = ManualClock::new(Duration::from_secs(NOON));
        let (limiter, _) = limiter(&clock);
        let limits = [rule("m", 2, Window::DAY).limit(&["a"]).unwrap()];
        for _ in 0..5 {
            let _ = limiter.reserve(&limits).await.unwrap();
        }
    });
    // Every outcome of a rule is registered at once; the rest read 0.
    let checks = counters(&recorded, "tollgate_checks_total");
    let (mut calls, mut entries) = (0, None);
    for (key, _, _, value) in recorded {
        let key = key.key();
        match (key.name(), value) {
            ("tollgate_store_call_seconds", DebugValue::Histogram(values))
                if labels(key).split(',').any(|l| l == "op=reserve") =>
            {
                calls += values.len();
            }
            ("tollgate_cache_entries", DebugValue::Gauge(n)) => entries = Some(n.into_inner()),
            _ => {}
        }
    }
    assert_eq!(entries, Some(1.0), "the counter seen full is remembered");
    let expected: std::collections::BTreeMap<String, u64> = [
        ("rule=m,algorithm=fixed,outcome=allowed".to_owned(), 2),
        ("rule=m,algorithm=fixed,outcome=limited".to_owned(), 1),
        (
            "rule=m,algorithm=fixed,outcome=answered-locally".to_owned(),
            2,
        ),
    ]
    .into();
    assert_eq!(checks, expected);
    assert_eq!(
        calls, 3,
        "two allowed and one refused call reached the store"
    );
}

/// A store whose every call is refused as busy.
#[derive(Debug)]
struct Busy;

impl tollgate_core::Named for Busy {}

#[async_trait]
impl CounterStore for Busy {
    async fn count(
        &self,
        _: &[Counter],
        _: tollgate_core::CheckId,
        _: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        Err(StoreError::Busy("full".into()))
    }
    async fn reserve(
        &self,
        _: &[Counter],
        _: tollgate_core::CheckId,
        _: Deadline,
    ) -> Result<Reservation, StoreError> {
        Err(StoreError::Busy("full".into()))
    }
    async fn refund(
        &self,
        _: &[Counter],
        _: tollgate_core::CheckId,
        _: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        Err(StoreError::Busy("full".into()))
    }
    async fn get(&self, _: &[String], _: Deadline) -> Result<Vec<u64>, StoreError> {
        Err(StoreError::Busy("full".into()))
    }
    async fn delete(&self, _: &str, _: Deadline) -> Result<bool, StoreError> {
        Err(StoreError::Busy("full".into()))
    }
}

#[test]
fn metrics_count_each_failed_attempt_by_kind_beside_its_latency() {
    let recorded = recorded(|| async {
        let retry = RetryPolicy {
            retries: 2,
            delay: Duration::from_millis(1),
            timeout: Duration::from_millis(50),
        };
        let limiter = Limiter::builder(Busy).retry(retry).build();
        let limits = [rule("e", 2, Window::DAY).limit(&["a"]).unwrap()];
        assert!(limiter.count(&limits).await.is_err());
    });
    let errors: Vec<_> = counters(&recorded, "tollgate_store_errors_total")
        .into_iter()
        .collect();
    let outcomes: Vec<_> = counters(&recorded, "tollgate_checks_total")
        .into_iter()
        .collect();
    let latencies: usize = recorded
        .into_iter()
        .filter_map(|(key, _, _, value)| match value {
            DebugValue::Histogram(values)
                if key.key().name() == "tollgate_store_call_seconds"
                    && labels(key.key()).split(',').any(|l| l == "op=count") =>
            {
                Some(values.len())
            }
            _ => None,
        })
        .sum();
    assert_eq!(errors, [("store=store,kind=busy".to_owned(), 3)]);
    assert_eq!(
        outcomes,
        [("rule=e,algorithm=fixed,outcome=unavailable".to_owned(), 1)]
    );
    assert_eq!(latencies, 3, "three attempts, each timed");
}

#[test]
fn debug_output_names_the_store_and_the_rules_metrics() {
    let limiter = Limiter::new(Busy);
    let text = format!("{limiter:?}");
    assert!(
        text.contains("StoreCalls") && text.contains("\"store\""),
        "{text}"
    );
    let rule = format!("{:?}", rule("d", 1, Window::DAY));
    assert!(rule.contains("RuleMetrics"), "{rule}");
}

/// A limiter over `store` on `clock` whose cache entries answer for `age`.
fn instance(store: &Arc<Counted>, clock: &tollgate_core::ManualClock, age: Duration) -> Limiter {
    Limiter::builder(store.clone())
        .clock(clock.clone())
        .cache_age(age)
        .build()
}

#[tokio::test]
async fn a_reset_made_elsewhere_is_seen_by_every_instance_at_the_cache_age_and_not_before() {
    let clock = tollgate_core::ManualClock::new(Duration::from_secs(NOON));
    let store = Arc::new(Faulty::new(MemoryStore::with_clock(clock.clone())));
    let age = Duration::from_secs(2);
    let (a, b) = (instance(&store, &clock, age), instance(&store, &clock, age));
    let limits = [rule("ask", 3, Window::DAY).limit(&["v"]).unwrap()];
    for _ in 0..3 {
        assert!(a.reserve(&limits).await.unwrap().is_allowed());
    }
    for limiter in [&a, &b] {
        let refused = limiter.reserve(&limits).await.unwrap();
        assert!(
            !refused.is_allowed() && !refused.is_local(),
            "from the store"
        );
        assert!(limiter.reserve(&limits).await.unwrap().is_local());
    }
    // The operator's reset, from another process: straight to the store.
    let operator = Limiter::builder(store.clone())
        .cache(0)
        .clock(clock.clone())
        .build();
    assert!(operator.reset(&limits[0]).await.unwrap());
    clock.advance(age - Duration::from_millis(1));
    let calls = store.calls();
    for limiter in [&a, &b] {
        let still = limiter.reserve(&limits).await.unwrap();
        assert!(
            !still.is_allowed() && still.is_local(),
            "{still:?}: before the age"
        );
    }
    assert_eq!(store.calls(), calls, "within the age: no round trip");
    clock.advance(Duration::from_millis(1));
    for limiter in [&a, &b] {
        let admitted = limiter.reserve(&limits).await.unwrap();
        assert!(
            admitted.is_allowed(),
            "{admitted:?}: the reset is seen at the age"
        );
    }
}

#[tokio::test]
async fn past_its_age_an_entry_costs_one_round_trip_and_answers_again() {
    let clock = tollgate_core::ManualClock::new(Duration::from_secs(NOON));
    let store = Arc::new(Faulty::new(MemoryStore::with_clock(clock.clone())));
    let limiter = instance(&store, &clock, Duration::from_secs(2));
    let limits = [rule("ask", 1, Window::DAY).limit(&["v"]).unwrap()];
    assert!(limiter.reserve(&limits).await.unwrap().is_allowed());
    assert!(!limiter.reserve(&limits).await.unwrap().is_local());
    for _ in 0..5 {
        clock.advance(Duration::from_millis(1_999));
        let before = store.calls();
        for _ in 0..10 {
            assert!(limiter.reserve(&limits).await.unwrap().is_local());
        }
        assert_eq!(store.calls(), before, "within the age");
        clock.advance(Duration::from_millis(1));
        let renewed = limiter.reserve(&limits).await.unwrap();
        assert!(
            !renewed.is_allowed() && !renewed.is_local(),
            "the store answers"
        );
        assert_eq!(store.calls(), before + 1, "one round trip, noted afresh");
    }
}

#[tokio::test]
async fn the_default_cache_age_is_two_seconds_and_zero_remembers_nothing() {
    assert_eq!(Limiter::DEFAULT_CACHE_AGE, Duration::from_secs(2));
    let clock = tollgate_core::ManualClock::new(Duration::from_secs(NOON));
    let store = Arc::new(Faulty::new(MemoryStore::with_clock(clock.clone())));
    let default = Limiter::builder(store.clone()).clock(clock.clone()).build();
    let none = instance(&store, &clock, Duration::ZERO);
    let limits = [rule("ask", 1, Window::DAY).limit(&["v"]).unwrap()];
    assert!(default.reserve(&limits).await.unwrap().is_allowed());
    for limiter in [&default, &none] {
        assert!(!limiter.reserve(&limits).await.unwrap().is_local());
    }
    clock.advance(Duration::from_millis(1_999));
    assert!(default.reserve(&limits).await.unwrap().is_local());
    assert!(!none.reserve(&limits).await.unwrap().is_local(), "age zero");
    clock.advance(Duration::from_millis(1));
    assert!(!default.reserve(&limits).await.unwrap().is_local());
}

/// The `tollgate_checks_total` counters above 0 after `checks`, as
/// `rule=…,algorithm=…,outcome=…` → count.
fn outcomes(checks: impl AsyncFnOnce()) -> std::collections::BTreeMap<String, u64> {
    counters(&recorded(checks), "tollgate_checks_total")
}

#[test]
fn only_the_rules_that_were_over_count_as_limited() {
    let found = outcomes(async || {
        let clock = ManualClock::new(Duration::from_secs(NOON));
        let (limiter, _) = limiter(&clock);
        let full = rule("full", 1, Window::DAY).limit(&["a"]).unwrap();
        let roomy = rule("roomy", 100, Window::DAY).limit(&["a"]).unwrap();
        let dark = rule("dark", 100, Window::DAY).with_shadow(true);
        let dark = dark.limit(&["a"]).unwrap();
        let limits = [full.clone(), roomy.clone(), dark];
        assert!(limiter.reserve(&limits).await.unwrap().is_allowed());
        // Refused by the store, then by the cache: `roomy` spent nothing.
        assert!(!limiter.reserve(&limits).await.unwrap().is_local());
        assert!(limiter.reserve(&limits).await.unwrap().is_local());
        // A refused count: `roomy` was counted all the same.
        let counted = limiter.count(&[full, roomy]).await.unwrap();
        assert!(!counted.is_allowed() && counted.has_spent());
    });
    let expected: std::collections::BTreeMap<String, u64> = [
        ("rule=full,algorithm=fixed,outcome=allowed", 1),
        ("rule=full,algorithm=fixed,outcome=limited", 2),
        ("rule=full,algorithm=fixed,outcome=answered-locally", 1),
        ("rule=roomy,algorithm=fixed,outcome=allowed", 1),
        ("rule=roomy,algorithm=fixed,outcome=not-spent", 2),
        ("rule=roomy,algorithm=fixed,outcome=counted", 1),
        ("rule=dark,algorithm=fixed,outcome=allowed", 1),
        ("rule=dark,algorithm=fixed,outcome=not-spent", 2),
    ]
    .into_iter()
    .map(|(k, n)| (k.to_owned(), n))
    .collect();
    assert_eq!(found, expected);
}

#[test]
fn the_breaker_reports_its_state_its_transitions_and_the_checks_it_answered() {
    let recorded = recorded_paused(|| async {
        let store = Arc::new(Faulty::new(MemoryStore::new()));
        let retry = RetryPolicy {
            retries: 0,
            delay: Duration::from_millis(1),
            timeout: Duration::from_millis(50),
        };
        let limiter = Limiter::builder(store.clone()).retry(retry).build();
        let limits = [rule("b", 10, Window::DAY).limit(&["a"]).unwrap()];
        store.set(tollgate_core::Fault::Transient);
        // Six failures over 500 ms open it.
        for _ in 0..6 {
            assert!(limiter.count(&limits).await.is_err());
            tokio::time::advance(Duration::from_millis(100)).await;
        }
        let calls = store.calls();
        let skipped = limiter.count(&limits).await;
        assert!(
            matches!(&skipped, Err(e) if e.to_string().contains("unavailable")),
            "{skipped:?}"
        );
        assert!(limiter.within(&limits).await.is_degraded());
        assert_eq!(store.calls(), calls, "the store was called while open");
        store.set(tollgate_core::Fault::None);
        tokio::time::advance(Duration::from_millis(200)).await;
        assert!(limiter.count(&limits).await.is_ok(), "the probe failed");
    });
    let mut seen = Vec::new();
    for (key, _, _, value) in recorded {
        let key = key.key();
        let value = match value {
            DebugValue::Counter(n) => n as f64,
            DebugValue::Gauge(g) => g.into_inner(),
            DebugValue::Histogram(_) => continue,
        };
        if key.name().starts_with("tollgate_breaker") {
            seen.push(format!("{} {} {value}", key.name(), labels(key)));
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "tollgate_breaker_answered_total store=memory,outcome=degraded 1",
            "tollgate_breaker_answered_total store=memory,outcome=unavailable 1",
            "tollgate_breaker_open store=memory 0",
            "tollgate_breaker_transitions_total store=memory,to=closed 1",
            "tollgate_breaker_transitions_total store=memory,to=open 1",
        ]
    );
}

#[tokio::test]
async fn a_full_window_is_refused_locally_whatever_leases_the_check_would_take() {
    let clock = ManualClock::new(Duration::from_secs(NOON));
    let (limiter, store) = limiter(&clock);
    let inflight = Rule::concurrency("inflight", 2, Window::MINUTE)
        .and_then(|r| r.with_key(&["id"]))
        .unwrap();
    let limits = vec![
        rule("ask", 1, Window::DAY).limit(&["a"]).unwrap(),
        inflight.limit(&["a"]).unwrap(),
    ];
    let first = limiter.reserve(&limits).await.unwrap();
    assert!(first.is_allowed());
    assert_eq!(first.leases().len(), 1);
    let refused = limiter.reserve(&limits).await.unwrap();
    assert_eq!(
        refused.limited().map(|l| l.limit().to_owned()).as_deref(),
        Some("ask")
    );
    let before = calls(&store);
    for _ in 0..3 {
        let again = limiter.reserve(&limits).await.unwrap();
        assert_eq!(
            again.limited().map(|l| l.limit().to_owned()).as_deref(),
            Some("ask")
        );
        assert!(again.leases().is_empty(), "a local refusal took a lease");
    }
    assert_eq!(
        calls(&store),
        before,
        "refusals of a full window went to the store"
    );
    // The one lease is still the only one held.
    let held = store
        .leases(
            &limits[1].current_key(NOON),
            Deadline::after(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    assert_eq!(held.held, 1);
}
