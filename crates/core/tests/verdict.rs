//! What a check tells its caller, through the limiter over the memory store
//! at a fixed time: each limit's usage (its rule's name, max, window and the
//! wait until its window resets), which limit refuses the call, the
//! diagnostic a refused caller gets, and two limits of one key refused before
//! the store is asked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use tollgate_core::{Clock, Error, Limit, Limiter, Mode, Policy, Rule, Unit, Verdict, Window};
use tollgate_memory::MemoryStore;

/// 2026-06-15T12:00:30Z (day 20,619).
const NOON: u64 = 20_619 * 86_400 + 43_230;
/// 12:01:00, 13:00:00 and midnight after `NOON`.
const MINUTE_END: u64 = NOON + 30;
const HOUR_END: u64 = NOON + 3_570;
const DAY_END: u64 = 20_620 * 86_400;

/// A clock stopped at `NOON`.
#[derive(Debug)]
struct Stopped;

impl Clock for Stopped {
    fn now(&self) -> Duration {
        Duration::from_secs(NOON)
    }
}

fn limiter() -> (Limiter, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    (
        Limiter::builder(store.clone()).clock(Stopped).build(),
        store,
    )
}

fn rule(name: &str, max: u64, window: Window) -> Rule {
    Rule::new(name, max, window)
        .and_then(|r| r.with_key(&["id"]))
        .unwrap()
}

fn limit(rule: &Rule, id: &str, cost: u64) -> Limit {
    rule.limit(&[id]).and_then(|l| l.with_cost(cost)).unwrap()
}

fn names_limited(verdict: &Verdict) -> Option<String> {
    verdict.limited().map(|l| l.limit().to_owned())
}

/// Every usage carries its own rule's name, max, window, unit and the
/// check's cost, and the reset time and wait of that rule's window at the
/// time of the check; reading the budget without spending reports the same.
#[tokio::test]
async fn each_usage_reports_its_rules_budget_and_window_at_the_time_of_the_check() {
    let (limiter, _) = limiter();
    let tokens = rule("tokens", 50, Window::HOUR).with_unit(Unit::new("tokens").unwrap());
    let daily = rule("daily", 7, Window::DAY);
    let limits = [limit(&tokens, "a", 20), limit(&daily, "a", 1)];
    let verdict = limiter.count(&limits).await.unwrap();
    assert!(verdict.is_allowed());
    let [hourly, daily_use] = verdict.usage() else {
        panic!("one usage per limit, in order: {:?}", verdict.usage());
    };
    assert_eq!(
        (hourly.name(), hourly.max(), hourly.window(), hourly.cost()),
        ("tokens", 50, Window::HOUR, 20)
    );
    assert_eq!(hourly.unit().as_str(), "tokens");
    assert_eq!(hourly.remaining(), 30);
    assert_eq!((hourly.reset(), hourly.retry_after()), (HOUR_END, 3_570));
    assert_eq!(
        (daily_use.name(), daily_use.max(), daily_use.window()),
        ("daily", 7, Window::DAY)
    );
    assert_eq!(daily_use.unit(), &Unit::Calls);
    assert_eq!(daily_use.remaining(), 6);
    assert_eq!(
        (daily_use.reset(), daily_use.retry_after()),
        (DAY_END, DAY_END - NOON)
    );

    let read = limiter.remaining(&limits).await.unwrap();
    assert_eq!(read.len(), 2);
    assert_eq!(
        (read[0].name(), read[0].max(), read[0].remaining()),
        ("tokens", 50, 30)
    );
    assert_eq!((read[0].reset(), read[0].retry_after()), (HOUR_END, 3_570));
    assert_eq!(
        (read[1].name(), read[1].max(), read[1].remaining()),
        ("daily", 7, 6)
    );
    assert_eq!(
        (read[1].reset(), read[1].retry_after()),
        (DAY_END, DAY_END - NOON)
    );
}

