//! [`open_store`]: a store chosen at run time from a URL, from one table of
//! the stores this build knows.

use std::sync::Arc;

use tollgate_core::{BoxError, Store};

use crate::url::looks_like_scheme;

/// Why [`open_store`] could not open a store. Messages never repeat the URL
/// past its scheme, and name a scheme only when it looks like one, so
/// neither a password in a URL nor a secret pasted in its place is shown.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The URL's scheme is not one of those [`open_store`] lists. It is
    /// named only when it [looks like a scheme](crate::url::looks_like_scheme)
    /// (up to 16 ASCII letters, digits, `+`, `-` or `.`, starting with a
    /// letter) followed by `://`, or is one of the list; otherwise the text
    /// is [`OpenError::NotAUrl`].
    #[error(
        "unknown store URL scheme `{0}`: expected redis://HOST, redis-cluster://HOST:PORT,…, \
         postgres://HOST/DB, upstash, upstash+https://HOST or sqlite:PATH"
    )]
    UnknownScheme(String),
    /// The text does not start with a store URL's scheme: it is not shown,
    /// since it may be a secret pasted in the URL's place.
    #[error(
        "the store URL is not a URL (it is not shown): expected redis://HOST, \
         redis-cluster://HOST:PORT,…, postgres://HOST/DB, upstash, upstash+https://HOST \
         or sqlite:PATH"
    )]
    NotAUrl,
    /// The store of this URL was not compiled in.
    #[error(
        "the {scheme} store is not compiled in: enable the `{feature}` feature of the tollgate crate"
    )]
    NotCompiled {
        /// The URL's scheme, e.g. `redis://`.
        scheme: &'static str,
        /// The cargo feature that adds it.
        feature: &'static str,
    },
    /// An `upstash+http(s)://` URL without `UPSTASH_REDIS_REST_TOKEN` set.
    #[error("the upstash store needs its token in UPSTASH_REDIS_REST_TOKEN")]
    MissingToken,
    /// A `sqlite:` URL without a path.
    #[error("the sqlite store URL has no path: write sqlite:PATH, e.g. sqlite:counters.sqlite3")]
    MissingPath,
    /// The store refused to open (unreachable file, invalid URL, …); the
    /// store's own error is the source.
    #[error("cannot open the {store} store")]
    Open {
        /// Which store, e.g. `redis`, `redis-cluster` or `sqlite`.
        store: &'static str,
        /// The store's error.
        #[source]
        source: BoxError,
    },
}

