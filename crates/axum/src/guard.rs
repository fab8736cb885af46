//! [`Guard`]: checks a route's limits before its handler runs.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{FromRequestParts, RawPathParams};
use http::HeaderMap;
use http::request::Parts;
use tollgate_core::{Error as CoreError, Limit, Limiter, Mode, Policy, Rule, Verdict, Visitor};

use axum::response::{IntoResponse, Response};

use crate::{Rejection, VisitorSource, check};

/// Builds the key parts of one rule from a [`Call`], or says why it cannot.
type KeyParts = dyn Fn(&Call<'_>) -> Result<Vec<String>, Unkeyed> + Send + Sync;

/// Why a call has no key for a rule.
enum Unkeyed {
    /// The route lacks a value its key needs (a path parameter, a visitor
    /// source): answered with 500 and an error log.
    Misconfigured,
    /// The caller sent no usable value (a header missing, repeated or not
    /// text): answered with 400.
    BadRequest,
}

/// The cost of one rule for a [`Call`]; `None` when the call does not say
/// (answered with 400).
type Cost = dyn Fn(&Call<'_>) -> Option<u64> + Send + Sync;

/// The response to a refused call, when the application shapes it.
type Respond = dyn Fn(&Rejection) -> Response + Send + Sync;

/// One value of a declared key, for [`Guard::keyed`].
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyPart {
    /// The path parameter of this name.
    Param(&'static str),
    /// The visitor (the guard needs a [`VisitorSource`]).
    Visitor,
    /// The header of this name (only when something upstream authenticated
    /// it). A call without it, with it twice or not as text is answered 400,
    /// whose text names no header (the header is logged at debug level).
    Header(&'static str),
    /// The path segment at this position ([`Call::segment`]), for services
    /// without axum's path parameters. A call whose path has none there
    /// (or not UTF-8 once percent-decoded) is answered 400.
    Segment(usize),
}

/// A rule of a guard: how to key it and what one call costs.
#[derive(Clone)]
struct Checked {
    rule: Rule,
    key: Arc<KeyParts>,
    cost: Option<Arc<Cost>>,
}

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
    rules: Vec<Checked>,
    /// `None`: as [`Guard::spends`] decides from the rules.
    mode: Option<Mode>,
    policy: Policy,
    /// `None`: the rejection's own response.
    respond: Option<Arc<Respond>>,
}

impl Guard {
    /// A guard checking in `limiter`, with no rules yet, under
    /// [`Policy::FailClosed`], spending as [`spends`](Guard::spends) says
    /// until [`mode`](Guard::mode) says otherwise.
    pub fn new(limiter: Limiter) -> Guard {
        Guard {
            limiter,
            visitors: None,
            rules: Vec::new(),
            mode: None,
            policy: Policy::FailClosed,
            respond: None,
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
    /// A function giving another number of parts than the rule declares is
    /// answered with 500 and an error log; [`keyed`](Guard::keyed) refuses
    /// such a route when it is built.
    pub fn rule<F>(self, rule: &Rule, key: F) -> Guard
    where
        F: Fn(&Call<'_>) -> Option<Vec<String>> + Send + Sync + 'static,
    {
        self.keyed_by(rule, move |call| key(call).ok_or(Unkeyed::Misconfigured))
    }

    fn keyed_by<F>(mut self, rule: &Rule, key: F) -> Guard
    where
        F: Fn(&Call<'_>) -> Result<Vec<String>, Unkeyed> + Send + Sync + 'static,
    {
        self.rules.push(Checked {
            rule: rule.clone(),
            key: Arc::new(key),
            cost: None,
        });
        self
    }

    /// Adds a rule keyed by these parts of a call, checked now against the
    /// parts the rule declares.
    ///
    /// ```
    /// use tollgate_axum::{Guard, KeyPart};
    /// # fn demo(limiter: tollgate_core::Limiter) -> Result<(), tollgate_core::Error> {
    /// let rules = tollgate_core::RuleSet::defaults();
    /// let guard = Guard::new(limiter).keyed(rules.get("ask-site")?, &[KeyPart::Param("project")])?;
    /// assert!(Guard::new(guard.limiter().clone()).keyed(rules.get("ask-site")?, &[]).is_err());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`CoreError::KeyArity`] when the rule declares another number of parts.
    pub fn keyed(self, rule: &Rule, parts: &[KeyPart]) -> Result<Guard, CoreError> {
        if parts.len() != rule.key_parts().len() {
            return Err(CoreError::KeyArity {
                rule: rule.name().to_owned(),
                expected: rule.key_parts().len(),
                found: parts.len(),
            });
        }
        let parts = parts.to_vec();
        Ok(self.keyed_by(rule, move |call| {
            parts
                .iter()
                .map(|part| {
                    let value = match part {
                        KeyPart::Param(name) => call.param(name).ok_or(Unkeyed::Misconfigured),
                        KeyPart::Visitor => call.visitor().ok_or(Unkeyed::Misconfigured),
                        KeyPart::Header(name) => call.header(name).ok_or_else(|| {
                            // The caller is not told which header: it is one
                            // that something upstream vouches for.
                            tracing::debug!(
                                header = name,
                                "a key header is missing, repeated or not text"
                            );
                            Unkeyed::BadRequest
                        }),
                        KeyPart::Segment(index) => {
                            return call
                                .segment(*index)
                                .map(Cow::into_owned)
                                .ok_or(Unkeyed::BadRequest);
                        }
                    };
                    value.map(str::to_owned)
                })
                .collect()
        }))
    }

    /// Sets the cost of the rule added last, read from the request head (a
    /// header, or a constant per route); 1 unit otherwise. `None` or a cost
    /// out of range is answered with 400 before anything is counted. Costs
    /// estimated from the body are checked in the handler with [`check`].
    pub fn cost<F>(mut self, cost: F) -> Guard
    where
        F: Fn(&Call<'_>) -> Option<u64> + Send + Sync + 'static,
    {
        if let Some(last) = self.rules.last_mut() {
            last.cost = Some(Arc::new(cost));
        }
        self
    }

    /// The limiter this guard checks in.
    pub fn limiter(&self) -> &Limiter {
        &self.limiter
    }

    /// How the check spends budget, whatever the rules are (by default, as
    /// [`spends`](Guard::spends) says).
    pub fn mode(mut self, mode: Mode) -> Guard {
        self.mode = Some(mode);
        self
    }

    /// How the check spends budget: as [`mode`](Guard::mode) set it, else
    /// [`Mode::Reserve`] (all or nothing) when a rule may be a budget shared
    /// beyond the caller another rule limits, so that callers refused by
    /// that rule cannot drain it: a rule that is not public, or rules keyed
    /// by different parts (`ask-site` by project beside `ask` by project and
    /// visitor, or one by project beside one by visitor); else
    /// [`Mode::Count`] (every call counted, as the seed's fail-open routes
    /// are, each with one rule).
    pub fn spends(&self) -> Mode {
        if let Some(mode) = self.mode {
            return mode;
        }
        // Asked per call: compared in place, without allocating.
        let first = self.rules.first().map(|c| c.rule.key_parts());
        let same_parts = |c: &Checked| {
            let parts = c.rule.key_parts();
            first.is_some_and(|first| {
                first.len() == parts.len() && parts.iter().all(|p| first.contains(p))
            })
        };
        let shared = self
            .rules
            .iter()
            .any(|c| !c.rule.is_public() || !same_parts(c));
        if shared { Mode::Reserve } else { Mode::Count }
    }

    /// What a store failure does ([`Policy::FailClosed`] by default).
    pub fn policy(mut self, policy: Policy) -> Guard {
        self.policy = policy;
        self
    }

    /// A store failure allows the call (logged): [`Policy::FailOpen`], for
    /// signed-in actions.
    pub fn fail_open(self) -> Guard {
        self.policy(Policy::FailOpen)
    }

    /// A store failure refuses the call with 503: [`Policy::FailClosed`]
    /// (the default), for anonymous expensive routes.
    pub fn fail_closed(self) -> Guard {
        self.policy(Policy::FailClosed)
    }

    /// Answers every refused call (429, 503, 400, 500) with what `respond`
    /// makes of its [`Rejection`], instead of the rejection's own
    /// `application/problem+json` response: an application's own body, or
    /// another protocol's refusal. The guard adds nothing to it.
    pub fn on_rejection<F>(mut self, respond: F) -> Guard
    where
        F: Fn(&Rejection) -> Response + Send + Sync + 'static,
    {
        self.respond = Some(Arc::new(respond));
        self
    }

    /// The response to the refusal `rejection`: as
    /// [`on_rejection`](Guard::on_rejection) shapes it, else its own.
    pub fn respond(&self, rejection: Rejection) -> Response {
        match &self.respond {
            Some(respond) => respond(&rejection),
            None => rejection.into_response(),
        }
    }

    /// The response to the refusal of a request with these `headers`: a
    /// gRPC request's is its gRPC status (feature `tonic`, [`grpc`](crate::grpc)),
    /// unless [`on_rejection`](Guard::on_rejection) shapes every refusal.
    pub(crate) fn refuse(&self, headers: &HeaderMap, rejection: Rejection) -> Response {
        #[cfg(feature = "tonic")]
        if self.respond.is_none() && crate::grpc::is_grpc(headers) {
            return crate::grpc::respond(&rejection);
        }
        #[cfg(not(feature = "tonic"))]
        let _ = headers;
        self.respond(rejection)
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
        let verdict = check(&self.limiter, &limits, self.spends(), self.policy).await?;
        if let Some(visitor) = visitor {
            parts.extensions.insert(visitor);
        }
        parts.extensions.insert(verdict.clone());
        Ok(verdict)
    }

    fn limits(&self, call: &Call<'_>) -> Result<Vec<Limit>, Rejection> {
        self.rules
            .iter()
            .map(|checked| {
                let rule = &checked.rule;
                let parts = match (checked.key)(call) {
                    Ok(parts) => parts,
                    Err(Unkeyed::BadRequest) => {
                        return Err(Rejection::BadRequest(
                            "a value identifying the call is missing or malformed".into(),
                        ));
                    }
                    Err(Unkeyed::Misconfigured) => {
                        tracing::error!(
                            rule = rule.name(),
                            path = %call.parts.uri.path(),
                            "the guard found no value for a key part of this rule; \
                             check the route's parameters and the guard's visitor source"
                        );
                        return Err(Rejection::Internal);
                    }
                };
                let limit = rule.limit(&parts).map_err(Rejection::from)?;
                match &checked.cost {
                    None => Ok(limit),
                    Some(cost) => match cost(call) {
                        Some(units) => limit.with_cost(units).map_err(Rejection::from),
                        None => Err(Rejection::BadRequest(
                            "the call's cost is missing or malformed".into(),
                        )),
                    },
                }
            })
            .collect()
    }
}

impl fmt::Debug for Guard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rules: Vec<&str> = self.rules.iter().map(|c| c.rule.name()).collect();
        f.debug_struct("Guard")
            .field("rules", &rules)
            .field("visitors", &self.visitors)
            .field("mode", &self.spends())
            .field("policy", &self.policy)
            .field("shaped_rejections", &self.respond.is_some())
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

    /// The path's segment at `index` (0 is the first after the leading
    /// `/`), percent-decoded as axum decodes path parameters (so that
    /// `/sites/%64ocs/ask` and `/sites/docs/ask` key alike); `None` past the
    /// last, when empty, or when not UTF-8 once decoded. For services
    /// without axum's path parameters: `/sites/docs/ask` has `docs` at 1.
    /// A key function that returns `None` for a call is answered 500, as a
    /// misconfigured route; [`KeyPart::Segment`] answers such a call 400.
    pub fn segment(&self, index: usize) -> Option<Cow<'a, str>> {
        let path = self.parts.uri.path();
        let raw = path
            .strip_prefix('/')
            .unwrap_or(path)
            .split('/')
            .nth(index)
            .filter(|segment| !segment.is_empty())?;
        percent_encoding::percent_decode_str(raw).decode_utf8().ok()
    }

    /// The request extension of type `T`: e.g. the principal an
    /// authentication layer put there, to key a rule by.
    pub fn extension<T: Send + Sync + 'static>(&self) -> Option<&'a T> {
        self.parts.extensions.get::<T>()
    }

    /// The whole request head (method, URI, headers, extensions).
    pub fn parts(&self) -> &'a Parts {
        self.parts
    }
}
