//! Store failures: what a [`Policy`] makes of them, and their logs (at
//! most one line per policy and rule list per second, with the cause chain
//! and how many lines were suppressed).

use std::fmt;

use crate::throttle::{Chain, Throttle};
use crate::{Error, Limit, Policy, StoreError, Verdict};

/// The failure log of a limiter or of deliveries; clones of either share it.
#[derive(Debug, Default)]
pub(crate) struct Failures(Throttle);

impl Failures {
    /// Applies `policy` to a store failure of the limits named `names`,
    /// logging it: a degraded verdict (fail-open) or [`Error::Unavailable`].
    pub(crate) fn apply(
        &self,
        names: &str,
        policy: Policy,
        err: StoreError,
    ) -> Result<Verdict, Error> {
        self.log(names, policy, &err);
        match policy {
            Policy::FailOpen => Ok(Verdict::degraded()),
            Policy::FailClosed => Err(Error::Unavailable(err)),
        }
    }

    /// A fail-closed store failure of `names`, logged.
    pub(crate) fn unavailable(&self, names: &str, err: StoreError) -> Error {
        self.log(names, Policy::FailClosed, &err);
        Error::Unavailable(err)
    }

    fn log(&self, names: &str, policy: Policy, err: &StoreError) {
        let key = match policy {
            Policy::FailOpen => format!("open:{names}"),
            Policy::FailClosed => format!("closed:{names}"),
        };
        let Some(suppressed) = self.0.admit(&key) else {
            return;
        };
        let error = Chain(err);
        match policy {
            Policy::FailOpen => tracing::warn!(
                limits = names,
                kind = err.kind(),
                %error,
                suppressed,
                "rate limit store failed; allowing the call (fail-open)"
            ),
            Policy::FailClosed => tracing::error!(
                limits = names,
                kind = err.kind(),
                %error,
                suppressed,
                "rate limit store failed; refusing the call (fail-closed)"
            ),
        }
    }
}

/// The rule names of a check, comma-separated, for logs.
pub(crate) struct Names<'a>(pub(crate) &'a [Limit]);

impl fmt::Display for Names<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, limit) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            f.write_str(limit.rule().name())?;
        }
        Ok(())
    }
}
