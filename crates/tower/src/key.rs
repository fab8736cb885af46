//! How a guard keys a rule: [`KeyPart`]s (the ready-made ones, and any
//! [`Key`] of an application's own), and the path template that names a
//! path's parameters.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::{Call, Error};

/// Why a call has no value for a key part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unkeyed {
    /// The caller sent no usable value (a header missing, repeated or not
    /// text; no path segment there): answered with 400, whose text names
    /// no header.
    BadRequest,
    /// The service lacks a value the key needs (no visitor source, no
    /// principal where an authentication layer should have put one):
    /// answered with 500 and an error log.
    Misconfigured,
}

/// One key part of a rule, read from a call: implement it for a value
/// the ready-made [`KeyPart`]s do not read, and key a rule by it with
/// [`KeyPart::custom`].
pub trait Key: Send + Sync + 'static {
    /// The value of this part for `call`.
    ///
    /// # Errors
    ///
    /// [`Unkeyed`]: why the call has none.
    fn value<'c>(&self, call: &Call<'c>) -> Result<Cow<'c, str>, Unkeyed>;
}

/// One value of a declared key, for [`Guard::keyed`](crate::Guard::keyed).
#[derive(Clone)]
#[non_exhaustive]
pub enum KeyPart {
    /// The path parameter of this name, in the guard's
    /// [`path`](crate::Guard::path) template (`project` in
    /// `/sites/{project}/ask`), percent-decoded; a guard without that
    /// parameter is refused when it is built.
    Param(&'static str),
    /// The visitor (the guard needs a [`VisitorSource`](crate::VisitorSource)).
    Visitor,
    /// The header (or gRPC metadata) of this name, only when something
    /// upstream authenticated it. A call without it, with it twice or not
    /// as text is answered 400, whose text names no header (the header is
    /// logged at debug level).
    Header(&'static str),
    /// The path segment at this position ([`Call::segment`]). A call whose
    /// path has none there (or not UTF-8 once percent-decoded) is answered
    /// 400.
    Segment(usize),
    /// A key part of the application's own ([`KeyPart::custom`],
    /// [`KeyPart::extension`]).
    Custom(Arc<dyn Key>),
}

impl KeyPart {
    /// A key part read by `key`.
    pub fn custom(key: impl Key) -> KeyPart {
        KeyPart::Custom(Arc::new(key))
    }

    /// The request extension of type `T`, as text: the principal an
    /// authentication layer put there. A call without one is answered 500
    /// (the layer that vouches for the caller did not run).
    ///
    /// ```
    /// use std::fmt;
    /// use tollgate_tower::KeyPart;
    ///
    /// #[derive(Clone)]
    /// struct Principal(String);
    ///
    /// impl fmt::Display for Principal {
    ///     fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    ///         f.write_str(&self.0)
    ///     }
    /// }
    ///
    /// let part = KeyPart::extension::<Principal>();
    /// ```
    pub fn extension<T: fmt::Display + Send + Sync + 'static>() -> KeyPart {
        KeyPart::custom(Extension::<T>(PhantomData))
    }

    /// The path parameter this part needs, if any.
    pub(crate) fn param(&self) -> Option<&'static str> {
        match self {
            KeyPart::Param(name) => Some(name),
            _ => None,
        }
    }
}

impl fmt::Debug for KeyPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyPart::Param(name) => f.debug_tuple("Param").field(name).finish(),
            KeyPart::Visitor => f.write_str("Visitor"),
            KeyPart::Header(name) => f.debug_tuple("Header").field(name).finish(),
            KeyPart::Segment(index) => f.debug_tuple("Segment").field(index).finish(),
            KeyPart::Custom(_) => f.write_str("Custom"),
        }
    }
}

impl Key for KeyPart {
    fn value<'c>(&self, call: &Call<'c>) -> Result<Cow<'c, str>, Unkeyed> {
        match self {
            // `keyed` made sure the guard's path names it; a call reaches
            // the keys only when its path matched.
            KeyPart::Param(name) => call.param(name).ok_or(Unkeyed::BadRequest),
            KeyPart::Visitor => call
                .visitor()
                .map(Cow::Borrowed)
                .ok_or(Unkeyed::Misconfigured),
            KeyPart::Header(name) => call.header(name).map(Cow::Borrowed).ok_or_else(|| {
                // The caller is not told which header: it is one that
                // something upstream vouches for.
                tracing::debug!(
                    header = name,
                    "a key header is missing, repeated or not text"
                );
                Unkeyed::BadRequest
            }),
            KeyPart::Segment(index) => call.segment(*index).ok_or(Unkeyed::BadRequest),
            KeyPart::Custom(key) => key.value(call),
        }
    }
}

/// [`KeyPart::extension`].
struct Extension<T>(PhantomData<fn() -> T>);