/// A refused call turns into the `RateLimited` error naming the refusing
/// limit, its max, window, unit and wait; an allowed one into the verdict
/// itself, in both modes.
#[tokio::test]
async fn into_result_refuses_exactly_the_limited_verdicts() {
    let (limiter, _) = limiter();
    let ask = rule("ask", 3, Window::MINUTE).with_unit(Unit::new("tokens").unwrap());
    for mode in [Mode::Reserve, Mode::Count] {
        let id = format!("{mode:?}");
        let limits = [limit(&ask, &id, 2)];
        let first = limiter
            .check(&limits, mode, Policy::FailClosed)
            .await
            .unwrap();
        assert!(first.is_allowed());
        let kept = first
            .clone()
            .into_result()
            .unwrap_or_else(|limited| panic!("{mode:?}: an allowed verdict turned into {limited}"));
        assert_eq!(kept, first, "{mode:?}: Ok holds the verdict itself");
        assert_eq!(kept.usage()[0].remaining(), 1);

        let second = limiter
            .check(&limits, mode, Policy::FailClosed)
            .await
            .unwrap();
        assert!(!second.is_allowed(), "{mode:?}: 4 of 3 is over");
        let limited = match second.into_result() {
            Ok(verdict) => panic!("{mode:?}: a refused call was let through: {verdict:?}"),
            Err(limited) => limited,
        };
        assert_eq!(limited.limit(), "ask");
        assert_eq!(limited.max(), 3);
        assert_eq!(limited.window(), Window::MINUTE);
        assert_eq!(limited.unit().as_str(), "tokens");
        assert_eq!((limited.reset(), limited.retry_after()), (MINUTE_END, 30));
        assert_eq!(
            limited.to_string(),
            "rate limit `ask` reached: 3 tokens per 1m; retry in 30 s"
        );
    }
}

/// Among the limits over, the one whose window resets last is named,
/// wherever it stands in the check; when waits tie, the first given is.
#[tokio::test]
async fn the_longest_wait_is_named_and_the_first_given_on_a_tie() {
    let (limiter, _) = limiter();
    let burst = rule("burst", 2, Window::MINUTE);
    let spike = rule("spike", 3, Window::MINUTE);
    let daily = rule("daily", 5, Window::DAY);
    // Each limit of each check on its own principal, at a cost over every max.
    let check = |order: &[&Rule], id: &str| -> Vec<Limit> {
        order.iter().map(|r| limit(r, id, 6)).collect()
    };
    for (order, named, max) in [
        (vec![&burst, &spike], "burst", 2),
        (vec![&spike, &burst], "spike", 3),
        (vec![&burst, &daily, &spike], "daily", 5),
        (vec![&daily, &burst], "daily", 5),
        (vec![&burst, &daily], "daily", 5),
    ] {
        let id = order.iter().map(|r| r.name()).collect::<Vec<_>>().join("-");
        let verdict = limiter.count(&check(&order, &id)).await.unwrap();
        assert!(verdict.usage().iter().all(|u| u.is_over()));
        assert_eq!(names_limited(&verdict).as_deref(), Some(named), "{id}");
        let limited = verdict.limited().unwrap();
        assert_eq!(limited.max(), max, "{id}: the named limit's own max");
        let wait = limited.window().retry_after(NOON);
        assert_eq!(limited.retry_after(), wait, "{id}: the named limit's wait");
    }
}

/// Two limits of one key in one check are a caller error, refused in every
/// mode and policy before the store is asked; limits of one rule with other
/// keys are distinct.
#[tokio::test]
async fn two_limits_of_one_key_are_refused_before_the_store_is_asked() {
    let (limiter, store) = limiter();
    let ask = rule("ask", 10, Window::DAY);
    let twice = [
        limit(&ask, "a", 1),
        limit(&ask, "b", 1),
        limit(&ask, "a", 2),
    ];
    for mode in [Mode::Count, Mode::Reserve] {
        for policy in [Policy::FailClosed, Policy::FailOpen] {
            match limiter.check(&twice, mode, policy).await {
                Err(Error::DuplicateKey(rule)) => assert_eq!(rule, "ask"),
                other => panic!("{mode:?} {policy:?}: expected DuplicateKey, got {other:?}"),
            }
        }
    }
    assert!(matches!(
        limiter.count(&twice).await,
        Err(Error::DuplicateKey(_))
    ));
    assert!(matches!(
        limiter.reserve(&twice).await,
        Err(Error::DuplicateKey(_))
    ));
    assert!(store.is_empty(), "nothing may reach the store");

    let distinct = [limit(&ask, "a", 1), limit(&ask, "b", 1)];
    let verdict = limiter.reserve(&distinct).await.unwrap();
    assert!(verdict.is_allowed() && verdict.has_spent());
    assert_eq!(store.len(), 2);
}

