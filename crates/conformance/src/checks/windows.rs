//! Windows: what the limiter reports about them, and the next one.

use std::time::Duration;

use proptest::prelude::*;
use tollgate_core::{Clock, Window};

use crate::Harness;
use crate::support::{block_on, clock, limiter, ok, rule, runner, unique};

/// After `n` counted calls on a fresh key, `remaining = max - n`, and the
/// call is over exactly when `n > max`.
pub async fn remaining_is_max_minus_count<H: Harness>(harness: &H) {
    let store = harness.open().await;
    let clock = clock(harness);
    let limiter = limiter(store, &clock);
    let result = runner(harness, 24).run(&(1..12u64, 1..16u64), |(max, n)| {
        let limit = rule("remaining", max, Window::HOUR, 1).limit(&[unique()]);
        let limit = limit.map_err(|e| TestCaseError::fail(e.to_string()))?;
        for i in 1..=n {
            let verdict = block_on(limiter.count(std::slice::from_ref(&limit)))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            let usage = &verdict.usage()[0];
            prop_assert_eq!(usage.remaining(), max as i64 - i as i64);
            prop_assert_eq!(usage.is_over(), i > max);
            prop_assert_eq!(verdict.is_allowed(), i <= max);
        }
        Ok(())
    });
    ok(result, "remaining after n calls");
}

/// A new window starts from zero: a caller limited in one minute is allowed
/// in the next, and was told to wait exactly until then.
pub async fn next_window_starts_fresh<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let limit = ok(
        rule("fresh", 2, Window::MINUTE, 1).limit(&[unique()]),
        "limit",
    );
    let limits = [limit];
    for _ in 0..2 {
        assert!(ok(limiter.count(&limits).await, "count").is_allowed());
    }
    let limited = ok(limiter.count(&limits).await, "count").limited();
    let limited = limited.unwrap_or_else(|| panic!("third call in a window of 2 must be limited"));
    assert_eq!(limited.limit(), "fresh");
    let now = clock.now().as_secs();
    assert_eq!(limited.retry_after(), Window::MINUTE.retry_after(now));
    assert_eq!(limited.reset(), now + limited.retry_after());
    clock.advance(Duration::from_secs(limited.retry_after()));
    let verdict = ok(limiter.count(&limits).await, "count");
    assert!(verdict.is_allowed(), "the next window must start fresh");
    assert_eq!(verdict.usage()[0].remaining(), 1);
}

/// When several limits are over, the diagnostic names the one whose window
/// resets last, and its wait.
pub async fn limited_names_the_longest_wait<H: Harness>(harness: &H) {
    let clock = clock(harness);
    let limiter = limiter(harness.open().await, &clock);
    let id = unique();
    let limits = [
        ok(rule("burst", 1, Window::MINUTE, 1).limit(&[&id]), "limit"),
        ok(rule("daily", 1, Window::DAY, 1).limit(&[&id]), "limit"),
        ok(rule("roomy", 100, Window::DAY, 1).limit(&[&id]), "limit"),
    ];
    assert!(ok(limiter.count(&limits).await, "count").is_allowed());
    let verdict = ok(limiter.count(&limits).await, "count");
    let limited = verdict
        .limited()
        .unwrap_or_else(|| panic!("both small limits are over"));
    assert_eq!(limited.limit(), "daily");
    assert_eq!(limited.max(), 1);
    assert_eq!(
        limited.retry_after(),
        Window::DAY.retry_after(clock.now().as_secs())
    );
    assert!(!verdict.usage()[2].is_over());
    let text = limited.to_string();
    assert!(
        !text.contains(&id) && !text.contains("limit:"),
        "diagnostic leaks a key: {text}"
    );
}
