//! What a Redis-protocol server says of itself (`INFO`), and the settings
//! that put counters at risk.
//!
//! The core's `CounterStore` has no way to ask a store about its server,
//! so this reads `INFO` with the `redis` crate directly, on its own
//! connection, bounded by [`INFO_TIMEOUT`].

use std::collections::BTreeMap;
use std::time::Duration;

use crate::failure::{Failure, chain};

/// How long connecting and reading `INFO` may take together.
pub(crate) const INFO_TIMEOUT: Duration = Duration::from_secs(1);

/// Whether `url` names a Redis-protocol server (Redis or Valkey, over TCP,
/// TLS or a unix socket).
pub(crate) fn is_redis(url: &str) -> bool {
    let scheme = url.trim().split_once("://").map_or("", |(s, _)| s);
    matches!(
        scheme.to_ascii_lowercase().as_str(),
        "redis" | "rediss" | "unix" | "redis+unix" | "valkey" | "valkeys" | "valkey+unix"
    )
}

/// The fields of `INFO` (its default sections), by name.
pub(crate) async fn read(url: &str) -> Result<BTreeMap<String, String>, Failure> {
    let client = redis::Client::open(url.trim())
        .map_err(|e| Failure::new(format!("invalid URL: {}", chain(&e))))?;
    let info = async {
        let mut connection = client.get_multiplexed_async_connection().await?;
        redis::cmd("INFO")
            .query_async::<String>(&mut connection)
            .await
    };
    match tokio::time::timeout(INFO_TIMEOUT, info).await {
        Ok(Ok(text)) => Ok(parse(&text)),
        Ok(Err(err)) => Err(Failure::new(chain(&err))),
        Err(_) => Err(Failure::new(format!(
            "no answer within {} ms",
            INFO_TIMEOUT.as_millis()
        ))),
    }
}

/// `name:value` lines; section headers (`# Server`) and blank lines skipped.
fn parse(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_owned(), value.trim().to_owned()))
        .collect()
}

/// One line on the server: its software and version, and its role.
pub(crate) fn summary(info: &BTreeMap<String, String>) -> String {
    let software = match (info.get("valkey_version"), info.get("redis_version")) {
        (Some(version), _) => format!("valkey {version}"),
        (None, Some(version)) => format!("redis {version}"),
        (None, None) => "unknown version".to_owned(),
    };
    let field = |name: &str| info.get(name).map_or("?", String::as_str);
    let appendonly = match info.get("aof_enabled").map(String::as_str) {
        Some("1") => "yes",
        Some(_) => "no",
        None => "?",
    };
    format!(
        "{software}, role {}, appendonly {appendonly}, maxmemory-policy {}",
        field("role"),
        field("maxmemory_policy")
    )
}

/// The settings that lose or refuse counts, each as one warning.
pub(crate) fn warnings(info: &BTreeMap<String, String>) -> Vec<String> {
    let mut warnings = Vec::new();
    if info.get("aof_enabled").is_some_and(|v| v != "1") {
        warnings.push(
            "appendonly is off: counts written since the last snapshot are lost when the \
             server restarts, and limits reset (set appendonly yes)"
                .to_owned(),
        );
    }
    if let Some(policy) = info.get("maxmemory_policy")
        && policy != "noeviction"
    {
        warnings.push(format!(
            "maxmemory-policy is {policy}: under memory pressure the server evicts live \
             counters, silently resetting limits (every counter has a TTL, so volatile-* \
             policies evict them too); set maxmemory-policy noeviction"
        ));
    }
    if info.get("role").is_some_and(|role| role == "slave") {
        // Doctor got here, so this replica took a write (replica-read-only no).
        warnings.push(
            "the server is a replica (role:slave) that takes writes: counts written to it are \
             never replicated and are lost when it syncs with its primary; point the store \
             at the primary"
                .to_owned(),
        );
    }
    warnings
}

/// What `INFO` tells of a server that refused a check's write, each as one
/// hint: a replica, or a server full under `noeviction`.
pub(crate) fn refusing_writes(info: &BTreeMap<String, String>) -> Vec<String> {
    let mut hints = Vec::new();
    if info.get("role").is_some_and(|role| role == "slave") {
        hints.push(
            "the server is a replica (role:slave), which refuses writes: point the store at \
             the primary"
                .to_owned(),
        );
    }
    let number = |name: &str| info.get(name).and_then(|v| v.parse::<u64>().ok());
    if let (Some(used), Some(max)) = (number("used_memory"), number("maxmemory"))
        && max > 0
        && used >= max
        && info
            .get("maxmemory_policy")
            .is_some_and(|p| p == "noeviction")
    {
        hints.push(format!(
            "the server is full (used_memory {used} of maxmemory {max}, maxmemory-policy \
             noeviction): raise maxmemory or free memory"
        ));
    }
    hints
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(text: &str) -> BTreeMap<String, String> {
        parse(text)
    }

    #[test]
    fn a_durable_primary_without_eviction_has_no_warning() {
        let fields = info(
            "# Server\r\nredis_version:7.0.15\r\n\r\n# Persistence\r\naof_enabled:1\r\n\
             maxmemory_policy:noeviction\r\nrole:master\r\n",
        );
        assert_eq!(warnings(&fields), Vec::<String>::new());
        assert_eq!(
            summary(&fields),
            "redis 7.0.15, role master, appendonly yes, maxmemory-policy noeviction"
        );
    }

    #[test]
    fn each_risky_setting_warns() {
        for (text, word) in [
            ("aof_enabled:0", "appendonly"),
            ("maxmemory_policy:allkeys-lru", "allkeys-lru"),
            ("maxmemory_policy:volatile-ttl", "volatile-ttl"),
            ("role:slave", "replica"),
        ] {
            let found = warnings(&info(text));
            assert_eq!(found.len(), 1, "{text}: {found:?}");
            assert!(found[0].contains(word), "{text}: {found:?}");
        }
    }

    #[test]
    fn a_replica_or_a_full_server_is_named_when_a_write_is_refused() {
        let full = "used_memory:2000\r\nmaxmemory:1000\r\nmaxmemory_policy:noeviction\r\n";
        let found = refusing_writes(&info(&format!("role:master\r\n{full}")));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("the server is full (used_memory 2000 of maxmemory 1000"));
        let found = refusing_writes(&info("role:slave\r\nmaxmemory:0\r\nused_memory:5\r\n"));
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("replica (role:slave)"), "{found:?}");
        for roomy in [
            "role:master\r\nused_memory:900\r\nmaxmemory:1000\r\nmaxmemory_policy:noeviction",
            "role:master\r\nused_memory:900\r\nmaxmemory:0\r\nmaxmemory_policy:noeviction",
            "role:master\r\nused_memory:2000\r\nmaxmemory:1000\r\nmaxmemory_policy:allkeys-lru",
        ] {
            assert_eq!(
                refusing_writes(&info(roomy)),
                Vec::<String>::new(),
                "{roomy}"
            );
        }
    }

    #[test]
    fn only_redis_protocol_urls_are_asked_for_info() {
        for url in [
            "redis://h",
            "REDISS://h",
            "unix:///s",
            "valkey://h",
            "valkey+unix:///s",
        ] {
            assert!(is_redis(url), "{url}");
        }
        for url in ["sqlite:x", "sqlite:///x", "memory", "postgres://h"] {
            assert!(!is_redis(url), "{url}");
        }
    }
}
