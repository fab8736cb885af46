//! Reading `redis-cluster://host:port,host:port,…` into the seed nodes' URLs.

use crate::Error;

/// The seed nodes of a cluster URL.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Seeds {
    /// One `redis://` (or `rediss://`) URL per seed node, with the
    /// credentials of the cluster URL.
    pub(crate) urls: Vec<String>,
    /// `host:port,host:port,…`, never the password: for `Debug`.
    pub(crate) addresses: String,
}

/// Reads `redis-cluster://[user:password@]host[:port][,host[:port]…][/]`
/// (`rediss-cluster://` for TLS, with the `tls` feature). A cluster has
/// only database 0, so a path other than `/` or `/0` is refused. No error
/// message includes the URL.
pub(crate) fn seeds(url: &str) -> Result<Seeds, Error> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(Error::InvalidUrl(
            "expected a URL such as redis-cluster://127.0.0.1:7000,127.0.0.1:7001".into(),
        ));
    };
    let node_scheme = match scheme.to_ascii_lowercase().as_str() {
        "redis-cluster" | "valkey-cluster" => "redis",
        #[cfg(feature = "tls")]
        "rediss-cluster" | "valkeys-cluster" => "rediss",
        #[cfg(not(feature = "tls"))]
        "rediss-cluster" | "valkeys-cluster" => return Err(Error::TlsNotEnabled),
        other => return Err(Error::UnsupportedScheme(other.to_owned())),
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if !matches!(path, "" | "0") {
        return Err(Error::InvalidUrl(
            "a Redis Cluster has only database 0: leave the path out".into(),
        ));
    }
    let (credentials, hosts) = match authority.rsplit_once('@') {
        Some((credentials, hosts)) => (Some(credentials), hosts),
        None => (None, authority),
    };
    let mut urls = Vec::new();
    let mut addresses = Vec::new();
    for host in hosts.split(',').map(str::trim) {
        if host.is_empty() || host.contains(['/', '?', '#', '@']) {
            return Err(Error::InvalidUrl(
                "expected host:port pairs separated by commas".into(),
            ));
        }
        let url = match credentials {
            Some(credentials) => format!("{node_scheme}://{credentials}@{host}"),
            None => format!("{node_scheme}://{host}"),
        };
        if redis::IntoConnectionInfo::into_connection_info(url.as_str()).is_err() {
            return Err(Error::InvalidUrl(format!(
                "seed node {} of the cluster URL cannot be read",
                urls.len() + 1
            )));
        }
        urls.push(url);
        addresses.push(host.to_owned());
    }
    if node_scheme == "rediss" {
        crate::tcp::tls::provide();
    }
    Ok(Seeds {
        urls,
        addresses: addresses.join(","),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_seed_with_the_same_credentials() {
        let seeds = seeds("redis-cluster://u:pw@10.0.0.1:7000, 10.0.0.2:7001,[::1]:7002")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            seeds.urls,
            [
                "redis://u:pw@10.0.0.1:7000",
                "redis://u:pw@10.0.0.2:7001",
                "redis://u:pw@[::1]:7002"
            ]
        );
        assert_eq!(seeds.addresses, "10.0.0.1:7000,10.0.0.2:7001,[::1]:7002");
        let one = seeds_of("redis-cluster://127.0.0.1:7000/");
        assert_eq!(one, ["redis://127.0.0.1:7000"]);
        assert_eq!(seeds_of("VALKEY-CLUSTER://h:1/0"), ["redis://h:1"]);
    }

    fn seeds_of(url: &str) -> Vec<String> {
        seeds(url).map(|s| s.urls).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn refuses_what_is_not_a_cluster_url() {
        for url in [
            "127.0.0.1:7000",
            "redis-cluster://",
            "redis-cluster://a:1,,b:2",
            "redis-cluster://a:1/3",
            "redis-cluster://a:x",
            "redis-cluster://a:1,b:2?db=1",
            "redis-cluster://a:1#b:2",
        ] {
            assert!(
                matches!(seeds(url), Err(Error::InvalidUrl(_))),
                "{url}: {:?}",
                seeds(url)
            );
        }
        assert!(matches!(
            seeds("redis://a:1"),
            Err(Error::UnsupportedScheme(s)) if s == "redis"
        ));
    }

    #[test]
    fn never_shows_the_password() {
        let err = seeds("redis-cluster://u:hunter2@a:1,b:x").map(|_| ());
        let text = format!("{err:?}");
        assert!(!text.contains("hunter2"), "{text}");
        let seeds = seeds("redis-cluster://u:hunter2@a:1").unwrap_or_else(|e| panic!("{e}"));
        assert!(!seeds.addresses.contains("hunter2"));
    }

    #[test]
    fn tls_needs_the_feature() {
        let result = seeds("rediss-cluster://a:1,b:2");
        if cfg!(feature = "tls") {
            assert_eq!(
                result.map(|s| s.urls).ok(),
                Some(vec!["rediss://a:1".to_owned(), "rediss://b:2".to_owned()])
            );
        } else {
            assert!(matches!(result, Err(Error::TlsNotEnabled)));
        }
    }
}
