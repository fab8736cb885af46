//! [`open_store`]: a store chosen at run time from a URL.

use std::sync::Arc;

use tollgate_core::{BoxError, CounterStore};

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
        /// Which store: `redis` or `sqlite`.
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
/// Opening does not wait for a server: a Redis or Postgres store connects
/// on first use (Postgres creates its schema then).
///
/// # Errors
///
/// [`OpenError::UnknownScheme`] for another scheme, [`OpenError::NotCompiled`]
/// when the store's feature is off, [`OpenError::MissingPath`] for `sqlite:`
/// alone and [`OpenError::Open`] when the store refuses to open.
pub fn open_store(url: &str) -> Result<Arc<dyn CounterStore>, OpenError> {
    let url = url.trim();
    let (scheme, rest) = url.split_once(':').unwrap_or((url, ""));
    match scheme.to_ascii_lowercase().as_str() {
        "redis" | "valkey" | "unix" | "redis+unix" | "valkey+unix" => redis(url),
        "rediss" | "valkeys" => rediss(url),
        "redis-cluster" => redis_cluster(url),
        "rediss-cluster" if cfg!(feature = "redis-tls") => redis_cluster(url),
        "rediss-cluster" => Err(OpenError::NotCompiled {
            scheme: "rediss-cluster://",
            feature: "redis-tls",
        }),
        "sqlite" => {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(OpenError::MissingPath);
            }
            sqlite(path)
        }
        "postgres" | "postgresql" => postgres(url),
        "upstash" if rest.is_empty() => upstash(None, None),
        "upstash+http" | "upstash+https" => upstash(Some(url), token()),
        "memory" if rest.is_empty() => memory(),
        _ => Err(OpenError::UnknownScheme(scheme.to_owned())),
    }
}

#[cfg(feature = "redis")]
fn redis(url: &str) -> Result<Arc<dyn CounterStore>, OpenError> {
    match tollgate_redis::RedisStore::open(url) {
        Ok(store) => Ok(Arc::new(store)),
        Err(err) => Err(OpenError::Open {
            store: "redis",
            source: Box::new(err),
        }),
    }
}

#[cfg(feature = "redis")]
fn redis_cluster(url: &str) -> Result<Arc<dyn CounterStore>, OpenError> {
    match tollgate_redis::RedisClusterStore::open(url) {
        Ok(store) => Ok(Arc::new(store)),
        Err(err) => Err(OpenError::Open {
            store: "redis-cluster",
            source: Box::new(err),
        }),
    }
}

#[cfg(not(feature = "redis"))]
fn redis_cluster(_url: &str) -> Result<Arc<dyn CounterStore>, OpenError> {
    Err(OpenError::NotCompiled {
        scheme: "redis-cluster://",
        feature: "redis",
    })
}

#[cfg(not(feature = "redis"))]
fn redis(_url: &str) -> Result<Arc<dyn CounterStore>, OpenError> {
    Err(OpenError::NotCompiled {
        scheme: "redis://",
        feature: "redis",
    })
}

#[cfg(feature = "redis-tls")]
fn rediss(url: &str) -> Result<Arc<dyn CounterStore>, OpenError> {
    redis(url)
}

#[cfg(not(feature = "redis-tls"))]
fn rediss(_url: &str) -> Result<Arc<dyn CounterStore>, OpenError> {
    Err(OpenError::NotCompiled {
        scheme: "rediss://",
        feature: "redis-tls",
    })
}

#[cfg(feature = "postgres")]
fn postgres(url: &str) -> Result<Arc<dyn CounterStore>, OpenError> {
    let options = tollgate_postgres::PostgresOptions::default();
    match tollgate_postgres::PostgresStore::connect_lazy(url, options) {
        Ok(store) => Ok(Arc::new(store)),
        Err(err) => Err(OpenError::Open {
            store: "postgres",
            source: Box::new(err),
        }),
    }
}

#[cfg(not(feature = "postgres"))]
fn postgres(_url: &str) -> Result<Arc<dyn CounterStore>, OpenError> {
    Err(OpenError::NotCompiled {
        scheme: "postgres://",
        feature: "postgres",
    })
}

/// `UPSTASH_REDIS_REST_TOKEN`, when set.
fn token() -> Option<String> {
    std::env::var("UPSTASH_REDIS_REST_TOKEN").ok()
}

/// The Upstash store: from the environment (`url` None), or at `url` with `token`.
#[cfg(feature = "upstash")]
fn upstash(url: Option<&str>, token: Option<String>) -> Result<Arc<dyn CounterStore>, OpenError> {
    let store = match (url, token) {
        (None, _) => tollgate_upstash::UpstashStore::from_env(),
        (Some(url), Some(token)) => tollgate_upstash::UpstashStore::open(url, &token),
        (Some(_), None) => return Err(OpenError::MissingToken),
    };
    match store {
        Ok(store) => Ok(Arc::new(store)),
        Err(err) => Err(OpenError::Open {
            store: "upstash",
            source: Box::new(err),
        }),
    }
}

