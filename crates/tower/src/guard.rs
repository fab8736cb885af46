//! [`Guard`]: checks a service's limits before it runs.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use bytes::Bytes;
use http::HeaderMap;
use http::request::Parts;
use http_body::Body;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use tollgate_core::{Limit, Limiter, Mode, Policy, Rule, Verdict, Visitor};

use crate::body::BoxError;
use crate::key::Path;
use crate::{Error, GuardBody, Key, KeyPart, Rejection, Unkeyed, VisitorSource, check};

/// Builds the key parts of one rule from a [`Call`], or says why it cannot.
type KeyParts = dyn Fn(&Call<'_>) -> Result<Vec<String>, Unkeyed> + Send + Sync;

/// The cost of one rule for a [`Call`]; `None` when the call does not say
/// (answered with 400).
type Cost = dyn Fn(&Call<'_>) -> Option<u64> + Send + Sync;

/// The response to a refused call, when the application shapes it.
type Respond = dyn Fn(&Rejection) -> http::Response<UnsyncBoxBody<Bytes, BoxError>> + Send + Sync;

/// A rule of a guard: how to key it and what one call costs.
#[derive(Clone)]
struct Checked {
    rule: Rule,
    key: Arc<KeyParts>,
    cost: Option<Arc<Cost>>,
}

/// A guard: checks every rule's limit in one store call **before** the
/// service runs. A refused call gets a [`Rejection`] (429, 503, 400 or 500; a
/// gRPC call its status, feature `tonic`) and the service never runs; an
/// allowed call reaches the service with the [`Verdict`] and the
/// [`Visitor`] in its request extensions, and its response gets the
/// `RateLimit-Policy` and `RateLimit` fields (unless the verdict is
/// degraded) and holds the call's leases until its body ends.
///
/// A guard is a tower [`Layer`](tower_layer::Layer) over any service of
/// `http` requests: an axum route, a hyper service, a tower-http stack, a
/// tonic server. Rules are keyed by [`KeyPart`]s (the visitor, a header or
/// gRPC metadata, a path parameter of the guard's [`path`](Guard::path)
/// or a segment by position, a principal in the request's extensions, an
/// application's own [`Key`]) or by a function of the [`Call`]:
///
/// ```
/// use tollgate_tower::{Guard, KeyPart, Trust, VisitorSource};
/// use tollgate_core::{Limiter, RuleSet};
///
/// fn guard(limiter: Limiter) -> Result<Guard, Box<dyn std::error::Error>> {
///     let rules = RuleSet::defaults();
///     let guard = Guard::new(limiter)
///         .path("/sites/{project}/ask")?
///         .visitors(VisitorSource::new(Trust::Peer))
///         .keyed(rules.get("ask-burst")?, &[KeyPart::Visitor])?
///         .keyed(rules.get("ask")?, &[KeyPart::Param("project"), KeyPart::Visitor])?
///         .keyed(rules.get("ask-site")?, &[KeyPart::Param("project")])?
///         .keyed(rules.get("ask-all")?, &[])?
///         .fail_closed();
///     Ok(guard)
/// }
/// ```
#[derive(Clone)]
pub struct Guard {
    limiter: Limiter,
    /// `None`: every call is guarded, and has no path parameters.
    path: Option<Arc<Path>>,
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
            path: None,
            visitors: None,
            rules: Vec::new(),
            mode: None,
            policy: Policy::FailClosed,
            respond: None,
        }
    }

    /// Guards the calls of the route `template` names
    /// (`/sites/{project}/ask`: literal segments, and parameters each a
    /// whole segment, named for [`KeyPart::Param`] and [`Call::param`]);
    /// calls of other routes pass through unchecked ([`guards`](Guard::guards)).
    /// So one guard works mounted on its route (axum's `route_layer`) or on
    /// a whole router or server (axum's `Router::layer`, tonic's
    /// `Server::layer`, a tower-http stack), and path parameters do not
    /// depend on which. A path matches however it is written (empty
    /// segments, a trailing slash, percent-encoded literals). Write the
    /// path as the guard sees the request's: inside a router nested under
    /// `/api` (`route_layer` there), without `/api`, which that router
    /// strips; on the outer router (`layer` there, or around a
    /// `nest_service`), with it. With the `axum` feature, a call axum
    /// routed to the template's route whose path the template does not
    /// match (the prefix written inside the nested router) is refused 500,
    /// not let through. One guard per route: put on a route of another
    /// path, it lets that route's calls through. Set it before the rules
    /// keyed by its parameters.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidPath`] when `template` does not start with `/`, has
    /// a parameter that is not a whole segment or not `{name}` (letters,
    /// digits, `_`), or names one twice.
    pub fn path(mut self, template: &str) -> Result<Guard, Error> {
        self.path = Some(Arc::new(Path::parse(template)?));
        Ok(self)
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

    /// Adds a rule keyed by these parts of a call, checked now: as many
    /// as the rule declares, and each [`KeyPart::Param`] named by the
    /// guard's [`path`](Guard::path).
    ///
    /// ```
    /// use tollgate_tower::{Guard, KeyPart};
    /// # fn demo(limiter: tollgate_core::Limiter) -> Result<(), Box<dyn std::error::Error>> {
    /// let rules = tollgate_core::RuleSet::defaults();
    /// let site = rules.get("ask-site")?;
    /// let guard = Guard::new(limiter).path("/sites/{project}/ask")?;
    /// assert!(guard.clone().keyed(site, &[KeyPart::Param("project")]).is_ok());
    /// assert!(guard.clone().keyed(site, &[]).is_err()); // `ask-site` takes one part
    /// assert!(guard.keyed(site, &[KeyPart::Param("org")]).is_err()); // not in the path
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::KeyArity`] when the rule declares another number of parts;
    /// [`Error::UnknownParam`] for a parameter the guard's path does not name.
    pub fn keyed(self, rule: &Rule, parts: &[KeyPart]) -> Result<Guard, Error> {
        if parts.len() != rule.key_parts().len() {
            return Err(Error::KeyArity {
                rule: rule.name().to_owned(),
                expected: rule.key_parts().len(),
                found: parts.len(),
            });
        }
        for param in parts.iter().filter_map(KeyPart::param) {
            if !self.path.as_ref().is_some_and(|p| p.names(param)) {
                return Err(Error::UnknownParam {
                    rule: rule.name().to_owned(),
                    param: param.to_owned(),
                    path: self.path.as_ref().map(|p| p.as_str().to_owned()),
                });
            }
        }
        let parts = parts.to_vec();
        Ok(self.keyed_by(rule, move |call| {
            parts
                .iter()
                .map(|part| part.value(call).map(Cow::into_owned))
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
    /// `application/problem+json` response (or gRPC status): an
    /// application's own body, or another protocol's refusal. The guard
    /// adds nothing to it.
    pub fn on_rejection<F, B>(mut self, respond: F) -> Guard
    where
        F: Fn(&Rejection) -> http::Response<B> + Send + Sync + 'static,
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        self.respond = Some(Arc::new(move |rejection: &Rejection| {
            respond(rejection).map(|body| body.map_err(Into::into).boxed_unsync())
        }));
        self
    }

    /// The response to the refusal of a call with these `headers`: as
    /// [`on_rejection`](Guard::on_rejection) shapes it; else a gRPC call's
    /// status (feature `tonic`, the `grpc` module); else the
    /// rejection's own.
    pub fn respond<B>(
        &self,
        headers: &HeaderMap,
        rejection: Rejection,
    ) -> http::Response<GuardBody<B>> {
        if let Some(respond) = &self.respond {
            return respond(&rejection).map(GuardBody::shaped);
        }
        #[cfg(feature = "tonic")]
        if crate::grpc::is_grpc(headers) {
            return crate::grpc::respond(&rejection).map(GuardBody::text);
        }
        #[cfg(not(feature = "tonic"))]
        let _ = headers;
        rejection.into_http().map(GuardBody::text)
    }

    /// Whether this guard checks `request`: always without a
    /// [`path`](Guard::path) template; with one, when the request's path
    /// matches it, or (with the `axum` feature) when axum routed the
    /// request to the template's route (`MatchedPath`, less the prefix of
    /// the router it is nested in). A call of another route passes
    /// through: a guard mounted with `layer` on a whole router checks its
    /// own route only.
    pub fn guards<B>(&self, request: &http::Request<B>) -> bool {
        !matches!(
            self.reach(request.uri().path(), request.extensions()),
            Reach::Other
        )
    }

    /// How this guard stands to a call of `path`: the one place that
    /// matches its template, once per call.
    pub(crate) fn reach(&self, path: &str, extensions: &http::Extensions) -> Reach {
        let Some(template) = &self.path else {
            return Reach::Checked;
        };
        if template.matches(path) {
            return Reach::Checked;
        }
        #[cfg(feature = "axum")]
        if let Some(route) = extensions.get::<axum::extract::MatchedPath>() {
            let nested = extensions.get::<axum::extract::NestedPath>();
            if template.is_route(route.as_str(), nested.map(|n| n.as_str())) {
                return Reach::Misplaced;
            }
        }
        #[cfg(not(feature = "axum"))]
        let _ = extensions;
        Reach::Other
    }

    /// Checks one call: its verdict when allowed (also put in the request
    /// extensions, with the visitor), the rejection otherwise. A call whose
    /// path the guard's template does not match is refused 500 (logged): a
    /// guard inside a route of another path (a nested router's prefix, a
    /// second route) would key it by the wrong values.
    pub async fn admit(&self, parts: &mut Parts) -> Result<Verdict, Rejection> {
        match self.reach(parts.uri.path(), &parts.extensions) {
            Reach::Checked => self.check(parts).await,
            Reach::Misplaced | Reach::Other => Err(self.misplaced(parts)),
        }
    }

    /// The refusal of a call the guard checks whose path its template does
    /// not match (logged).
    pub(crate) fn misplaced(&self, parts: &Parts) -> Rejection {
        tracing::error!(
            template = self.path.as_ref().map(|p| p.as_str()),
            path = %parts.uri.path(),
            "the guard's path does not match a call it guards: write the \
             route's path as the guard sees it (inside a nested router, without \
             its prefix)"
        );
        Rejection::Internal
    }

    /// [`admit`](Guard::admit), for a call whose path the template matches.
    pub(crate) async fn check(&self, parts: &mut Parts) -> Result<Verdict, Rejection> {
        let visitor = match &self.visitors {
            Some(source) => Some(source.visitor(parts)?),
            None => None,
        };
        #[cfg(feature = "axum")]
        let params = match &self.path {
            Some(_) => None,
            None => axum_params(parts).await?,
        };
        let call = Call {
            parts,
            path: self.path.as_deref(),
            #[cfg(feature = "axum")]
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
                            "the guard found no value for a key part of this rule; check \
                             its key function, the guard's visitor source, and the layers \
                             that put key values in a call's extensions"
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
            .field("path", &self.path.as_ref().map(|p| p.as_str()))
            .field("rules", &rules)
            .field("visitors", &self.visitors)
            .field("mode", &self.spends())
            .field("policy", &self.policy)
            .field("shaped_rejections", &self.respond.is_some())
            .finish_non_exhaustive()
    }
}

/// How a guard stands to a call ([`Guard::reach`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reach {
    /// Another route's: passed through unchecked.
    Other,
    /// This guard's: checked.
    Checked,
    /// Routed to this guard's route, its path not the template's: 500.
    /// (Only axum routes calls before a guard sees them.)
    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
    Misplaced,
}

/// The path parameters axum's router found, for a guard without a path
/// template (`None` outside an axum route).
#[cfg(feature = "axum")]
async fn axum_params(parts: &mut Parts) -> Result<Option<axum::extract::RawPathParams>, Rejection> {
    use axum::extract::FromRequestParts;
    use axum::extract::rejection::RawPathParamsRejection;
    match axum::extract::RawPathParams::from_request_parts(parts, &()).await {
        Ok(params) => Ok(Some(params)),
        Err(RawPathParamsRejection::InvalidUtf8InPathParam(_)) => Err(Rejection::BadRequest(
            "a path parameter is not valid UTF-8".into(),
        )),
        Err(_) => Ok(None),
    }
}

/// What a key function can read of a call: its path parameters, headers,
/// extensions and visitor.
#[derive(Debug)]
pub struct Call<'a> {
    parts: &'a Parts,
    path: Option<&'a Path>,
    #[cfg(feature = "axum")]
    params: Option<&'a axum::extract::RawPathParams>,
    visitor: Option<&'a Visitor>,
}

impl<'a> Call<'a> {
    /// The path parameter `name` of the guard's [`path`](Guard::path)
    /// template (`project` in `/sites/{project}/ask`), percent-decoded;
    /// `None` when the template has no such parameter, or the value is not
    /// UTF-8 once decoded. A guard without a template has none, except
    /// (with the `axum` feature) those of the axum route it was put on
    /// with `route_layer`: give it a template to key by parameters however
    /// it is mounted.
    pub fn param(&self, name: &str) -> Option<Cow<'a, str>> {
        match self.path {
            Some(path) => path.param(self.parts.uri.path(), name),
            #[cfg(feature = "axum")]
            None => self
                .params?
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, value)| Cow::Borrowed(value)),
            #[cfg(not(feature = "axum"))]
            None => None,
        }
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

    /// The path's non-empty segment at `index` (`/sites/docs/ask` has
    /// `docs` at 1, as `//sites/docs/ask/` does), percent-decoded as axum
    /// decodes path parameters (so that `/sites/%64ocs/ask` and
    /// `/sites/docs/ask` key alike); `None` past the last, or when not
    /// UTF-8 once decoded. A key function that returns `None` for a call
    /// is answered 500, as a misconfigured route; [`KeyPart::Segment`]
    /// answers such a call 400.
    pub fn segment(&self, index: usize) -> Option<Cow<'a, str>> {
        crate::key::decoded(crate::key::segments(self.parts.uri.path()).nth(index)?)
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
