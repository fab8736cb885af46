//! What of a store URL may be printed: the one rule every tollgate program
//! (the `tollgate` CLI, the demo, the REST proxy) and [`open_store`]'s
//! errors follow.
//!
//! A store URL may hold a password (`redis://:PASSWORD@host`), a user, a
//! token in its query (`?_token=…`), and a text given where a store URL
//! goes may be a secret pasted in its place. So:
//!
//! - [`shown`] is all of a store URL that may be printed: its scheme and
//!   host (a unix socket's or SQLite file's path, `memory` or `upstash`
//!   itself), never its user information, path or query; and of a text that
//!   is not a store URL, nothing ([`NOT_A_URL`]).
//! - [`looks_like_scheme`] is when a text before `:` may be named as a
//!   scheme (as [`OpenError::UnknownScheme`] names one).
//! - [`Redactor`] takes the secrets of one store URL (and the user
//!   information of any URL) out of a text about to be printed, such as a
//!   store's own error message or a command-line parser's.
//!
//! ```
//! use tollgate::url::{NOT_A_URL, Redactor, shown};
//!
//! assert_eq!(shown("redis://:hunter2@cache:6380/2"), "redis://cache:6380");
//! assert_eq!(shown("sqlite:counters.sqlite3"), "sqlite:counters.sqlite3");
//! assert_eq!(shown("hunter2@cache:6380"), NOT_A_URL);
//!
//! let redactor = Redactor::for_url("redis://app:hunter2@cache:6380/0");
//! assert_eq!(
//!     redactor.clean("WRONGPASS hunter2 for redis://app:hunter2@cache:6380"),
//!     "WRONGPASS *** for redis://***@cache:6380"
//! );
//! ```
//!
//! [`open_store`]: crate::open_store
//! [`OpenError::UnknownScheme`]: crate::OpenError::UnknownScheme

use std::fmt;

/// What [`shown`] gives for a text that is not a store URL: nothing of it,
/// since it may be a secret pasted in the URL's place.
pub const NOT_A_URL: &str = "(not a URL: not shown)";

/// The store URLs that are a scheme alone.
const SCHEME_ALONE: &[&str] = &["memory", "upstash", "sqlite"];

/// The shortest text given in a store URL's place that [`Redactor::for_url`]
/// takes for a secret: a shorter one would garble every message it occurs
/// in, and is no secret worth the name.
const SHORTEST_SECRET: usize = 6;

/// Whether `text` may be shown as a URL's scheme: up to 16 ASCII letters,
/// digits, `+`, `-` or `.`, starting with a letter (RFC 3986's form, and
/// short), so that a secret pasted in a URL's place (`TOKEN://…`) is not.
///
/// ```
/// use tollgate::url::looks_like_scheme;
///
/// assert!(looks_like_scheme("redis"));
/// assert!(looks_like_scheme("upstash+https"));
/// assert!(!looks_like_scheme("AXXXsecretTOKENwithMoreThan16"));
/// assert!(!looks_like_scheme("1hunter2"));
/// assert!(!looks_like_scheme(""));
/// ```
#[must_use]
pub fn looks_like_scheme(text: &str) -> bool {
    text.len() <= 16
        && text.starts_with(|c: char| c.is_ascii_alphabetic())
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b))
}

/// All of a store URL that may be printed: its scheme and host, without
/// user, password, path or query (`redis://:pw@cache:6380/2` is
/// `redis://cache:6380`). A URL without a host shows its path without a
/// query (`unix:///run/redis.sock`, `sqlite:///var/lib/t.sqlite3`), as does
/// `sqlite:PATH`; a scheme that is a URL alone (`memory`, `upstash`) shows
/// itself.
///
/// A text that is not a store URL (no `scheme://` with a scheme that
/// [`looks_like_scheme`], no `sqlite:PATH`, no scheme alone) is
/// [`NOT_A_URL`]: `hunter2@cache`, `default:hunter2@cache`, `memory:hunter2`
/// and a token pasted alone are not shown at all. Surrounding whitespace is
/// ignored.
#[must_use]
pub fn shown(url: &str) -> String {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once(':') else {
        return if SCHEME_ALONE.iter().any(|s| url.eq_ignore_ascii_case(s)) {
            url.to_owned()
        } else {
            NOT_A_URL.to_owned()
        };
    };
    if !looks_like_scheme(scheme) {
        return NOT_A_URL.to_owned();
    }
    let Some(rest) = rest.strip_prefix("//") else {
        // sqlite:PATH: a path, which holds no password; `memory:` alone;
        // anything else (`user:password@host`) may hold one.
        let alone = rest.is_empty() && SCHEME_ALONE.iter().any(|s| scheme.eq_ignore_ascii_case(s));
        return if alone || scheme.eq_ignore_ascii_case("sqlite") {
            format!("{scheme}:{}", before_query(rest))
        } else {
            NOT_A_URL.to_owned()
        };
    };
    let (authority, path) = rest.split_at(authority_end(rest));
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.is_empty() {
        // unix:///path/to/socket, sqlite:///path: the path is the place.
        format!("{scheme}://{}", before_query(path))
    } else {
        format!("{scheme}://{host}")
    }
}

