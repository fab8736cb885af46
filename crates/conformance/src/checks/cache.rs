//! The limiter's local cache of full counters, over each store.

use std::time::Duration;

use tollgate_core::{Limit, Limiter, Verdict, Window};

use crate::Harness;
use crate::support::{RETRY, clock, limiter, ok, rule, unique};

/// What a caller can see of a verdict: allowed or not, the diagnostic, and
/// each limit's remaining budget.
fn seen(verdict: &Verdict) -> (bool, Option<(String, u64, u64)>, Vec<i64>) {
    let limited = verdict
        .limited()
        .map(|l| (l.limit().to_owned(), l.retry_after(), l.reset()));
    let remaining = verdict.usage().iter().map(|u| u.remaining()).collect();
    (verdict.is_allowed(), limited, remaining)
}

/// A limiter with the local cache of full counters and one without give the
/// same verdicts on the same call sequence (reservations of mixed costs past
/// their limits, a settle that makes room, a new window), and the cached one
/// answers refusals without the store.
pub async fn cached_and_uncached_limiters_agree<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let cached = limiter(harness.open().await, &clock);
    let plain = Limiter::builder(harness.open().await)
        .clock(clock.clone())
        .retry(RETRY)
        .cache(0)
        .build();
    let own = rule("c-own", 4, Window::DAY, 2);
    let shared = rule("c-shared", 9, Window::HOUR, 1);
    let tokens = rule("c-tokens", 60, Window::DAY, 1);
    let id = unique();
    let limits = |who: &str, cost: u64| -> Vec<Limit> {
        let who = format!("{id}-{who}");
        vec![
            ok(own.limit(&[who.as_str(), "v"]), "limit"),
            ok(shared.limit(&[who.as_str()]), "limit"),
            ok(
                tokens
                    .limit(&[who.as_str()])
                    .and_then(|l| l.with_cost(cost)),
                "limit",
            ),
        ]
    };
    let mut local = 0;
    let mut last_allowed: [Option<Verdict>; 2] = [None, None];
    let costs = [10, 25, 20, 30, 5, 30, 30, 1, 40, 2, 2, 2, 2, 2];
    for (step, &cost) in costs.iter().enumerate() {
        if step == 8 {
            // The caller used less than reserved: a settle makes room.
            for (i, limiter) in [&cached, &plain].into_iter().enumerate() {
                if let Some(spent) = &last_allowed[i] {
                    ok(limiter.settle(spent, "c-tokens", 1).await, "settle");
                }
            }
        }
        if step == 11 {
            clock.advance(Duration::from_secs(3_600));
        }
        let mut verdicts = Vec::new();
        for (i, (name, limiter)) in [("cached", &cached), ("plain", &plain)]
            .into_iter()
            .enumerate()
        {
            let verdict = ok(limiter.reserve(&limits(name, cost)).await, "reserve");
            if verdict.is_allowed() {
                last_allowed[i] = Some(verdict.clone());
            }
            verdicts.push(verdict);
        }
        local += usize::from(verdicts[0].is_local());
        assert!(
            !verdicts[1].is_local(),
            "a limiter without a cache answered locally"
        );
        assert_eq!(
            seen(&verdicts[0]),
            seen(&verdicts[1]),
            "step {step} (cost {cost}): cached and uncached verdicts differ"
        );
    }
    assert!(
        local >= 2,
        "the cached limiter never answered locally ({local})"
    );
    let cached_left = remaining(&cached, &limits("cached", 1)).await;
    let plain_left = remaining(&plain, &limits("plain", 1)).await;
    assert_eq!(
        cached_left, plain_left,
        "the counters differ after the sequence"
    );
}

async fn remaining(limiter: &Limiter, limits: &[Limit]) -> Vec<i64> {
    let usage = ok(limiter.remaining(limits).await, "remaining");
    usage.iter().map(|u| u.remaining()).collect()
}