/// Opens the store a URL names:
///
/// | URL | store | feature |
/// |---|---|---|
/// | `redis://[:PASSWORD@]HOST[:PORT][/DB]` | Redis | `redis` |
/// | `rediss://…` | Redis over TLS | `redis-tls` |
/// | `unix:///PATH` (or `redis+unix://`) | Redis on a unix socket | `redis` |
/// | `redis-cluster://HOST:PORT,HOST:PORT,…` | Redis Cluster | `redis` |
/// | `rediss-cluster://…` | Redis Cluster over TLS | `redis-tls` |
/// | `valkey://…`, `valkeys://…` (or `valkey+unix://`) | Valkey, as Redis | `redis`, `redis-tls` |
/// | `sqlite:PATH` (or `sqlite://PATH`) | one SQLite file | `sqlite` |
/// | `postgres://[USER[:PASSWORD]@]HOST[:PORT]/DB` (or `postgresql://`) | Postgres | `postgres` |
/// | `upstash` | Upstash REST, from `UPSTASH_REDIS_REST_URL` and `UPSTASH_REDIS_REST_TOKEN` | `upstash` |
/// | `upstash+https://HOST` (or `upstash+http://HOST:PORT`) | Upstash REST, token from `UPSTASH_REDIS_REST_TOKEN` | `upstash` |
/// | `memory` | in memory, a **test double** only | `test-util` |
///
/// **Upstash over plain HTTP.** The Upstash token is a bearer token, so
/// `upstash+http://` (and an `http://` `UPSTASH_REDIS_REST_URL`) is opened
/// only to a loopback host: a literal `127.0.0.0/8` or `::1` address, or
/// the exact name `localhost` (no other name is resolved to find out),
/// which is what a local `tollgate-rest-proxy` uses. For a proxy on a
/// private network trusted with the token in clear text, opt in with the
/// query `?plain-http=trusted-network`
/// (`upstash+http://10.0.0.5:8079?plain-http=trusted-network`); without it
/// such a URL is [`OpenError::Open`] with `upstash::Error::PlainHttp` as
/// its source. `https://` needs no opt-in.
///
/// **Secrets.** No error of `open_store` (its text, its `Debug`, its
/// sources) shows a password, a token or a URL's user information, nor a
/// text that is not a URL (a secret pasted in a URL's place); nor does the
/// `Debug` of a store it opens. A URL whose password the store's driver
/// would read in part as the host (a Redis URL with an `@` after a `/`, `?`
/// or `#`, a Postgres URL with a second `@` before its host ends) is
/// [`OpenError::Open`]: percent-encode those characters in the password.
///
/// The store is both a [`CounterStore`](tollgate_core::CounterStore), for a
/// [`Limiter`](tollgate_core::Limiter), and a
/// [`MarkStore`](tollgate_core::MarkStore), for
/// [`Deliveries`](tollgate_core::Deliveries). Opening does not wait for a
/// server: a Redis or Postgres store connects on first use (Postgres
/// creates its schema then).
///
/// # Errors
///
/// [`OpenError::UnknownScheme`] for another scheme, [`OpenError::NotAUrl`]
/// for a text that does not start with one, [`OpenError::NotCompiled`]
/// when the store's feature is off, [`OpenError::MissingPath`] for `sqlite:`
/// alone, [`OpenError::MissingToken`] for `upstash+http(s)://` without a
/// token and [`OpenError::Open`] when the store refuses to open.
pub fn open_store(url: &str) -> Result<Arc<dyn Store>, OpenError> {
    let url = url.trim();
    let (scheme, rest) = url.split_once(':').unwrap_or((url, ""));
    let lowercase = scheme.to_ascii_lowercase();
    let Some((entry, known)) = STORES.iter().find_map(|e| {
        let known = e.schemes.iter().find(|s| **s == lowercase)?;
        Some((e, *known))
    }) else {
        return Err(if rest.starts_with("//") && looks_like_scheme(scheme) {
            OpenError::UnknownScheme(scheme.to_owned())
        } else {
            OpenError::NotAUrl
        });
    };
    // One of the table's own names, never the caller's text.
    let unknown = || OpenError::UnknownScheme(known.to_owned());
    let target = match entry.takes {
        Takes::Url => url,
        Takes::Path => match rest.strip_prefix("//").unwrap_or(rest) {
            "" => return Err(OpenError::MissingPath),
            path => path,
        },
        Takes::Nothing if rest.is_empty() => "",
        Takes::Nothing => return Err(unknown()),
    };
    match entry.open {
        Some(open) => opened(entry.store, open(target)),
        None => Err(OpenError::NotCompiled {
            scheme: entry.scheme,
            feature: entry.feature,
        }),
    }
}

/// Opens a store from what its [`Entry`] takes. Its error is the store's
/// own (an [`OpenError`] of the opener's passes through as it is).
type Opener = fn(&str) -> Result<Arc<dyn Store>, BoxError>;

/// One kind of store `open_store` knows.
struct Entry {
    /// The URL schemes that name it, lowercase.
    schemes: &'static [&'static str],
    /// What its opener is given.
    takes: Takes,
    /// The scheme an [`OpenError::NotCompiled`] names.
    scheme: &'static str,
    /// The store an [`OpenError::Open`] names.
    store: &'static str,
    /// The cargo feature of this crate that compiles it.
    feature: &'static str,
    /// Its opener, when `feature` is on.
    open: Option<Opener>,
}

/// What an [`Opener`] is given.
enum Takes {
    /// The whole URL.
    Url,
    /// The path after `scheme:` or `scheme://`, never empty.
    Path,
    /// Nothing: the scheme alone is the URL.
    Nothing,
}

/// The table of stores: each entry's `open` is compiled, and set, only
/// when its `feature` is on.
macro_rules! stores {
    ($({ feature: $feature:literal, open: $open:expr, $($field:ident: $value:expr,)* })*) => {
        &[$(Entry {
            feature: $feature,
            open: {
                #[cfg(feature = $feature)]
                let open: Option<Opener> = Some($open);
                #[cfg(not(feature = $feature))]
                let open: Option<Opener> = None;
                open
            },
            $($field: $value,)*
        },)*]
    };
}

