//! Racing callers.

use tollgate_core::{Limiter, Window};

use crate::Harness;
use crate::support::{clock, limiter, ok, rule, unique};

/// Callers racing in one window are allowed exactly `max` times, across
/// tasks and two independent limiters (two clients) on one store.
pub async fn racing_callers_allow_exactly_max<H: Harness>(harness: &H) {
    const MAX: u64 = 25;
    const CALLERS: usize = 120;
    let clock = clock(harness);
    let limiters = [
        limiter(harness.open().await, &clock),
        limiter(harness.open().await, &clock),
    ];
    let limit = ok(
        rule("race", MAX, Window::HOUR, 1).limit(&[unique()]),
        "limit",
    );
    let allowed = race(&limiters, CALLERS, move |limiter| {
        let limit = limit.clone();
        async move { ok(limiter.count(&[limit]).await, "count").is_allowed() }
    })
    .await;
    assert_eq!(
        allowed, MAX as usize,
        "{CALLERS} racing callers with max {MAX}"
    );
}

/// Runs `callers` calls of `call` at once, spread over `limiters`; how many returned true.
pub(super) async fn race<F, Fut>(limiters: &[Limiter], callers: usize, call: F) -> usize
where
    F: Fn(Limiter) -> Fut,
    Fut: std::future::Future<Output = bool> + Send + 'static,
{
    race_all(limiters, callers, call)
        .await
        .into_iter()
        .filter(|allowed| *allowed)
        .count()
}

/// Runs `callers` calls of `call` at once, spread over `limiters`, released
/// together by a barrier; what each returned, in order.
pub(super) async fn race_all<F, Fut, T>(limiters: &[Limiter], callers: usize, call: F) -> Vec<T>
where
    F: Fn(Limiter) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let start = std::sync::Arc::new(tokio::sync::Barrier::new(callers));
    let tasks: Vec<_> = (0..callers)
        .map(|i| {
            let run = call(limiters[i % limiters.len()].clone());
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                run.await
            })
        })
        .collect();
    let mut results = Vec::with_capacity(callers);
    for task in tasks {
        results.push(ok(task.await, "racing task"));
    }
    results
}