/// Where the authority (`user:password@host:port`) after `scheme://` ends.
fn authority_end(rest: &str) -> usize {
    rest.find(['/', '?', '#']).unwrap_or(rest.len())
}

/// `text` up to its query or fragment.
fn before_query(text: &str) -> &str {
    text.find(['?', '#']).map_or(text, |at| &text[..at])
}

/// Takes secrets out of a text before it is printed: those of one store URL
/// (see [`Redactor::for_url`]), each replaced by `***`, and the user
/// information of every `scheme://user:password@host` in the text.
///
/// Its `Debug` shows how many secrets it holds, never them.
#[derive(Clone, Default)]
pub struct Redactor {
    /// The texts to replace, longest first.
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor for the secrets of `url`: its password (or its user, when
    /// it has no password), the values of its `pass`, `password`, `token`
    /// and `_token` query fields, each also percent-decoded; and, when the
    /// text is not a store URL at all (see [`shown`]) and at least 6
    /// characters long, the whole text, which may be a secret pasted in the
    /// URL's place.
    #[must_use]
    pub fn for_url(url: &str) -> Redactor {
        let mut secrets = Vec::new();
        let text = url.trim();
        if shown(text) == NOT_A_URL && text.len() >= SHORTEST_SECRET {
            // Nothing prints it (it is not shown), and this is a second
            // guard, for a message that quotes it.
            secrets.push(text.to_owned());
        }
        if let Some((_, rest)) = url.split_once("://")
            && let Some((userinfo, _)) = rest[..authority_end(rest)].rsplit_once('@')
        {
            let password = userinfo.split_once(':').map_or(userinfo, |(_, p)| p);
            secrets.push(password.to_owned());
        }
        if let Some((_, query)) = url.split_once('?') {
            for field in query.split(['&', '#']) {
                if let Some((name, value)) = field.split_once('=')
                    && matches!(
                        name.to_ascii_lowercase().as_str(),
                        "pass" | "password" | "token" | "_token"
                    )
                {
                    secrets.push(value.to_owned());
                }
            }
        }
        let decoded: Vec<String> = secrets.iter().filter_map(|s| percent_decoded(s)).collect();
        secrets.extend(decoded);
        secrets.retain(|s| !s.is_empty());
        // Longest first, so that a secret holding another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// A redactor for an argument a command-line parser quotes in a usage
    /// error (an unexpected argument): an option (a text starting with `-`)
    /// is no secret, and is shown so that a mistyped flag can be fixed; any
    /// other argument is taken as a store URL given without its flag, or a
    /// secret pasted there, and its secrets are those of
    /// [`Redactor::for_url`].
    ///
    /// ```
    /// use tollgate::url::Redactor;
    ///
    /// let error = "unexpected argument 'Pl4ntedSecret' found";
    /// assert_eq!(
    ///     Redactor::for_argument("Pl4ntedSecret").clean(error),
    ///     "unexpected argument '***' found"
    /// );
    /// let error = "unexpected argument '--stroe' found";
    /// assert_eq!(Redactor::for_argument("--stroe").clean(error), error);
    /// ```
    #[must_use]
    pub fn for_argument(arg: &str) -> Redactor {
        if arg.starts_with('-') {
            Redactor::default()
        } else {
            Redactor::for_url(arg)
        }
    }

    /// `text` with every secret replaced by `***`, and the user information
    /// of every `scheme://user:password@host` in it too.
    #[must_use]
    pub fn clean(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in &self.secrets {
            text = text.replace(secret.as_str(), "***");
        }
        without_userinfo(&text)
    }
}

impl fmt::Debug for Redactor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

/// `text` with the user information of each URL in it replaced by `***`.
fn without_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| matches!(c, '/' | '?' | '#' | '`' | '\'' | '"') || c.is_whitespace())
            .unwrap_or(tail.len());
        match tail[..end].rfind('@') {
            Some(user_end) => {
                out.push_str("***");
                out.push_str(&tail[user_end..end]);
            }
            None => out.push_str(&tail[..end]),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// `text` with `%XX` escapes decoded, when it has any and they make UTF-8.
fn percent_decoded(text: &str) -> Option<String> {
    if !text.contains('%') {
        return None;
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (byte, hex) {
            (b'%', Some(decoded)) => {
                out.push(decoded);
                i += 3;
            }
            _ => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shows_scheme_and_host_only() {
        for (url, want) in [
            ("redis://:hunter2@cache:6380/2", "redis://cache:6380"),
            (
                "rediss://default:hunter2@eu1.example:6379",
                "rediss://eu1.example:6379",
            ),
            ("redis://127.0.0.1", "redis://127.0.0.1"),
            ("redis://me:p@ss@host", "redis://host"),
            ("  redis://h:1  ", "redis://h:1"),
            ("valkey://u:p@[::1]:6390/0?x=1", "valkey://[::1]:6390"),
            (
                "unix:///run/redis.sock?pass=hunter2",
                "unix:///run/redis.sock",
            ),
            ("sqlite:/var/lib/t.sqlite3", "sqlite:/var/lib/t.sqlite3"),
            ("sqlite:///var/lib/t.sqlite3", "sqlite:///var/lib/t.sqlite3"),
            ("postgres://app:hunter2@db/x?password=y", "postgres://db"),
            ("memory", "memory"),
            ("MEMORY", "MEMORY"),
            ("memory:", "memory:"),
            ("upstash", "upstash"),
            (
                "upstash+https://u:hunter2@eu1.upstash.io?_token=hunter2",
                "upstash+https://eu1.upstash.io",
            ),
            ("x-my.store+1://h", "x-my.store+1://h"),
        ] {
            assert_eq!(shown(url), want, "{url}");
        }
    }

    #[test]
    fn a_text_that_is_not_a_store_url_is_not_shown() {
        for text in [
            "hunter2",
            "s3cr3t-token-value",
            "hunter2@cache:6380",
            "default:hunter2@cache:6380",
            "hunter2:",
            "memory:hunter2",
            "AXXXsecretTOKENwithMoreThan16://h",
            "1hunter2://h",
            "hun ter2://h",
        ] {
            assert_eq!(shown(text), NOT_A_URL, "{text}");
            let r = Redactor::for_url(text);
            assert_eq!(r.clean(&format!("x {text} y")), "x *** y", "{text}");
        }
        assert_eq!(shown(""), NOT_A_URL);
    }

    #[test]
    fn a_scheme_is_short_ascii_and_starts_with_a_letter() {
        for scheme in [
            "redis",
            "rediss-cluster",
            "upstash+https",
            "x-my.store+1",
            "A",
        ] {
            assert!(looks_like_scheme(scheme), "{scheme}");
        }
        assert!(looks_like_scheme(&"a".repeat(16)));
        for text in [
            "",
            &"a".repeat(17),
            "1redis",
            "+redis",
            "red is",
            "red\nis",
            "redis/",
            "hunter2@h",
            "rédis",
        ] {
            assert!(!looks_like_scheme(text), "{text:?}");
        }
    }

    #[test]
    fn secrets_and_userinfo_are_taken_out() {
        let r = Redactor::for_url("redis://app:hunt%40er2@cache:6380/0");
        let text = r.clean("auth hunt@er2 failed for redis://x:y@cache, hunt%40er2");
        assert_eq!(text, "auth *** failed for redis://***@cache, ***");
        let r = Redactor::for_url("unix:///s.sock?db=1&pass=s3cret");
        assert_eq!(r.clean("WRONGPASS s3cret"), "WRONGPASS ***");
        let r = Redactor::for_url("upstash+http://h:1?_token=tok-9&x=1");
        assert_eq!(r.clean("refused tok-9"), "refused ***");
        assert_eq!(Redactor::default().clean("redis://h:1/0"), "redis://h:1/0");
        // A short text in a URL's place is no secret: it is left alone.
        assert_eq!(Redactor::for_url("docs").clean("docs"), "docs");
    }

    #[test]
    fn an_argument_is_cleaned_as_a_store_url_unless_it_is_an_option() {
        let error = "unexpected argument 'redis://:hunter2@h:1/0' found";
        assert_eq!(
            Redactor::for_argument("redis://:hunter2@h:1/0").clean(error),
            "unexpected argument 'redis://***@h:1/0' found"
        );
        let error = "unexpected argument 'hunter2-token' found";
        assert_eq!(
            Redactor::for_argument("hunter2-token").clean(error),
            "unexpected argument '***' found"
        );
        let error = "unexpected argument '--hunter2-flag' found";
        assert_eq!(Redactor::for_argument("--hunter2-flag").clean(error), error);
    }

    #[test]
    fn the_debug_of_a_redactor_shows_no_secret() {
        let r = Redactor::for_url("redis://app:hunter2@cache/0?token=s3cret");
        let text = format!("{r:?} {r:#?}");
        assert!(
            !text.contains("hunter2") && !text.contains("s3cret"),
            "{text}"
        );
        assert!(text.contains("secrets: 2"), "{text}");
    }

    #[test]
    fn percent_escapes_decode_only_when_they_make_utf8() {
        assert_eq!(percent_decoded("a%40b%2"), Some("a@b%2".to_owned()));
        assert_eq!(percent_decoded("a%zz"), Some("a%zz".to_owned()));
        assert_eq!(percent_decoded("%ff"), None);
        assert_eq!(percent_decoded("plain"), None);
    }
}
