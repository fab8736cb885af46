//! Store URLs may hold passwords: [`shown`] is what `tollgate` prints of
//! one, and [`Redactor`] takes secrets out of every line it prints.

/// The scheme and host of a store URL, without user, password, path or
/// query: `redis://:pw@cache:6380/2` is `redis://cache:6380`. A unix socket
/// or SQLite URL shows its path (without a query), `memory` itself.
pub(crate) fn shown(url: &str) -> String {
    let url = url.trim();
    let Some((scheme, rest)) = url.split_once(':') else {
        return url.to_owned();
    };
    let Some(rest) = rest.strip_prefix("//") else {
        // sqlite:PATH, memory: a path, which holds no password.
        return format!("{scheme}:{}", before_query(rest));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let host = rest[..end]
        .rsplit_once('@')
        .map_or(&rest[..end], |(_, h)| h);
    if host.is_empty() {
        // unix:///path/to/socket, sqlite:///path: the path is the place.
        format!("{scheme}://{}", before_query(&rest[end..]))
    } else {
        format!("{scheme}://{host}")
    }
}

fn before_query(text: &str) -> &str {
    text.find(['?', '#']).map_or(text, |at| &text[..at])
}

/// Takes the secrets of one store URL (its password or bare user, and the
/// values of `pass`, `password` and `token` query fields), and the user
/// information of any URL, out of text before it is printed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Redactor {
    secrets: Vec<String>,
}

impl Redactor {
    /// A redactor for the secrets of `url`.
    pub(crate) fn for_url(url: &str) -> Redactor {
        let mut secrets = Vec::new();
        if let Some((_, rest)) = url.split_once("://") {
            let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
            if let Some((userinfo, _)) = rest[..end].rsplit_once('@') {
                let password = userinfo.split_once(':').map_or(userinfo, |(_, p)| p);
                secrets.push(password.to_owned());
            }
        }
        if let Some((_, query)) = url.split_once('?') {
            for field in query.split(['&', '#']) {
                if let Some((name, value)) = field.split_once('=')
                    && matches!(
                        name.to_ascii_lowercase().as_str(),
                        "pass" | "password" | "token"
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

    /// `text` with every secret replaced by `***`, and the user information
    /// of every `scheme://user:password@host` in it too.
    pub(crate) fn clean(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for secret in &self.secrets {
            text = text.replace(secret.as_str(), "***");
        }
        without_userinfo(&text)
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
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
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
            ("valkey://u:p@[::1]:6390/0?x=1", "valkey://[::1]:6390"),
            (
                "unix:///run/redis.sock?pass=hunter2",
                "unix:///run/redis.sock",
            ),
            ("sqlite:/var/lib/t.sqlite3", "sqlite:/var/lib/t.sqlite3"),
            ("sqlite:///var/lib/t.sqlite3", "sqlite:///var/lib/t.sqlite3"),
            ("postgres://app:hunter2@db/x?password=y", "postgres://db"),
            ("memory", "memory"),
        ] {
            assert_eq!(shown(url), want, "{url}");
        }
    }

    #[test]
    fn secrets_and_userinfo_are_taken_out() {
        let r = Redactor::for_url("redis://app:hunt%40er2@cache:6380/0");
        let text = r.clean("auth hunt@er2 failed for redis://x:y@cache, hunt%40er2");
        assert_eq!(text, "auth *** failed for redis://***@cache, ***");
        let r = Redactor::for_url("unix:///s.sock?db=1&pass=s3cret");
        assert_eq!(r.clean("WRONGPASS s3cret"), "WRONGPASS ***");
        assert_eq!(Redactor::default().clean("redis://h:1/0"), "redis://h:1/0");
    }
}
