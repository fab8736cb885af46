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
//!   itself), never its user information (up to the last `@`, a `/`, `?` or
//!   `#` in a password included), path or query; and of a text that is not
//!   a store URL, nothing ([`NOT_A_URL`]).
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
//! assert_eq!(shown("redis://:hun/ter#2@cache:6380"), "redis://cache:6380");
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

/// What [`shown`] gives after `scheme://` when the host cannot be told
/// from a password, path or query (see [`after_userinfo`]).
const HOST_NOT_SHOWN: &str = "(host not shown)";

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
/// `redis://cache:6380`). The user information runs up to the last `@`
/// after `scheme://`, so a password holding `/`, `?`, `#` or `@` is hidden
/// whole (`redis://:p/w#d@cache` is `redis://cache`). When the text after
/// that `@` may be a path's or a query's rather than the host (an `@` after
/// a `/`, `?` or `#` that may end the host: `redis://h/0?user=a@b`,
/// `redis://user/p@cache`), the host is not shown either:
/// `redis://(host not shown)`. That hides more than needed, never less. A URL
/// without a host shows its path without a query
/// (`unix:///run/redis.sock`, `sqlite:///var/lib/t.sqlite3`), as does
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
    let Some(after_userinfo) = after_userinfo(rest) else {
        return format!("{scheme}://{HOST_NOT_SHOWN}");
    };
    let (host, path) = after_userinfo.split_at(
        after_userinfo
            .find(['/', '?', '#'])
            .unwrap_or(after_userinfo.len()),
    );
    if host.is_empty() {
        // unix:///path/to/socket, sqlite:///path: the path is the place.
        format!("{scheme}://{}", before_query(path))
    } else {
        format!("{scheme}://{host}")
    }
}

/// What follows the user information of `rest`, the text after
/// `scheme://`: all of it after its LAST `@` (all of it when it has none),
/// or `None` when that may not be shown.
///
/// The user information may hold a `/`, `?` or `#` (a base64 key, a
/// generated password), and clients differ on where it ends: tokio-postgres
/// at the first `@` of the whole text, the `url` crate (so redis-rs) at the
/// last `@` before the first `/`, `?` or `#`. So the authority cannot be
/// taken to end at the first `/`, `?` or `#`: that shows the start of such
/// a password (`postgres://app:se/cret@db` showed `postgres://app:se`).
/// Up to the last `@` of the whole text is the most any client may take
/// for user information, so nothing before it is shown.
///
/// An `@` in a path or query (`redis://h/0?user=a@b`) is taken for the end
/// of user information too, which over-redacts, the safe direction. But
/// then what follows it is a path's or a query's (`?pass=se@cret` has
/// `cret` after its `@`), so it is shown only when no reading of the URL
/// makes it one: when a `/`, `?` or `#` comes before the last `@`, only
/// when none comes between the first `@` and the last (so that it is the
/// host as tokio-postgres reads it), and the text up to the first `/`, `?`
/// or `#` is no host with a numeric port (so that the `url` crate cannot
/// read it as one: `app:se` and `:Ab` are the start of a password, `h`,
/// `h:6379` and the empty authority of `unix:///…` are hosts).
fn after_userinfo(rest: &str) -> Option<&str> {
    const ENDS: [char; 3] = ['/', '?', '#'];
    let (Some(first), Some(last)) = (rest.find('@'), rest.rfind('@')) else {
        return Some(rest);
    };
    let after = &rest[last + 1..];
    match rest[..last].find(ENDS) {
        None => Some(after),
        Some(end) => {
            let host_for_all = !rest[first..last].contains(ENDS) && !parses_as_host(&rest[..end]);
            host_for_all.then_some(after)
        }
    }
}

