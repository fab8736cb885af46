//! [`check`]: a route's check in one call, as a guard or a handler makes it.

use tollgate_core::{Error as CoreError, Limit, Limiter, Mode, Policy, Verdict};

use crate::Rejection;

/// Checks `limits` in one store call, as a route does: the verdict when
/// allowed; otherwise the [`Rejection`] to answer with (429 when limited,
/// 503 when the store failed under [`Policy::FailClosed`], 400 or 500 for a
/// bad check). The [`Guard`](crate::Guard) uses it before a handler runs;
/// a handler that must read the body first (a cost estimated from it)
/// calls it itself, before any domain work.
///
/// ```
/// use tollgate_tower::{Rejection, check};
/// use tollgate_core::{Limiter, Mode, Policy, RuleSet};
///
/// async fn ask(limiter: &Limiter, rules: &RuleSet, question: &str) -> Result<String, Rejection> {
///     let estimate = question.len().div_ceil(4) as u64 + 512;
///     let tokens = rules.get("ask-tokens")?.limit(&["docs"])?.with_cost(estimate)?;
///     let verdict = check(&limiter, &[tokens], Mode::Reserve, Policy::FailClosed).await?;
///     let used = 100; // the provider call, which reports what it used
///     limiter.settle(&verdict, "ask-tokens", used).await?;
///     Ok("the answer".into())
/// }
/// ```
pub async fn check(
    limiter: &Limiter,
    limits: &[Limit],
    mode: Mode,
    policy: Policy,
) -> Result<Verdict, Rejection> {
    let verdict = match limiter.check(limits, mode, policy).await {
        Ok(verdict) => verdict,
        Err(CoreError::Unavailable(_)) => return Err(Rejection::Unavailable),
        Err(other) => return Err(Rejection::from(other)),
    };
    match Rejection::from_verdict(&verdict) {
        Some(rejection) => {
            tracing::debug!(status = %rejection.status(), "call refused by a rate limit");
            Err(rejection)
        }
        None => Ok(verdict),
    }
}
