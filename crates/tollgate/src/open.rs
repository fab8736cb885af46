//! [`open_store`]: a store chosen at run time from a URL, from one table of
//! the stores this build knows.

use std::sync::Arc;

use tollgate_core::{BoxError, Store};

/// Why [`open_store`] could not open a store. Messages never repeat the URL
/// past its scheme, so a password in it is not shown.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The URL's scheme is not one of those [`open_store`] lists.
    #[error(
        "unknown store URL scheme `{0}`: expected redis://HOST, redis-cluster://HOST:PORT,…, \
         postgres://HOST/DB, upstash, upstash+https://HOST or sqlite:PATH"
    )]
    UnknownScheme(String),
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
/// The store is both a [`CounterStore`](tollgate_core::CounterStore), for a
/// [`Limiter`](tollgate_core::Limiter), and a
/// [`MarkStore`](tollgate_core::MarkStore), for
/// [`Deliveries`](tollgate_core::Deliveries). Opening does not wait for a
/// server: a Redis or Postgres store connects on first use (Postgres
/// creates its schema then).
///
/// # Errors
///
/// [`OpenError::UnknownScheme`] for another scheme, [`OpenError::NotCompiled`]
/// when the store's feature is off, [`OpenError::MissingPath`] for `sqlite:`
/// alone, [`OpenError::MissingToken`] for `upstash+http(s)://` without a
/// token and [`OpenError::Open`] when the store refuses to open.
pub fn open_store(url: &str) -> Result<Arc<dyn Store>, OpenError> {
    let url = url.trim();
    let (scheme, rest) = url.split_once(':').unwrap_or((url, ""));
    let unknown = || OpenError::UnknownScheme(scheme.to_owned());
    let lowercase = scheme.to_ascii_lowercase();
    let Some(entry) = STORES
        .iter()
        .find(|e| e.schemes.contains(&lowercase.as_str()))
    else {
        return Err(unknown());
    };
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
    Ok(Arc::new(tollgate_redis::RedisStore::open(url)?))
}

/// A Redis Cluster, over TCP or TLS.
#[cfg(feature = "redis")]
fn redis_cluster(url: &str) -> Result<Arc<dyn Store>, BoxError> {
    Ok(Arc::new(tollgate_redis::RedisClusterStore::open(url)?))
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
        assert!(matches!(
            error("counters.sqlite3"),
            OpenError::UnknownScheme(_)
        ));
        assert!(matches!(error(""), OpenError::UnknownScheme(_)));
        assert!(matches!(error("memory:extra"), OpenError::UnknownScheme(_)));
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
}