impl<T: fmt::Display + Send + Sync + 'static> Key for Extension<T> {
    fn value<'c>(&self, call: &Call<'c>) -> Result<Cow<'c, str>, Unkeyed> {
        match call.extension::<T>() {
            Some(value) => Ok(Cow::Owned(value.to_string())),
            None => {
                tracing::error!(
                    extension = std::any::type_name::<T>(),
                    "a key's request extension is missing: the layer that puts it there did not run"
                );
                Err(Unkeyed::Misconfigured)
            }
        }
    }
}

/// A guard's path template: `/sites/{project}/ask`, literal segments
/// (kept percent-decoded) and whole-segment parameters. Paths are compared
/// by their non-empty segments (so `//sites/docs/ask/` is
/// `/sites/docs/ask`), each percent-decoded (so `/sites/docs/%61sk` is
/// too), erring toward guarding a call a lenient service would answer as
/// the route. (A service that decodes `%2F` before it splits a path, or
/// resolves `..`, sees other paths than these.)
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Path {
    template: String,
    segments: Vec<Segment>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    Literal(String),
    Param(String),
}

/// The non-empty segments of `path`.
pub(crate) fn segments(path: &str) -> impl Iterator<Item = &str> + Clone {
    path.split('/').filter(|segment| !segment.is_empty())
}

/// `segment` percent-decoded, when UTF-8.
pub(crate) fn decoded(segment: &str) -> Option<Cow<'_, str>> {
    percent_encoding::percent_decode_str(segment)
        .decode_utf8()
        .ok()
}

impl Path {
    pub(crate) fn parse(template: &str) -> Result<Path, Error> {
        let invalid = |reason| Error::InvalidPath {
            path: template.to_owned(),
            reason,
        };
        if !template.starts_with('/') {
            return Err(invalid("it must start with `/`"));
        }
        let mut parsed = Vec::new();
        for segment in segments(template) {
            let segment = match segment.strip_prefix('{') {
                Some(inner) => {
                    let name = inner
                        .strip_suffix('}')
                        .ok_or_else(|| invalid("a `{` without its `}`"))?;
                    let valid = !name.is_empty()
                        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
                    if !valid {
                        return Err(invalid(
                            "a parameter is `{name}`, its name letters, digits and `_`",
                        ));
                    }
                    if parsed.contains(&Segment::Param(name.to_owned())) {
                        return Err(invalid("a parameter is named twice"));
                    }
                    Segment::Param(name.to_owned())
                }
                None if segment.contains(['{', '}']) => {
                    return Err(invalid("a parameter must be a whole segment"));
                }
                None => match decoded(segment) {
                    Some(literal) if !literal.contains('/') => {
                        Segment::Literal(literal.into_owned())
                    }
                    _ => {
                        return Err(invalid(
                            "a segment is not UTF-8 once percent-decoded, or holds `/`",
                        ));
                    }
                },
            };
            parsed.push(segment);
        }
        Ok(Path {
            template: template.to_owned(),
            segments: parsed,
        })
    }

    /// The template as written.
    pub(crate) fn as_str(&self) -> &str {
        &self.template
    }

    /// Whether the template names the parameter `name`.
    pub(crate) fn names(&self, name: &str) -> bool {
        self.index(name).is_some()
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.segments
            .iter()
            .position(|s| matches!(s, Segment::Param(n) if n == name))
    }

    /// Whether `path` (a request's, not decoded) matches: as many
    /// non-empty segments, each literal equal once decoded.
    pub(crate) fn matches(&self, path: &str) -> bool {
        let mut given = segments(path);
        let all = self
            .segments
            .iter()
            .all(|segment| match (segment, given.next()) {
                (Segment::Literal(literal), Some(value)) => {
                    decoded(value).is_some_and(|value| value == literal.as_str())
                }
                (Segment::Param(_), Some(_)) => true,
                (_, None) => false,
            });
        all && given.next().is_none()
    }

    /// Whether `route`, an axum route's path as its router matched it
    /// (`MatchedPath`, with any nest prefix), is this template's route:
    /// the same segments, literals equal once decoded and parameters
    /// (whatever their names) where the template has them; or the same
    /// once `nested`, the prefix of the router the route is nested in
    /// (`NestedPath`), is taken off.
    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
    pub(crate) fn is_route(&self, route: &str, nested: Option<&str>) -> bool {
        if self.is_segments(segments(route)) {
            return true;
        }
        let Some(nested) = nested else {
            return false;
        };
        // The route less the nest prefix, compared without allocating.
        let mut rest = segments(route);
        let mut prefix = segments(nested).peekable();
        prefix.peek().is_some()
            && prefix.all(|segment| rest.next() == Some(segment))
            && self.is_segments(rest)
    }