#[cfg(not(feature = "upstash"))]
fn upstash(_url: Option<&str>, _token: Option<String>) -> Result<Arc<dyn CounterStore>, OpenError> {
    Err(OpenError::NotCompiled {
        scheme: "upstash",
        feature: "upstash",
    })
}

#[cfg(feature = "sqlite")]
fn sqlite(path: &str) -> Result<Arc<dyn CounterStore>, OpenError> {
    match tollgate_sqlite::SqliteStore::open(path) {
        Ok(store) => Ok(Arc::new(store)),
        Err(err) => Err(OpenError::Open {
            store: "sqlite",
            source: Box::new(err),
        }),
    }
}

#[cfg(not(feature = "sqlite"))]
fn sqlite(_path: &str) -> Result<Arc<dyn CounterStore>, OpenError> {
    Err(OpenError::NotCompiled {
        scheme: "sqlite:",
        feature: "sqlite",
    })
}

#[cfg(feature = "test-util")]
fn memory() -> Result<Arc<dyn CounterStore>, OpenError> {
    Ok(Arc::new(tollgate_memory::MemoryStore::new()))
}

#[cfg(not(feature = "test-util"))]
fn memory() -> Result<Arc<dyn CounterStore>, OpenError> {
    Err(OpenError::NotCompiled {
        scheme: "memory",
        feature: "test-util",
    })
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

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn postgres_without_its_feature_names_the_feature() {
        let err = error("postgres://u:hunter2@db/x");
        assert!(matches!(
            err,
            OpenError::NotCompiled {
                feature: "postgres",
                ..
            }
        ));
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[test]
    fn sqlite_without_a_path_is_an_error() {
        assert!(matches!(error("sqlite:"), OpenError::MissingPath));
        assert!(matches!(error("sqlite://"), OpenError::MissingPath));
        assert!(matches!(error("sqlite"), OpenError::MissingPath));
    }

    #[cfg(not(feature = "redis"))]
    #[test]
    fn redis_without_its_feature_names_the_feature() {
        let err = error("redis://:hunter2@127.0.0.1:1");
        assert!(matches!(
            err,
            OpenError::NotCompiled {
                feature: "redis",
                ..
            }
        ));
        assert!(err.to_string().contains("`redis` feature"), "{err}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }

    #[cfg(not(feature = "redis-tls"))]
    #[test]
    fn rediss_without_tls_names_the_feature() {
        let err = error("rediss://127.0.0.1:1");
        assert!(matches!(
            err,
            OpenError::NotCompiled {
                feature: "redis-tls",
                ..
            }
        ));
    }

    #[cfg(not(feature = "sqlite"))]
    #[test]
    fn sqlite_without_its_feature_names_the_feature() {
        let err = error("sqlite:counters.sqlite3");
        assert!(matches!(
            err,
            OpenError::NotCompiled {
                feature: "sqlite",
                ..
            }
        ));
    }

    #[cfg(not(feature = "test-util"))]
    #[test]
    fn memory_is_only_a_test_double() {
        assert!(matches!(
            error("memory"),
            OpenError::NotCompiled {
                feature: "test-util",
                ..
            }
        ));
    }

    #[cfg(feature = "test-util")]
    #[test]
    fn memory_opens_with_test_util() {
        assert!(open_store("memory").is_ok());
        assert!(open_store("memory:").is_ok());
    }

    #[cfg(feature = "redis")]
    #[test]
    fn every_url_the_redis_store_takes_opens() {
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

    #[cfg(not(feature = "upstash"))]
    #[test]
    fn upstash_without_its_feature_names_the_feature() {
        assert!(matches!(
            error("upstash"),
            OpenError::NotCompiled {
                feature: "upstash",
                ..
            }
        ));
        assert!(matches!(
            error("upstash+https://example.invalid"),
            OpenError::NotCompiled {
                feature: "upstash",
                ..
            }
        ));
    }

    #[cfg(feature = "upstash")]
    #[test]
    fn upstash_urls_open_without_a_request_and_need_a_token() {
        let opened = upstash(Some("upstash+http://127.0.0.1:1"), Some("s3cret".into()));
        let text = opened
            .map(|store| format!("{store:?}"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(!text.contains("s3cret"), "{text}");
        let missing = upstash(Some("upstash+https://example.invalid"), None);
        assert!(matches!(missing, Err(OpenError::MissingToken)));
    }

    #[cfg(feature = "redis")]
    #[test]
    fn cluster_urls_open_lazily() {
        assert!(open_store("redis-cluster://127.0.0.1:1,127.0.0.1:2").is_ok());
        let hidden = open_store("redis-cluster://u:hunter2@127.0.0.1:1").map(|s| format!("{s:?}"));
        assert!(hidden.is_ok_and(|text| !text.contains("hunter2")));
    }

    #[cfg(not(feature = "redis-tls"))]
    #[test]
    fn valkeys_without_tls_names_the_feature() {
        assert!(matches!(
            error("valkeys://127.0.0.1:6380"),
            OpenError::NotCompiled {
                feature: "redis-tls",
                ..
            }
        ));
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_opens_without_a_server() {
        // Lazy: nothing listens on port 1, and opening still succeeds.
        assert!(open_store("redis://127.0.0.1:1").is_ok());
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
