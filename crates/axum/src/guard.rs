//! [`Guard`]: checks a route's limits before its handler runs.

use std::fmt;
use std::sync::Arc;

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{FromRequestParts, RawPathParams};
use http::request::Parts;
use tollgate_core::{Error as CoreError, Limit, Limiter, Mode, Policy, Rule, Verdict, Visitor};

use crate::{Rejection, VisitorSource};

/// Builds the key parts of one rule from a [`Call`]; `None` when the call
/// lacks a value the key needs (answered with 500: the route is misconfigured).
type KeyParts = dyn Fn(&Call<'_>) -> Option<Vec<String>> + Send + Sync;

/// A route guard: checks every rule's limit in one store call **before** the
/// handler runs. A refused call gets a [`Rejection`] (429, 503 or 400) and
/// the handler never runs; an allowed call reaches the handler with the
/// [`Verdict`] and the [`Visitor`] in its request extensions, and its response
/// gets the `RateLimit-Policy` and `RateLimit` fields (unless the verdict is
/// degraded).
///
/// A guard is a tower [`Layer`](tower::Layer); put one on a route with
/// `route_layer`, so that path parameters are known:
///
/// ```
/// use axum::{Router, routing::post};
/// use tollgate_axum::{Guard, Trust, VisitorSource};
/// use tollgate_core::{Limiter, Mode, Policy, RuleSet};
///
/// fn router(limiter: Limiter) -> Result<Router, tollgate_core::Error> {
///     let rules = RuleSet::defaults();
///     let guard = Guard::new(limiter)
///         .visitors(VisitorSource::new(Trust::Peer))
///         .rule(rules.get("ask-burst")?, |call| Some(vec![call.visitor()?.into()]))
///         .rule(rules.get("ask")?, |call| {
///             Some(vec![call.param("project")?.into(), call.visitor()?.into()])
///         })
///         .rule(rules.get("ask-site")?, |call| Some(vec![call.param("project")?.into()]))
///         .rule(rules.get("ask-all")?, |_| Some(vec![]))
///         .mode(Mode::Reserve)
///         .policy(Policy::FailClosed);
///     Ok(Router::new().route("/sites/{project}/ask", post(ask).route_layer(guard)))
/// }
///
/// async fn ask() -> &'static str {
///     "only runs when every limit allows the call"
/// }
/// ```
#[derive(Clone)]
pub struct Guard {
    limiter: Limiter,
    visitors: Option<VisitorSource>,
    rules: Vec<(Rule, Arc<KeyParts>)>,
    mode: Mode,
    policy: Policy,
}

impl Guard {
    /// A guard checking in `limiter`, with no rules yet, in [`Mode::Count`]
    /// and [`Policy::FailClosed`].
    pub fn new(limiter: Limiter) -> Guard {
        Guard {
            limiter,
            visitors: None,
            rules: Vec::new(),
            mode: Mode::Count,
            policy: Policy::FailClosed,
        }
    }

    /// Finds each call's visitor with `source`, before anything is counted; a
    /// call without a usable address is refused with 400. Without a source,
    /// [`Call::visitor`] is `None`.
    pub fn visitors(mut self, source: VisitorSource) -> Guard {
        self.visitors = Some(source);
        self
    }

    /// Adds a rule, with the function that gives its key parts for a call.
    pub fn rule<F>(mut self, rule: &Rule, key: F) -> Guard
    where
        F: Fn(&Call<'_>) -> Option<Vec<String>> + Send + Sync + 'static,
    {
        self.rules.push((rule.clone(), Arc::new(key)));
        self
    }

    /// How the check spends budget ([`Mode::Count`] by default).
    pub fn mode(mut self, mode: Mode) -> Guard {
        self.mode = mode;
        self
    }

    /// What a store failure does ([`Policy::FailClosed`] by default).
    pub fn policy(mut self, policy: Policy) -> Guard {
        self.policy = policy;
        self
    }

    /// Checks one call: its verdict when allowed (also put in the request
    /// extensions, with the visitor), the rejection otherwise.
    pub async fn admit(&self, parts: &mut Parts) -> Result<Verdict, Rejection> {
        let visitor = match &self.visitors {
            Some(source) => Some(source.visitor(parts)?),
            None => None,
        };
        let params = match RawPathParams::from_request_parts(parts, &()).await {
            Ok(params) => Some(params),
            Err(RawPathParamsRejection::InvalidUtf8InPathParam(_)) => {
                return Err(Rejection::BadRequest(
                    "a path parameter is not valid UTF-8".into(),
                ));
            }
            Err(_) => None,
        };
        let call = Call {
            parts,
            params: params.as_ref(),
            visitor: visitor.as_ref(),
        };
        let limits = self.limits(&call)?;
        let verdict = match self.limiter.check(&limits, self.mode, self.policy).await {
            Ok(verdict) => verdict,
            Err(CoreError::Unavailable(_)) => return Err(Rejection::Unavailable),
            Err(other) => return Err(Rejection::from(other)),
        };
        if let Some(rejection) = Rejection::from_verdict(&verdict) {
            tracing::debug!(status = %rejection.status(), "call refused by a rate limit");
            return Err(rejection);
        }
        if let Some(visitor) = visitor {
            parts.extensions.insert(visitor);
        }
        parts.extensions.insert(verdict.clone());
        Ok(verdict)
    }

    fn limits(&self, call: &Call<'_>) -> Result<Vec<Limit>, Rejection> {
        self.rules
            .iter()
            .map(|(rule, key)| {
                let Some(parts) = key(call) else {
                    tracing::error!(
                        rule = rule.name(),
                        path = %call.parts.uri.path(),
                        "the guard found no value for a key part of this rule; \
                         check the route's parameters and the guard's visitor source"
                    );
                    return Err(Rejection::Internal);
                };
                rule.limit(&parts).map_err(Rejection::from)
            })
            .collect()
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rules: Vec<&str> = self.rules.iter().map(|(rule, _)| rule.name()).collect();
        f.debug_struct("Guard")
            .field("rules", &rules)
            .field("visitors", &self.visitors)
            .field("mode", &self.mode)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// What a key function can read of a call: its path parameters, headers and visitor.
#[derive(Debug)]
pub struct Call<'a> {
    parts: &'a Parts,
    params: Option<&'a RawPathParams>,
    visitor: Option<&'a Visitor>,
}

impl<'a> Call<'a> {
    /// The path parameter `name` (percent-decoded), e.g. `project` in `/sites/{project}/ask`.
    pub fn param(&self, name: &str) -> Option<&'a str> {
        self.params?
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, value)| value)
    }

    /// The visitor, when the guard has a [`VisitorSource`].
    pub fn visitor(&self) -> Option<&'a str> {
        self.visitor.map(Visitor::as_str)
    }

    /// The header `name`, when present once and readable as text. Headers
    /// can be set by anyone: key on them only when something upstream
    /// authenticated them.
    pub fn header(&self, name: &str) -> Option<&'a str> {
        let mut values = self.parts.headers.get_all(name).iter();
        let value = values.next()?;
        match values.next() {
            Some(_) => None,
            None => value.to_str().ok(),
        }
    }

    /// The whole request head (method, URI, headers, extensions).
    pub fn parts(&self) -> &'a Parts {
        self.parts
    }
}