    fn is_segments<'r>(&self, route: impl Iterator<Item = &'r str> + Clone) -> bool {
        route.clone().count() == self.segments.len()
            && self.segments.iter().zip(route).all(|(segment, given)| {
                let param = given.starts_with('{') && given.ends_with('}');
                match segment {
                    Segment::Literal(literal) => {
                        !param && decoded(given).is_some_and(|given| given == literal.as_str())
                    }
                    Segment::Param(_) => param && !given.starts_with("{*"),
                }
            })
    }

    /// The parameter `name` of `path` (which [`matches`](Path::matches)),
    /// percent-decoded; `None` when not UTF-8.
    pub(crate) fn param<'p>(&self, path: &'p str, name: &str) -> Option<Cow<'p, str>> {
        decoded(segments(path).nth(self.index(name)?)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_matches_its_paths_as_a_lenient_router_would() {
        let path = Path::parse("/sites/{project}/ask").unwrap_or_else(|e| panic!("{e}"));
        assert!(path.names("project") && !path.names("ask"));
        // Empty segments, a trailing slash and encoded literals are the route.
        for same in [
            "/sites/docs/ask",
            "/sites/%64ocs/ask",
            "/sites/docs/ask/",
            "//sites/docs//ask",
            "/sites/docs/%61sk",
        ] {
            assert!(path.matches(same), "{same}");
            assert_eq!(
                path.param(same, "project").as_deref(),
                Some("docs"),
                "{same}"
            );
        }
        for other in [
            "/sites//ask",
            "/sites/docs",
            "/sites/docs/ask/more",
            "/site/docs/ask",
            "/",
            "",
        ] {
            assert!(!path.matches(other), "{other}");
        }
        assert_eq!(path.param("/sites/%FF/ask", "project"), None);
        let root = Path::parse("/").unwrap_or_else(|e| panic!("{e}"));
        assert!(root.matches("/") && root.matches("") && !root.matches("/a"));
    }

    #[test]
    fn a_route_is_the_templates_when_it_is_the_same_but_for_its_nest_prefix() {
        let path = Path::parse("/sites/{project}/ask").unwrap_or_else(|e| panic!("{e}"));
        for (route, nested) in [
            ("/sites/{project}/ask", None),
            ("/sites/{site}/ask", None),
            ("/sites/{project}/%61sk", None),
            ("/api/sites/{project}/ask", Some("/api")),
            ("/a/b/sites/{project}/ask", Some("/a/b")),
        ] {
            assert!(path.is_route(route, nested), "{route} in {nested:?}");
        }
        for (route, nested) in [
            ("/site/{project}/ask", None),
            ("/sites/{project/ask", None),
            ("/sites/project}/ask", None),
            ("/{sites}/{project}/ask", None),
            ("/api/sites/{project}/ask", None),
            ("/v1/sites/{project}/ask", Some("/api")),
            ("/sites/{project}/ask/stream", None),
            ("/sites/docs/ask", None),
            ("/sites/{*rest}", None),
            ("/healthz", None),
        ] {
            assert!(!path.is_route(route, nested), "{route} in {nested:?}");
        }
        let root = Path::parse("/").unwrap_or_else(|e| panic!("{e}"));
        assert!(root.is_route("/", None) && !root.is_route("/healthz", None));
        let encoded = Path::parse("/caf%C3%A9/{x}").unwrap_or_else(|e| panic!("{e}"));
        assert!(encoded.is_route("/caf%C3%A9/{x}", None) && encoded.matches("/café/1"));
    }

    #[test]
    fn key_parts_debug_as_what_they_read() {
        let shown: Vec<String> = [
            KeyPart::Param("project"),
            KeyPart::Visitor,
            KeyPart::Header("x-api-key"),
            KeyPart::Segment(1),
            KeyPart::extension::<String>(),
        ]
        .iter()
        .map(|part| format!("{part:?}"))
        .collect();
        assert_eq!(
            shown,
            [
                "Param(\"project\")",
                "Visitor",
                "Header(\"x-api-key\")",
                "Segment(1)",
                "Custom"
            ]
        );
        assert_eq!(KeyPart::Param("project").param(), Some("project"));
        assert_eq!(KeyPart::Segment(1).param(), None);
    }

    #[test]
    fn a_template_is_kept_as_written() {
        let path = Path::parse("/sites/{project}/%61sk").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(path.as_str(), "/sites/{project}/%61sk");
    }

    #[test]
    fn a_malformed_template_is_refused() {
        for bad in [
            "/a/%FF",
            "/a%2Fb/{p}",
            "sites/{p}",
            "/sites/{p",
            "/sites/{}",
            "/a/{p}/{p}",
            "/a/x{p}",
            "/a/{p-q}",
            "/a/{*rest}",
        ] {
            assert!(
                matches!(Path::parse(bad), Err(Error::InvalidPath { .. })),
                "{bad}"
            );
        }
    }
}