/// Every store, by scheme.
const STORES: &[Entry] = stores![
    {
        feature: "redis", open: redis,
        schemes: &["redis", "valkey", "unix", "redis+unix", "valkey+unix"],
        takes: Takes::Url, scheme: "redis://", store: "redis",
    }
    {
        feature: "redis-tls", open: redis,
        schemes: &["rediss", "valkeys"],
        takes: Takes::Url, scheme: "rediss://", store: "redis",
    }
    {
        feature: "redis", open: redis_cluster,
        schemes: &["redis-cluster"],
        takes: Takes::Url, scheme: "redis-cluster://", store: "redis-cluster",
    }
    {
        feature: "redis-tls", open: redis_cluster,
        schemes: &["rediss-cluster"],
        takes: Takes::Url, scheme: "rediss-cluster://", store: "redis-cluster",
    }
    {
        feature: "sqlite",
        open: |path| Ok(Arc::new(tollgate_sqlite::SqliteStore::open(path)?)),
        schemes: &["sqlite"],
        takes: Takes::Path, scheme: "sqlite:", store: "sqlite",
    }
    {
        feature: "postgres",
        open: |url| {
            host_without_at(url)?;
            let options = tollgate_postgres::PostgresOptions::default();
            Ok(Arc::new(tollgate_postgres::PostgresStore::connect_lazy(url, options)?))
        },
        schemes: &["postgres", "postgresql"],
        takes: Takes::Url, scheme: "postgres://", store: "postgres",
    }
    {
        feature: "upstash",
        open: |_| Ok(Arc::new(tollgate_redis::UpstashStore::from_env()?)),
        schemes: &["upstash"],
        takes: Takes::Nothing, scheme: "upstash", store: "upstash",
    }
    {
        feature: "upstash",
        open: |url| upstash_at(url, std::env::var("UPSTASH_REDIS_REST_TOKEN").ok()),
        schemes: &["upstash+http", "upstash+https"],
        takes: Takes::Url, scheme: "upstash", store: "upstash",
    }
    {
        feature: "test-util",
        open: |_| Ok(Arc::new(tollgate_memory::MemoryStore::new())),
        schemes: &["memory"],
        takes: Takes::Nothing, scheme: "memory", store: "memory",
    }
];

/// An opener's answer as [`open_store`] gives it: the store's error is
/// [`OpenError::Open`] for `store`, an [`OpenError`] stays as it is.
fn opened(
    store: &'static str,
    made: Result<Arc<dyn Store>, BoxError>,
) -> Result<Arc<dyn Store>, OpenError> {
    made.map_err(|source| match source.downcast::<OpenError>() {
        Ok(own) => *own,
        Err(source) => OpenError::Open { store, source },
    })
}

/// A Redis (or Valkey) server, over TCP, TLS or a unix socket.
#[cfg(feature = "redis")]
fn redis(url: &str) -> Result<Arc<dyn Store>, BoxError> {
    let (scheme, _) = url.split_once(':').unwrap_or_default();
    if !scheme.to_ascii_lowercase().ends_with("unix") {
        userinfo_read_whole(url)?;
    }
    Ok(Arc::new(tollgate_redis::RedisStore::open(url)?))
}

/// A Redis Cluster, over TCP or TLS.
#[cfg(feature = "redis")]
fn redis_cluster(url: &str) -> Result<Arc<dyn Store>, BoxError> {
    userinfo_read_whole(url)?;
    Ok(Arc::new(tollgate_redis::RedisClusterStore::open(url)?))
}

/// Refuses a Redis URL over TCP or TLS with an `@` after a `/`, `?` or `#`
/// (`redis://user:p/w#d@host`): the driver's URL parser ends the user
/// information at that character, so it would read the start of the
/// password as the host or port, look it up, connect there and name it as
/// the store's address. Refusing it loses nothing the driver reads: a
/// Redis URL's path is a database number, its query names a protocol and
/// its fragment is `insecure`, none with an `@`. A unix socket's URL, whose
/// query may hold `user=` and `pass=`, is not refused. The error names no
/// part of the URL.
#[cfg(feature = "redis")]
fn userinfo_read_whole(url: &str) -> Result<(), BoxError> {
    let rest = url.split_once("://").map_or("", |(_, rest)| rest);
    match rest.find(['/', '?', '#']) {
        Some(end) if rest[end..].contains('@') => Err(
            "the URL has an `@` after a `/`, `?` or `#`: percent-encode them in \
             its user name and password (`/` as %2F, `?` as %3F, `#` as %23)"
                .into(),
        ),
        _ => Ok(()),
    }
}