/// Whether a URL parser may take `authority` (no `@` in it) for a host and
/// port: it is empty (`unix:///path`), or a host followed by nothing, by
/// `:` or by `:` and digits (`cache`, `10.0.0.1:6379`, `[::1]:6390`,
/// `h1:7000,h2:7001`, but not `app:se` or `:Ab`).
fn parses_as_host(authority: &str) -> bool {
    if authority.is_empty() {
        return true;
    }
    let (host, port) = match authority.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port),
        _ => (authority, ""),
    };
    !host.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
}

/// Each text of `rest`, the text after `scheme://`, that some client may
/// take for its user information: all of it up to each of its `@`s (see
/// [`after_userinfo`]), shortest first.
fn userinfo_candidates(rest: &str) -> impl Iterator<Item = &str> {
    rest.match_indices('@').map(|(at, _)| &rest[..at])
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
    /// it has no password) as each client may read it (the user information
    /// ending at any `@`, the first as tokio-postgres reads it, the last as
    /// [`shown`] does, so a `/`, `?` or `#` in it is no end), the values of
    /// its `pass`, `password`, `token` and `_token` query fields, each also
    /// percent-decoded; and, when the text is not a store URL at all (see
    /// [`shown`]) and at least 6 characters long, the whole text, which may
    /// be a secret pasted in the URL's place.
    #[must_use]
    pub fn for_url(url: &str) -> Redactor {
        let mut secrets = Vec::new();
        let text = url.trim();
        if shown(text) == NOT_A_URL && text.len() >= SHORTEST_SECRET {
            // Nothing prints it (it is not shown), and this is a second
            // guard, for a message that quotes it.
            secrets.push(text.to_owned());
        }
        if let Some((_, rest)) = url.split_once("://") {
            // The password (or the user) of each reading of the user
            // information: up to the first `@` as tokio-postgres reads it,
            // up to the last as `shown` does, and those between, so that
            // the whole password is taken out whichever way a store's
            // message quotes it.
            for userinfo in userinfo_candidates(rest) {
                let password = userinfo.split_once(':').map_or(userinfo, |(_, p)| p);
                secrets.push(password.to_owned());
            }
        }
        if let Some((_, query)) = url.split_once('?') {
            // A `?` may be in the password, and a `?` or `#` in a value:
            // fields are split at every `?`, `&` and `#`, at `?` and `&`,
            // and at `&` alone, so that each value is taken out both up to
            // and past such a character.
            let fields = query
                .split(['?', '&', '#'])
                .chain(query.split(['?', '&']))
                .chain(query.split('&'));
            for field in fields {
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
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
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
///
/// A URL in a text ends at a space, a quote or a backtick; its user
/// information ends at its last `@` (see [`after_userinfo`]), a `/`, `?` or
/// `#` before it included.
fn without_userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| matches!(c, '`' | '\'' | '"') || c.is_whitespace())
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

    /// Passwords holding each character that may end a URL's authority
    /// (`/`, `?`, `#`), an `@`, a `+` and a `%2F` escape, and all of them:
    /// base64 keys and generated passwords hold them, and the clients take
    /// them (tokio-postgres ends the user information at the first `@`, the
    /// `url` crate at the last `@` before a `/`, `?` or `#`).
    const ODD_PASSWORDS: &[&str] = &[
        "Qx7v/Kp3w",
        "Qx7v#Kp3w",
        "Qx7v?Kp3w",
        "Qx7v@Kp3w",
        "Qx7v+Kp3w",
        "Qx7v%2FKp3w",
        "/Qx7v/Kp3w/",
        "Qx7v/Kp3w#Zr8m?Jd2n@Hb5t+Lc6y%2FGf4s&Wn3p=",
    ];

    /// Whether `text` shows any of `secret`: a run of 4 or more ASCII
    /// letters and digits of it, in any case.
    fn shows_any_of(text: &str, secret: &str) -> bool {
        let text = text.to_lowercase();
        secret
            .to_lowercase()
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|run| run.len() >= 4)
            .any(|run| text.contains(run))
    }

    /// How a URL of [`with_password`] holds its password.
    #[derive(Clone, Copy, PartialEq)]
    enum Form {
        /// `user:PASSWORD@`
        Named,
        /// `:PASSWORD@`
        Unnamed,
        /// `PASSWORD@`, a user alone.
        Alone,
    }

    /// Store URLs planting `password`; what [`shown`] gives of each when
    /// it shows the host; how each holds `password`.
    fn with_password(password: &str) -> Vec<(String, &'static str, Form)> {
        vec![
            (
                format!("redis://:{password}@127.0.0.1:6379/0"),
                "redis://127.0.0.1:6379",
                Form::Unnamed,
            ),
            (
                format!("redis://default:{password}@cache:6380"),
                "redis://cache:6380",
                Form::Named,
            ),
            (
                format!("redis://{password}@cache:6380/2"),
                "redis://cache:6380",
                Form::Alone,
            ),
            (
                format!("rediss://app:{password}@[::1]:6390/0?protocol=resp3"),
                "rediss://[::1]:6390",
                Form::Named,
            ),
            (
                format!("redis-cluster://:{password}@10.0.0.1:7000,10.0.0.2:7000"),
                "redis-cluster://10.0.0.1:7000,10.0.0.2:7000",
                Form::Unnamed,
            ),
            (
                format!("postgres://app:{password}@127.0.0.1:1/x?sslmode=disable"),
                "postgres://127.0.0.1:1",
                Form::Named,
            ),
            (
                format!("postgresql://{password}@db.internal/x"),
                "postgresql://db.internal",
                Form::Alone,
            ),
            (
                format!("upstash+https://u:{password}@eu1.upstash.io"),
                "upstash+https://eu1.upstash.io",
                Form::Named,
            ),
            (
                format!("redis+unix://:{password}@/run/redis.sock?db=1"),
                "redis+unix:///run/redis.sock",
                Form::Unnamed,
            ),
        ]
    }

    #[test]
    fn a_password_holding_a_slash_hash_question_mark_or_at_is_not_shown() {
        for password in ODD_PASSWORDS {
            for (url, want, form) in with_password(password) {
                let got = shown(&url);
                assert!(!shows_any_of(&got, password), "{url}: {got}");
                // What comes before the first `/`, `?` or `#` may be a host
                // the `url` crate reads (a user alone, `Qx7v` in
                // `redis://Qx7v/Kp3w@cache`, or a user and an empty port,
                // `default:` in `redis://default:/Qx7v@cache`): the host
                // after the `@` is not shown, as it may be in a path.
                let hidden = match form {
                    Form::Alone => password.contains(['/', '?', '#']),
                    Form::Named => password.starts_with(['/', '?', '#']),
                    Form::Unnamed => false,
                };
                let want = if hidden {
                    let (scheme, _) = want.split_once("://").unwrap_or_default();
                    format!("{scheme}://{HOST_NOT_SHOWN}")
                } else {
                    want.to_owned()
                };
                assert_eq!(got, want, "{url}");
            }
        }
        // The reviewer's cases.
        assert_eq!(
            shown("postgres://app:se/cret-pw@127.0.0.1:1/x"),
            "postgres://127.0.0.1:1"
        );
        assert_eq!(
            shown("redis://:Ab#cd-secret@host:6379"),
            "redis://host:6379"
        );
    }

    #[test]
    fn an_at_after_the_host_hides_the_host_too() {
        // Over-redaction, the safe direction: the text up to the last `@`
        // may be a password holding `/`, `?` or `#`, so it is not shown;
        // and what follows it may be a path's or a query's (the end of a
        // password in `?pass=`), so it is not shown either.
        for url in [
            "redis://cache:6380/0?user=a@b",
            "redis://:pw@cache:6380/0?x=a@b",
            "unix:///run/redis.sock?pass=hunter2@Zr8mJd2n",
            "unix:///run/redis.sock?pass=Qx7v#Kp3w@Zr8mJd2n",
            "upstash+https://127.0.0.1:1/Qx7v@Zr8mJd2n",
            "postgres://app:se/cret@db/x?password=Qx7v@Zr8mJd2n",
            // The `url` crate reads `user` and `1234` as host and port.
            "redis://user:1234#Qx7v@Zr8mJd2n",
            "redis://Qx7v/Kp3w@Zr8mJd2n",
            // Three slashes: no host for any client, and what follows may
            // be a password typed one slash too far.
            "redis:///:hunter2@Zr8mJd2n",
            "sqlite:///var/lib/t@Zr8mJd2n",
        ] {
            let (scheme, _) = url.split_once(':').unwrap_or_default();
            assert_eq!(shown(url), format!("{scheme}://{HOST_NOT_SHOWN}"), "{url}");
        }
        // Between the first `@` and the last, no `/`, `?` or `#`: what
        // follows the last is the host for every client.
        assert_eq!(shown("redis://me:p@ss@host"), "redis://host");
        assert_eq!(shown("redis://:a/b@c@host:1/0"), "redis://host:1");
        // The free text of an error still keeps what follows the `@`.
        let r = Redactor::for_url("redis://cache:6380/0?user=a@b");
        assert_eq!(
            r.clean("at redis://cache:6380/0?user=a@b"),
            "at redis://***@b"
        );
    }

    #[test]
    fn every_part_of_a_password_holding_odd_characters_is_taken_out() {
        for password in ODD_PASSWORDS {
            let decoded = percent_decoded(password).unwrap_or_else(|| (*password).to_owned());
            // What a client may have taken for the password: up to the
            // first `@`, or to the first `/`, `?` or `#`.
            let first_at = password.split('@').next().unwrap_or_default();
            for (url, _, _) in with_password(password) {
                let r = Redactor::for_url(&url);
                for text in [
                    format!("cannot connect to {url}"),
                    format!("connect to '{url}' failed: refused"),
                    format!("WRONGPASS invalid password {password}"),
                    format!("password authentication failed: {decoded}"),
                    format!("rejected \"{first_at}\""),
                    format!("{url}\n{url}"),
                ] {
                    let clean = r.clean(&text);
                    assert!(!shows_any_of(&clean, password), "{url}: {text} -> {clean}");
                    assert!(!shows_any_of(&clean, &decoded), "{url}: {text} -> {clean}");
                }
            }
        }
    }

    #[test]
    fn user_information_holding_odd_characters_is_taken_out_of_any_url() {
        // No redactor for these URLs: `clean` finds each in the text.
        let r = Redactor::default();
        for password in ODD_PASSWORDS {
            for (url, want, _) in with_password(password) {
                let clean = r.clean(&format!("failed for {url}, retrying ({url})"));
                assert!(!shows_any_of(&clean, password), "{url}: {clean}");
                let host = want.split_once("://").map_or(want, |(_, host)| host);
                assert!(clean.contains(&format!("://***@{host}")), "{url}: {clean}");
                assert!(clean.starts_with("failed for "), "{clean}");
                assert!(clean.ends_with(")"), "{clean}");
            }
        }
        assert_eq!(
            r.clean("at `redis://:a/b#c?d@e@h:1/0` and 'redis://:x/y@h:2'"),
            "at `redis://***@h:1/0` and 'redis://***@h:2'"
        );
    }

    #[test]
    fn query_secrets_after_a_password_holding_a_question_mark_are_taken_out() {
        let r = Redactor::for_url("redis://:Qx7v?Kp3w@cache/0?token=Zr8mJd2n#frag");
        let clean = r.clean("refused Qx7v?Kp3w, then Zr8mJd2n, then Zr8mJd2n#frag");
        assert_eq!(clean, "refused ***, then ***, then ***");
    }

    #[test]
    fn percent_escapes_decode_only_when_they_make_utf8() {
        assert_eq!(percent_decoded("a%40b%2"), Some("a@b%2".to_owned()));
        assert_eq!(percent_decoded("a%zz"), Some("a%zz".to_owned()));
        assert_eq!(percent_decoded("%ff"), None);
        assert_eq!(percent_decoded("plain"), None);
    }
}
