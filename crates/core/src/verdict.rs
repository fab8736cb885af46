//! What a check answers: a [`Verdict`], and when limited, a [`RateLimited`].

use std::sync::Arc;

use crate::{Limit, Window};

/// Where one limit stands after a check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Usage {
    name: Arc<str>,
    max: u64,
    window: Window,
    remaining: i64,
    reset: u64,
    retry_after: u64,
    over: bool,
}

impl Usage {
    pub(crate) fn new(limit: &Limit, count: u64, now_secs: u64, over: bool) -> Usage {
        let rule = limit.rule();
        let count = i64::try_from(count).unwrap_or(i64::MAX);
        // `max` is at most i64::MAX (checked when the rule was made).
        let max = i64::try_from(rule.max()).unwrap_or(i64::MAX);
        Usage {
            name: rule.shared_name().clone(),
            max: rule.max(),
            window: rule.window(),
            remaining: max.saturating_sub(count),
            reset: rule.window().reset(now_secs),
            retry_after: rule.window().retry_after(now_secs),
            over,
        }
    }

    /// The rule's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The rule's `max` per window.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The rule's window.
    pub fn window(&self) -> Window {
        self.window
    }

    /// `max - count`: below zero when a counted call went over.
    pub fn remaining(&self) -> i64 {
        self.remaining
    }

    /// When the window resets, in Unix seconds.
    pub fn reset(&self) -> u64 {
        self.reset
    }

    /// Whole seconds until the window resets, never 0.
    pub fn retry_after(&self) -> u64 {
        self.retry_after
    }

    /// Whether this limit refuses the call.
    pub fn is_over(&self) -> bool {
        self.over
    }
}

/// The answer of a check: where each limit stands and whether the call may go on.
///
/// Being limited is a value, read with [`limited`](Verdict::limited) or
/// [`into_result`](Verdict::into_result); a broken store is an
/// [`Error`](crate::Error) (fail-closed) or a [`degraded`](Verdict::is_degraded)
/// verdict (fail-open).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    usage: Vec<Usage>,
    degraded: bool,
}

impl Verdict {
    pub(crate) fn new(usage: Vec<Usage>) -> Verdict {
        Verdict {
            usage,
            degraded: false,
        }
    }

    pub(crate) fn degraded() -> Verdict {
        Verdict {
            usage: Vec::new(),
            degraded: true,
        }
    }

    /// Whether the call may go on.
    pub fn is_allowed(&self) -> bool {
        !self.usage.iter().any(Usage::is_over)
    }

    /// Whether the store failed and the call was allowed by the fail-open
    /// policy; such a verdict carries no usage.
    pub fn is_degraded(&self) -> bool {
        self.degraded
    }

    /// Each limit of the check, in the order given.
    pub fn usage(&self) -> &[Usage] {
        &self.usage
    }

    /// The limit that refuses the call, if any: among those over, the one
    /// whose window resets last (the first given, on a tie).
    pub fn limited(&self) -> Option<RateLimited> {
        let mut over = self.usage.iter().filter(|u| u.over);
        let first = over.next()?;
        let longest = over.fold(
            first,
            |a, b| if b.retry_after > a.retry_after { b } else { a },
        );
        Some(RateLimited {
            limit: longest.name.clone(),
            max: longest.max,
            window: longest.window,
            reset: longest.reset,
            retry_after: longest.retry_after,
        })
    }

    /// `Ok(self)` when allowed, the [`RateLimited`] diagnostic otherwise.
    pub fn into_result(self) -> Result<Verdict, RateLimited> {
        match self.limited() {
            Some(limited) => Err(limited),
            None => Ok(self),
        }
    }
}

/// Why a call was refused: which limit, when it resets, how long to wait.
/// Nothing in it names the store or a key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("rate limit `{limit}` reached: {max} per {window}; retry in {retry_after} s")]
pub struct RateLimited {
    limit: Arc<str>,
    max: u64,
    window: Window,
    reset: u64,
    retry_after: u64,
}

impl RateLimited {
    /// The name of the limit that refused the call.
    pub fn limit(&self) -> &str {
        &self.limit
    }

    /// That limit's `max` per window.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// That limit's window.
    pub fn window(&self) -> Window {
        self.window
    }

    /// When that limit's window resets, in Unix seconds.
    pub fn reset(&self) -> u64 {
        self.reset
    }

    /// Whole seconds to wait before trying again; at least 1.
    pub fn retry_after(&self) -> u64 {
        self.retry_after
    }
}