/// Refuses a Postgres URL with an `@` in its host as the driver reads it
/// (`postgres://app:p@ss@db/x`): tokio-postgres ends the user information
/// at the first `@` and the host at the next `/` or `?`, so it would read
/// the rest of the password as the host, look it up and name it as the
/// store's target. (A `/`, `?` or `#` in the password is read right.) The
/// error names no part of the URL.
#[cfg(feature = "postgres")]
fn host_without_at(url: &str) -> Result<(), BoxError> {
    let rest = url.split_once("://").map_or("", |(_, rest)| rest);
    let Some((_, after_user)) = rest.split_once('@') else {
        return Ok(());
    };
    let host = &after_user[..after_user.find(['/', '?']).unwrap_or(after_user.len())];
    if host.contains('@') {
        return Err(
            "the URL has a second `@` before its host ends: percent-encode an `@` \
             in its user name and password as %40"
                .into(),
        );
    }
    Ok(())
}

/// The Upstash REST store at `url` with `token`.
#[cfg(feature = "upstash")]
fn upstash_at(url: &str, token: Option<String>) -> Result<Arc<dyn Store>, BoxError> {
    let token = token.ok_or(OpenError::MissingToken)?;
    Ok(Arc::new(tollgate_redis::UpstashStore::open(url, &token)?))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use tollgate_test_support::secrets::giveaways;

    fn error(url: &str) -> OpenError {
        match open_store(url) {
            Ok(store) => panic!("{url} opened {store:?}"),
            Err(err) => err,
        }
    }

    #[test]
    fn unknown_schemes_are_named_without_the_rest_of_the_url() {
        let err = error("mysql://user:hunter2@db/x");
        assert!(matches!(&err, OpenError::UnknownScheme(s) if s == "mysql"));
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(matches!(error("counters.sqlite3"), OpenError::NotAUrl));
        assert!(matches!(error(""), OpenError::NotAUrl));
        let err = error("MEMORY:extra");
        assert!(matches!(&err, OpenError::UnknownScheme(s) if s == "memory"));
    }

    #[test]
    fn a_text_that_is_not_a_url_is_never_echoed() {
        for text in [
            "s3cr3t-token-value",
            "hunter2@127.0.0.1:6379",
            "default:hunter2@127.0.0.1:6379",
            "hunter2:",
            "AXXXsecretTOKENwithMoreThan16://h",
            "1hunter2://h",
            "hun ter2://h",
            "hunter2\n://h",
            "redis//hunter2",
        ] {
            let err = error(text);
            assert!(matches!(err, OpenError::NotAUrl), "{text:?}: {err:?}");
            let shown = format!("{err} {err:?}");
            assert!(
                !shown.contains("hunter2") && !shown.contains("s3cr3t"),
                "{shown}"
            );
            assert!(!shown.to_lowercase().contains("secrettoken"), "{shown}");
        }
        assert!(matches!(
            error("x-my.store+1://h"),
            OpenError::UnknownScheme(s) if s == "x-my.store+1"
        ));
    }

    #[test]
    fn a_store_not_compiled_in_names_its_feature_and_hides_the_url() {
        let stores = [
            (
                "redis://:hunter2@127.0.0.1:1",
                "redis",
                cfg!(feature = "redis"),
            ),
            (
                "rediss://127.0.0.1:1",
                "redis-tls",
                cfg!(feature = "redis-tls"),
            ),
            (
                "valkeys://127.0.0.1:6380",
                "redis-tls",
                cfg!(feature = "redis-tls"),
            ),
            (
                "rediss-cluster://127.0.0.1:1",
                "redis-tls",
                cfg!(feature = "redis-tls"),
            ),
            (
                "postgres://u:hunter2@db/x",
                "postgres",
                cfg!(feature = "postgres"),
            ),
            (
                "sqlite:counters.sqlite3",
                "sqlite",
                cfg!(feature = "sqlite"),
            ),
            ("upstash", "upstash", cfg!(feature = "upstash")),
            (
                "upstash+https://example.invalid",
                "upstash",
                cfg!(feature = "upstash"),
            ),
            ("memory", "test-util", cfg!(feature = "test-util")), // only a test double
        ];
        for (url, feature, _) in stores.into_iter().filter(|(_, _, compiled)| !compiled) {
            let err = error(url);
            assert!(
                matches!(err, OpenError::NotCompiled { feature: f, .. } if f == feature),
                "{url}: {err:?}"
            );
            let text = err.to_string();
            assert!(text.contains(&format!("`{feature}` feature")), "{text}");
            assert!(!text.contains("hunter2"), "{text}");
        }
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn postgres_urls_open_lazily_and_hide_the_password() {
        for url in [
            "postgres://u:hunter2@127.0.0.1:1/db",
            "postgresql://app@127.0.0.1:1/db",
        ] {
            let store = open_store(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert!(!format!("{store:?}").contains("hunter2"));
        }
    }

    #[test]
    fn sqlite_without_a_path_is_an_error() {
        assert!(matches!(error("sqlite:"), OpenError::MissingPath));
        assert!(matches!(error("sqlite://"), OpenError::MissingPath));
        assert!(matches!(error("sqlite"), OpenError::MissingPath));
    }

    #[cfg(feature = "test-util")]
    #[test]
    fn memory_opens_with_test_util() {
        assert!(open_store("memory").is_ok());
        assert!(open_store("memory:").is_ok());
    }

    #[cfg(feature = "redis")]
    #[test]
    fn every_url_the_redis_store_takes_opens_without_a_server() {
        // Lazy: nothing listens on port 1, and opening still succeeds.
        for url in [
            "redis://127.0.0.1:1",
            "valkey://127.0.0.1:1",
            "unix:///tmp/tollgate-none.sock",
            "redis+unix:///tmp/tollgate-none.sock",
            "valkey+unix:///tmp/tollgate-none.sock",
        ] {
            assert!(open_store(url).is_ok(), "{url}");
        }
    }

    #[cfg(feature = "redis")]
    #[test]
    fn a_redis_url_whose_password_the_driver_would_misread_is_refused() {
        // The driver would read part of each password as the host or port
        // (`H4shx`, `user` and `1234`, …): each is refused, and not named.
        for url in [
            "redis://H4shx#Fq7k@127.0.0.1:1",
            "redis://H4shx/Fq7k@127.0.0.1:1/0",
            "valkey://H4shx?Fq7k@127.0.0.1:1",
            "redis://user:1234#Fq7k@127.0.0.1:1",
            "redis://:H4shx/Fq7k@127.0.0.1:1",
            "redis://:p@ss/w%2Fd@127.0.0.1:1/0",
            "redis-cluster://user:1234#Fq7k@127.0.0.1:1",
        ] {
            let err = error(url);
            let text = shown(&err);
            assert!(
                matches!(err, OpenError::Open { .. }) && text.contains("percent-encode"),
                "{url}: {text}"
            );
            assert!(
                !text.contains("H4shx") && !text.contains("1234") && !text.contains("Fq7k"),
                "{url}: {text}"
            );
        }
        // Escaped, or an `@` before any `/`, `?` or `#`: opened.
        for url in [
            "redis://H4shx%23Fq7k@127.0.0.1:1",
            "redis://:p@ss%2Fw@127.0.0.1:1/0",
            "redis://:p@127.0.0.1:1/0?protocol=resp3",
            "unix:///tmp/tollgate-none.sock?user=a@b&pass=c@d",
            "redis-cluster://:p%2Fw@127.0.0.1:1,127.0.0.1:2",
        ] {
            assert!(open_store(url).is_ok(), "{url}");
        }
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn a_postgres_url_whose_password_the_driver_would_misread_is_refused() {
        // The driver would take `Fq7k@127.0.0.1:1` for the host.
        for url in [
            "postgres://app:H4shx@Fq7k@127.0.0.1:1/db",
            "postgresql://app:H4shx/Vb2n@Fq7k@127.0.0.1:1",
        ] {
            let err = error(url);
            let text = shown(&err);
            assert!(
                matches!(err, OpenError::Open { .. }) && text.contains("%40"),
                "{url}: {text}"
            );
            assert!(
                !text.contains("H4shx") && !text.contains("Fq7k"),
                "{url}: {text}"
            );
        }
        // Escaped, or `/`, `?`, `#` in the password, or an `@` after the
        // host: opened.
        for url in [
            "postgres://app:H4shx%40Fq7k@127.0.0.1:1/db",
            "postgres://app:H4shx/Vb2n#Fq7k?x@127.0.0.1:1/db",
            "postgres://app@127.0.0.1:1/db?application_name=a@b",
        ] {
            let store = open_store(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            let text = format!("{store:?}");
            assert!(
                text.contains("@127.0.0.1:1/db") && !text.contains("H4shx"),
                "{url}: {text}"
            );
        }
    }

    #[cfg(feature = "upstash")]
    #[test]
    fn upstash_plain_http_is_for_loopback_or_an_opted_in_trusted_network() {
        let at = |url: &str| opened("upstash", upstash_at(url, Some("s3cret".into())));
        for url in [
            "upstash+http://127.0.0.1:8079",
            "upstash+http://localhost:8079",
            "upstash+http://[::1]:8079",
            "upstash+http://10.0.0.5:8079?plain-http=trusted-network",
        ] {
            assert!(at(url).is_ok(), "{url}");
        }
        let err = at("upstash+http://10.0.0.5:8079").map(|_| ()).unwrap_err();
        let source = std::error::Error::source(&err).map(ToString::to_string);
        assert!(
            matches!(
                err,
                OpenError::Open {
                    store: "upstash",
                    ..
                }
            ) && source.as_deref().is_some_and(
                |s| s.contains("the token would travel in clear text to 10.0.0.5:8079")
            ),
            "{err:?}"
        );
    }

    #[cfg(feature = "upstash")]
    #[test]
    fn upstash_urls_open_without_a_request_and_need_a_token() {
        let at = |url, token| opened("upstash", upstash_at(url, token));
        let text = at("upstash+http://127.0.0.1:1", Some("s3cret".into()))
            .map(|store| format!("{store:?}"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!text.contains("s3cret"), "{text}");
        let missing = at("upstash+https://example.invalid", None);
        assert!(matches!(missing, Err(OpenError::MissingToken)));
    }

    #[cfg(feature = "redis")]
    #[test]
    fn cluster_urls_open_lazily() {
        assert!(open_store("redis-cluster://127.0.0.1:1,127.0.0.1:2").is_ok());
        let hidden = open_store("redis-cluster://u:hunter2@127.0.0.1:1").map(|s| format!("{s:?}"));
        assert!(hidden.is_ok_and(|text| !text.contains("hunter2")));
    }

    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn sqlite_url_opens_a_file_that_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("counters.sqlite3");
        for url in [
            format!("sqlite:{}", path.display()),
            format!("sqlite://{}", path.display()),
        ] {
            let store = open_store(&url).unwrap();
            let limiter = tollgate_core::Limiter::new(store);
            let rule = tollgate_core::Rule::new("t", 5, tollgate_core::Window::DAY)
                .and_then(|r| r.with_key(&["id"]))
                .unwrap();
            let limit = rule.limit(&["x"]).unwrap();
            assert!(limiter.count(&[limit]).await.unwrap().is_allowed());
        }
        assert!(path.exists());
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn unopenable_sqlite_file_is_an_open_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = error(&format!(
            "sqlite:{}",
            dir.path().join("no/such/dir/x.sqlite3").display()
        ));
        assert!(
            matches!(
                err,
                OpenError::Open {
                    store: "sqlite",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    /// Planted in every URL and token of [`no_error_shows_a_secret`]; found
    /// nowhere in what an error shows.
    const SECRET: &str = "Pl4ntedS3cretZq9x";

    /// Planted as [`SECRET`] is, in every URL of [`no_error_shows_a_secret`]:
    /// secrets holding the characters that may end a URL's authority (`/`,
    /// `?`, `#`), an `@`, a `+` and escapes (`%2F`), each starting with a
    /// different one, as base64 keys and generated passwords do. No part of
    /// one (see [`giveaways`]) is found in what an error shows.
    const ODD_SECRETS: &[&str] = &[
        "Sl4sh/Fq7k#Vb2n?Tj5w@Mz8c+Rd3x%2FKp7y",
        "H4shx#Fq7k?Vb2n/Tj5w+Mz8c",
        "Qm4rk?Fq7k/Vb2n#Tj5w&Mz8c=Rd3x",
        "Att4t@Fq7k/Vb2n#Tj5w?Mz8c+Rd3x",
        "Pl5sx+Fq7k%2FVb2n%23Tj5w%3FMz8c%40Rd3x",
    ];

    /// Every secret planted.
    fn planted() -> impl Iterator<Item = &'static str> {
        std::iter::once(SECRET).chain(ODD_SECRETS.iter().copied())
    }

    /// What an error shows: its text, its `Debug`, and those of each of
    /// its sources.
    fn shown(err: &(dyn std::error::Error + 'static)) -> String {
        let mut text = format!("{err} | {err:?}");
        let mut source = err.source();
        while let Some(cause) = source {
            text.push_str(&format!(" | {cause} | {cause:?}"));
            source = cause.source();
        }
        text
    }

    /// Fails when `text` holds any part of a [planted](planted) secret (in
    /// any case).
    fn assert_hidden(what: &str, text: &str) {
        let lowercase = text.to_lowercase();
        for secret in planted() {
            for part in giveaways(secret) {
                assert!(
                    !lowercase.contains(&part),
                    "{what} shows `{part}` of the secret {secret}: {text}"
                );
            }
        }
    }

    /// A loopback port nothing listens on (bound, then closed).
    fn closed_port() -> u16 {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    }

    /// Opens `url`; its error, or a call's error (and the limiter's
    /// warnings and verdict) once it opened, none showing the secret. What
    /// happened, for the caller's assertions.
    async fn run_every_path(url: &str) -> String {
        use tollgate_core::CounterStore as _;

        let store = match open_store(url) {
            Ok(store) => store,
            Err(err) => {
                let text = shown(&err);
                assert_hidden(url, &text);
                return format!("open error: {text}");
            }
        };
        assert_hidden(url, &format!("{store:?}"));
        let counter = tollgate_core::Counter {
            key: "limit:secrets:1".into(),
            ttl: std::time::Duration::from_secs(60),
            cost: 1,
            max: 5,
            floor: 0,
            prior: None,
            lease: false,
        };
        let deadline = tollgate_core::Deadline::after(std::time::Duration::from_millis(500));
        let called = store
            .count(&[counter], tollgate_core::CheckId::new(), deadline)
            .await;
        let text = match &called {
            Ok(counts) => format!("counted {counts:?}"),
            Err(err) => format!("call error: {}", shown(err)),
        };
        assert_hidden(url, &text);
        let limiter = tollgate_core::Limiter::new(store);
        let rule = tollgate_core::Rule::new("secrets", 5, tollgate_core::Window::DAY)
            .and_then(|r| r.with_key(&["id"]))
            .unwrap();
        let limit = rule.limit(&["x"]).unwrap();
        let logs = tollgate_test_support::Logs::default();
        let verdict = logs.capture(limiter.count(&[limit])).await;
        let verdict = match verdict {
            Ok(verdict) => format!("{verdict:?}"),
            Err(err) => shown(&err),
        };
        assert_hidden(url, &verdict);
        assert_hidden(url, &logs.text());
        text
    }

    /// The URLs of [`no_error_shows_a_secret`] planting `secret`, with
    /// `port` a loopback port nothing listens on.
    fn with_secret(secret: &str, port: u16) -> Vec<String> {
        let mut urls = vec![
            // Not URLs: a secret pasted in a URL's place.
            secret.to_owned(),
            format!("{secret}@127.0.0.1:6379"),
            format!("user:{secret}@127.0.0.1:6379"),
            format!("{secret}:x"),
            format!("{secret}://127.0.0.1"),
            // Unknown or malformed schemes.
            format!("mysql://user:{secret}@127.0.0.1/x"),
            format!("memory:{secret}"),
            format!("upstash:{secret}"),
        ];
        for scheme in [
            "redis",
            "rediss",
            "valkey",
            "valkeys",
            "redis-cluster",
            "rediss-cluster",
        ] {
            urls.extend([
                // Nothing listens there: opens lazily, the call fails.
                format!("{scheme}://:{secret}@127.0.0.1:{port}"),
                format!("{scheme}://user:{secret}@127.0.0.1:{port}/0"),
                // A bad port, a bad database, no host.
                format!("{scheme}://:{secret}@127.0.0.1:99999"),
                format!("{scheme}://:{secret}@127.0.0.1:{port}/x"),
                format!("{scheme}://:{secret}@"),
                format!("{scheme}://{secret}@127.0.0.1:{port}?password={secret}"),
            ]);
        }
        for scheme in ["postgres", "postgresql"] {
            urls.extend([
                format!("{scheme}://user:{secret}@127.0.0.1:{port}/db"),
                format!("{scheme}://user:{secret}@127.0.0.1:99999/db"),
                format!("{scheme}://user@127.0.0.1:{port}/db?password={secret}"),
                format!("{scheme}://user:{secret}@127.0.0.1:{port}/db?sslmode=bogus"),
                format!("{scheme}://user:{secret}@127.0.0.1:{port}/db?connect_timeout=x"),
            ]);
        }
        for scheme in ["upstash+http", "upstash+https"] {
            urls.extend([
                format!("{scheme}://user:{secret}@127.0.0.1:{port}"),
                format!("{scheme}://{secret}@127.0.0.1:{port}"),
                format!("{scheme}://127.0.0.1:{port}?_token={secret}"),
                format!("{scheme}://127.0.0.1:{port}/{secret}"),
                format!("{scheme}://127.0.0.1:99999"),
                // Without UPSTASH_REDIS_REST_TOKEN in this process.
                format!("{scheme}://127.0.0.1:{port}"),
            ]);
        }
        urls
    }

    /// Every error path of `open_store`, and of a first call on a store it
    /// opened lazily, with each [planted](planted) secret as a password, a
    /// token, user information or a text in a URL's place, for every
    /// scheme: no error text, `Debug`, source or log line shows any part of
    /// it.
    #[tokio::test]
    async fn no_error_shows_a_secret() {
        let port = closed_port();
        let mut urls = vec!["sqlite:".to_owned()];
        for secret in planted() {
            urls.extend(with_secret(secret, port));
        }
        let mut seen = Vec::new();
        for url in &urls {
            let what = run_every_path(url).await;
            println!("{url}: {what}");
            seen.push(what);
        }
        // The paths ran: each kind of failure was met at least once.
        let all = seen.join("\n");
        assert!(
            all.contains("NotAUrl") && all.contains("UnknownScheme"),
            "{all}"
        );
        if cfg!(feature = "redis") {
            assert!(all.contains("call error"), "{all}");
        }
        if cfg!(feature = "upstash") {
            assert!(all.contains("MissingToken"), "{all}");
        }
    }

    /// Set in a child of [`no_upstash_error_shows_its_token`]: the URL the
    /// child opens (its token, and the `upstash` scheme's URL, are in its
    /// environment).
    const CHILD_URL: &str = "TOLLGATE_SECRETS_CHILD_URL";

    /// The child's half: does nothing unless [`CHILD_URL`] is set.
    #[tokio::test]
    async fn child_opens_the_url_of_its_environment() {
        if let Ok(url) = std::env::var(CHILD_URL) {
            println!("child: {}", run_every_path(&url).await);
        }
    }

    /// The Upstash token, in `UPSTASH_REDIS_REST_TOKEN` as `open_store`
    /// takes it (and a URL in `UPSTASH_REDIS_REST_URL` for `upstash`), on
    /// every error path: the URL refused (plain http to a host that is not
    /// loopback, user information, a query, a bad port), the endpoint
    /// unreachable. Each case runs in a child process with its own
    /// environment.
    #[cfg(feature = "upstash")]
    #[test]
    fn no_upstash_error_shows_its_token() {
        let port = closed_port();
        let refused = [
            format!("http://203.0.113.9:{port}"),
            format!("http://user:{SECRET}@127.0.0.1:{port}"),
            format!("http://127.0.0.1:{port}?token={SECRET}"),
            "http://127.0.0.1:99999".to_owned(),
            SECRET.to_owned(),
        ];
        let mut cases: Vec<(String, Option<String>, &str)> = Vec::new();
        for url in &refused {
            let via = url.replacen("http", "upstash+http", 1);
            if via.starts_with("upstash+") {
                cases.push((via, None, "open error"));
            }
            cases.push(("upstash".into(), Some(url.clone()), "open error"));
        }
        let unreachable = format!("http://127.0.0.1:{port}");
        cases.push((format!("upstash+{unreachable}"), None, "call error"));
        cases.push(("upstash".into(), Some(unreachable), "call error"));
        cases.push((
            "upstash+http://203.0.113.9:9?plain-http=trusted-network".into(),
            None,
            "call error",
        ));
        for (url, env_url, expected) in cases {
            let mut child = std::process::Command::new(std::env::current_exe().unwrap());
            child
                .args([
                    "--exact",
                    "open::tests::child_opens_the_url_of_its_environment",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env(CHILD_URL, &url)
                .env("UPSTASH_REDIS_REST_TOKEN", SECRET)
                .env_remove("UPSTASH_REDIS_REST_URL");
            if let Some(env_url) = &env_url {
                child.env("UPSTASH_REDIS_REST_URL", env_url);
            }
            let output = child.output().unwrap();
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            let what = format!("{url} with {env_url:?}");
            assert!(output.status.success(), "{what}: {text}");
            assert!(
                text.contains(&format!("child: {expected}")),
                "{what}: {text}"
            );
            assert_hidden(&what, &text);
        }
    }
}