/// The fail-open check, which cannot return the error, counts two limits of
/// one key as one limit of their summed cost: still counted, once.
#[tokio::test]
async fn fail_open_counts_two_limits_of_one_key_as_one_of_their_summed_cost() {
    let (limiter, store) = limiter();
    let ask = rule("ask", 10, Window::DAY);
    let verdict = limiter
        .within(&[limit(&ask, "a", 2), limit(&ask, "a", 3)])
        .await;
    assert!(!verdict.is_degraded());
    let [usage] = verdict.usage() else {
        panic!("one usage for one key: {:?}", verdict.usage());
    };
    assert_eq!((usage.cost(), usage.remaining()), (5, 5));
    assert_eq!(store.len(), 1);
    let read = limiter.remaining(&[limit(&ask, "a", 1)]).await.unwrap();
    assert_eq!(read[0].remaining(), 5, "the store holds the summed cost");
}

/// A usage says whether its rule's budget may be shown to callers: public
/// by default, not when the rule says so.
#[tokio::test]
async fn a_usage_is_public_as_its_rule_is() {
    let (limiter, _) = limiter();
    let shown = rule("shown", 5, Window::DAY);
    let hidden = rule("hidden", 5, Window::DAY).with_public(false);
    let verdict = limiter
        .count(&[limit(&shown, "a", 1), limit(&hidden, "a", 1)])
        .await
        .unwrap();
    assert!(verdict.usage()[0].is_public());
    assert!(!verdict.usage()[1].is_public());
}

/// A cost above a rule's max is answered as never fitting, in both modes:
/// the usage and the diagnostic say so and promise no retry, that limit is
/// named even when another over limit waits longer, and the same cost
/// within the max is an ordinary refusal with a wait.
#[tokio::test]
async fn a_cost_above_the_max_never_fits_and_is_named_before_any_wait() {
    let (limiter, _) = limiter();
    let tokens = rule("tokens", 100, Window::MINUTE).with_unit(Unit::new("tokens").unwrap());
    let daily = rule("daily", 1, Window::DAY);
    for mode in [Mode::Reserve, Mode::Count] {
        let id = format!("{mode:?}");
        limiter.count(&[limit(&daily, &id, 1)]).await.unwrap();
        let limits = [limit(&daily, &id, 1), limit(&tokens, &id, 250)];
        let verdict = limiter
            .check(&limits, mode, Policy::FailClosed)
            .await
            .unwrap();
        assert!(!verdict.is_allowed(), "{mode:?}");
        assert!(!verdict.usage()[0].never_fits() && verdict.usage()[1].never_fits());
        let limited = verdict.limited().unwrap();
        assert!(limited.never_fits(), "{mode:?}: {limited}");
        assert_eq!((limited.limit(), limited.cost()), ("tokens", 250));
        assert_eq!(
            limited.to_string(),
            "a cost of 250 tokens never fits rate limit `tokens`: 100 tokens per 1m"
        );
        assert!(!limited.to_string().contains("retry"), "{limited}");
    }
    // At the max it fits an empty window: an ordinary refusal once spent.
    let at_max = [limit(&tokens, "max", 100)];
    assert!(limiter.reserve(&at_max).await.unwrap().is_allowed());
    let limited = limiter.reserve(&at_max).await.unwrap().limited().unwrap();
    assert!(!limited.never_fits() && !limited.to_string().contains("never"));
    assert_eq!(limited.retry_after(), MINUTE_END - NOON);
}
