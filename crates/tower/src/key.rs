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

/// A guard's path template: `/sites/{project}/ask`, literal segments and
/// whole-segment parameters.
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

impl Path {
    pub(crate) fn parse(template: &str) -> Result<Path, Error> {
        let invalid = |reason| Error::InvalidPath {
            path: template.to_owned(),
            reason,
        };
        let rest = template
            .strip_prefix('/')
            .ok_or_else(|| invalid("it must start with `/`"))?;
        let mut segments = Vec::new();
        for segment in rest.split('/') {
            let parsed = match segment.strip_prefix('{') {
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
                    if segments.contains(&Segment::Param(name.to_owned())) {
                        return Err(invalid("a parameter is named twice"));
                    }
                    Segment::Param(name.to_owned())
                }
                None if segment.contains(['{', '}']) => {
                    return Err(invalid("a parameter must be a whole segment"));
                }
                None => Segment::Literal(segment.to_owned()),
            };
            segments.push(parsed);
        }
        Ok(Path {
            template: template.to_owned(),
            segments,
        })
    }

    /// The template as written.
    pub(crate) fn as_str(&self) -> &str {
        &self.template
    }

    /// The segment index of the parameter `name`.
    pub(crate) fn index(&self, name: &str) -> Option<usize> {
        self.segments
            .iter()
            .position(|s| matches!(s, Segment::Param(n) if n == name))
    }

    /// Whether `path` (a request's, not decoded) matches: as many segments,
    /// each literal equal, each parameter not empty.
    pub(crate) fn matches(&self, path: &str) -> bool {
        let mut given = path.strip_prefix('/').unwrap_or(path).split('/');
        let all = self
            .segments
            .iter()
            .all(|segment| match (segment, given.next()) {
                (Segment::Literal(literal), Some(value)) => literal == value,
                (Segment::Param(_), Some(value)) => !value.is_empty(),
                (_, None) => false,
            });
        all && given.next().is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_template_matches_its_paths_only() {
        let path = Path::parse("/sites/{project}/ask").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(path.index("project"), Some(1));
        assert_eq!(path.index("ask"), None);
        assert!(path.matches("/sites/docs/ask"));
        assert!(path.matches("/sites/%64ocs/ask"));
        for other in [
            "/sites//ask",
            "/sites/docs",
            "/sites/docs/ask/",
            "/site/docs/ask",
            "/",
            "",
        ] {
            assert!(!path.matches(other), "{other}");
        }
        let root = Path::parse("/").unwrap_or_else(|e| panic!("{e}"));
        assert!(root.matches("/") && !root.matches("/a"));
    }

    #[test]
    fn a_malformed_template_is_refused() {
        for bad in [
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
