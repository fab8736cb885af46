//! The allow-list: the only commands the proxy sends for its callers, and
//! the Redis ACL rules that hold scripts to the same list.
//!
//! The list is the data commands of `@upstash/redis` 1.39 that stock Redis
//! has, which covers everything `@upstash/ratelimit` 2.2 sends or calls from
//! its scripts (fixed and sliding windows, token bucket, multi-region, deny
//! lists, analytics) and everything tollgate's REST store sends. Left out:
//! whatever administers or stalls the server (`FLUSHALL`, `FLUSHDB`,
//! `CONFIG`, `SHUTDOWN`, `REPLICAOF`, `SWAPDB`, `ACL`, `DEBUG`, `MODULE`,
//! `KEYS`, `SCRIPT FLUSH`, `SCRIPT KILL`, `FUNCTION`, `FCALL`), reaches
//! other databases (`SELECT`, `MOVE`, `COPY`), changes or blocks the shared
//! connection (`MULTI`, `WATCH`, `CLIENT`, the blocking pops, `XREAD …
//! BLOCK`), and publish/subscribe.

use std::collections::HashMap;
use std::sync::LazyLock;

use crate::command::Command;

/// The commands callers may send, in upper case; `NAME|SUB` allows one
/// subcommand of a container command.
pub const COMMANDS: &[&str] = &[
    // Strings
    "APPEND",
    "DECR",
    "DECRBY",
    "GET",
    "GETDEL",
    "GETEX",
    "GETRANGE",
    "GETSET",
    "INCR",
    "INCRBY",
    "INCRBYFLOAT",
    "MGET",
    "MSET",
    "MSETNX",
    "PSETEX",
    "SET",
    "SETEX",
    "SETNX",
    "SETRANGE",
    "STRLEN",
    // Keys
    "DEL",
    "EXISTS",
    "EXPIRE",
    "EXPIREAT",
    "EXPIRETIME",
    "PERSIST",
    "PEXPIRE",
    "PEXPIREAT",
    "PEXPIRETIME",
    "PTTL",
    "RANDOMKEY",
    "RENAME",
    "RENAMENX",
    "SCAN",
    "TOUCH",
    "TTL",
    "TYPE",
    "UNLINK",
    // Hashes
    "HDEL",
    "HEXISTS",
    "HEXPIRE",
    "HEXPIREAT",
    "HEXPIRETIME",
    "HGET",
    "HGETALL",
    "HGETDEL",
    "HINCRBY",
    "HINCRBYFLOAT",
    "HKEYS",
    "HLEN",
    "HMGET",
    "HMSET",
    "HPERSIST",
    "HPEXPIRE",
    "HPEXPIREAT",
    "HPEXPIRETIME",
    "HPTTL",
    "HRANDFIELD",
    "HSCAN",
    "HSET",
    "HSETNX",
    "HSTRLEN",
    "HTTL",
    "HVALS",
    // Lists (no blocking pops)
    "LINDEX",
    "LINSERT",
    "LLEN",
    "LMOVE",
    "LMPOP",
    "LPOP",
    "LPOS",
    "LPUSH",
    "LPUSHX",
    "LRANGE",
    "LREM",
    "LSET",
    "LTRIM",
    "RPOP",
    "RPOPLPUSH",
    "RPUSH",
    "RPUSHX",
    // Sets
    "SADD",
    "SCARD",
    "SDIFF",
    "SDIFFSTORE",
    "SINTER",
    "SINTERCARD",
    "SINTERSTORE",
    "SISMEMBER",
    "SMEMBERS",
    "SMISMEMBER",
    "SMOVE",
    "SPOP",
    "SRANDMEMBER",
    "SREM",
    "SSCAN",
    "SUNION",
    "SUNIONSTORE",
    // Sorted sets
    "ZADD",
    "ZCARD",
    "ZCOUNT",
    "ZDIFF",
    "ZDIFFSTORE",
    "ZINCRBY",
    "ZINTER",
    "ZINTERCARD",
    "ZINTERSTORE",
    "ZLEXCOUNT",
    "ZMPOP",
    "ZMSCORE",
    "ZPOPMAX",
    "ZPOPMIN",
    "ZRANDMEMBER",
    "ZRANGE",
    "ZRANGEBYLEX",
    "ZRANGEBYSCORE",
    "ZRANGESTORE",
    "ZRANK",
    "ZREM",
    "ZREMRANGEBYLEX",
    "ZREMRANGEBYRANK",
    "ZREMRANGEBYSCORE",
    "ZREVRANGE",
    "ZREVRANGEBYLEX",
    "ZREVRANGEBYSCORE",
    "ZREVRANK",
    "ZSCAN",
    "ZSCORE",
    "ZUNION",
    "ZUNIONSTORE",
    // HyperLogLog, bitmaps, geo
    "PFADD",
    "PFCOUNT",
    "PFMERGE",
    "BITCOUNT",
    "BITFIELD",
    "BITFIELD_RO",
    "BITOP",
    "BITPOS",
    "GETBIT",
    "SETBIT",
    "GEOADD",
    "GEODIST",
    "GEOHASH",
    "GEOPOS",
    "GEOSEARCH",
    "GEOSEARCHSTORE",
    // Streams (XREAD and XREADGROUP without BLOCK)
    "XACK",
    "XADD",
    "XAUTOCLAIM",
    "XCLAIM",
    "XDEL",
    "XGROUP|CREATE",
    "XGROUP|CREATECONSUMER",
    "XGROUP|DELCONSUMER",
    "XGROUP|DESTROY",
    "XGROUP|SETID",
    "XINFO|CONSUMERS",
    "XINFO|GROUPS",
    "XINFO|STREAM",
    "XLEN",
    "XPENDING",
    "XRANGE",
    "XREAD",
    "XREADGROUP",
    "XREVRANGE",
    "XTRIM",
    // Scripts: run, load, look up
    "EVAL",
    "EVAL_RO",
    "EVALSHA",
    "EVALSHA_RO",
    "SCRIPT|EXISTS",
    "SCRIPT|LOAD",
    // Server, read only
    "DBSIZE",
    "ECHO",
    "PING",
    "TIME",
];

/// What the proxy itself sends on its own connections, besides the callers'
/// commands: transactions for `/multi-exec`, and `SCRIPT KILL` to stop a
/// script that outran the Redis timeout. Callers cannot send these
/// directly, and scripts cannot call them.
const PROXY_OWN: &[&str] = &["MULTI", "EXEC", "DISCARD", "SCRIPT|KILL"];

/// How much of a command the list allows.
enum Listed {
    /// All of it.
    Whole,
    /// These subcommands, in upper case.
    Only(Vec<&'static str>),
}

/// [`COMMANDS`] by name, built on first use.
static LISTED: LazyLock<HashMap<&'static str, Listed>> = LazyLock::new(|| {
    let mut listed = HashMap::with_capacity(COMMANDS.len());
    for command in COMMANDS {
        match command.split_once('|') {
            Some((container, sub)) => {
                let entry = listed
                    .entry(container)
                    .or_insert_with(|| Listed::Only(Vec::new()));
                if let Listed::Only(subs) = entry {
                    subs.push(sub);
                }
            }
            None => {
                listed.insert(*command, Listed::Whole);
            }
        }
    }
    listed
});

/// The longest command name looked up; no listed name is longer.
const MAX_NAME: usize = 32;

/// Why the proxy refuses to send `command`, in an Upstash-shaped error
/// text, or `None` when it is on the list.
pub(crate) fn refusal(command: &Command) -> Option<String> {
    let mut buffer = [0; MAX_NAME];
    let listed = command
        .arg(0)
        .and_then(|name| upper(name, &mut buffer))
        .and_then(|name| LISTED.get(name));
    let allowed = match listed {
        Some(Listed::Whole) => true,
        Some(Listed::Only(subs)) => command
            .arg(1)
            .is_some_and(|sub| subs.iter().any(|s| sub.eq_ignore_ascii_case(s.as_bytes()))),
        None => false,
    };
    if !allowed {
        let name = command.name();
        let shown = match (listed, command.arg(1)) {
            (Some(Listed::Only(_)), Some(sub)) => {
                format!(
                    "{name} {}",
                    String::from_utf8_lossy(sub).to_ascii_uppercase()
                )
            }
            _ => name,
        };
        return Some(format!(
            "ERR command is not allowed: {shown} is not on tollgate-rest-proxy's allow-list"
        ));
    }
    let blocking_read = (command.is("XREAD") || command.is("XREADGROUP"))
        && command.args().any(|a| a.eq_ignore_ascii_case(b"BLOCK"));
    blocking_read.then(|| {
        format!(
            "ERR command is not allowed: {} BLOCK would block a connection other callers share",
            command.name()
        )
    })
}

/// `name` in upper case, in `buffer`; `None` when it is longer than the
/// buffer or not UTF-8 (then it is on no list).
fn upper<'b>(name: &[u8], buffer: &'b mut [u8; MAX_NAME]) -> Option<&'b str> {
    let upper = buffer.get_mut(..name.len())?;
    upper.copy_from_slice(name);
    upper.make_ascii_uppercase();
    std::str::from_utf8(upper).ok()
}

/// The rules of `ACL SETUSER <name> …` for the proxy's Redis user, without
/// its password: every key (and no other key pattern or selector it may
/// have had), no channels, the commands of the allow-list that `known` says
/// the server has, and what the proxy sends on its own.
pub fn acl_rules(known: impl Fn(&str) -> bool) -> Vec<String> {
    let mut rules: Vec<String> = [
        "on",
        "resetkeys",
        "~*",
        "resetchannels",
        "clearselectors",
        "-@all",
    ]
    .map(str::to_owned)
    .to_vec();
    for command in COMMANDS.iter().chain(PROXY_OWN) {
        let base = command.split('|').next().unwrap_or(command);
        if known(base) {
            rules.push(format!("+{}", command.to_ascii_lowercase()));
        }
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn refused(value: serde_json::Value) -> Option<String> {
        Command::from_json(&value).ok().and_then(|c| refusal(&c))
    }

    #[test]
    fn the_data_commands_pass_in_any_case() {
        for ok in [
            json!(["get", "k"]),
            json!(["Set", "k", "v", "PX", 10]),
            json!(["evalsha", "abc", 0]),
            json!(["script", "load", "return 1"]),
            json!(["SCRIPT", "exists", "abc"]),
            json!(["xread", "streams", "s", "0"]),
            json!(["xgroup", "create", "s", "g", "$"]),
        ] {
            assert_eq!(refused(ok.clone()), None, "{ok}");
        }
    }

    #[test]
    fn every_listed_command_passes() {
        for listed in COMMANDS {
            let args: Vec<&str> = listed.split('|').collect();
            assert_eq!(refused(json!(args)), None, "{listed}");
            let lower: Vec<String> = args.iter().map(|a| a.to_ascii_lowercase()).collect();
            assert_eq!(refused(json!(lower)), None, "{listed}");
        }
    }

    #[test]
    fn administration_and_connection_state_are_refused() {
        for bad in [
            json!(["flushall"]),
            json!(["FLUSHDB", "ASYNC"]),
            json!(["config", "set", "appendonly", "no"]),
            json!(["swapdb", 0, 1]),
            json!(["shutdown", "nosave"]),
            json!(["replicaof", "127.0.0.1", 1]),
            json!(["slaveof", "no", "one"]),
            json!(["acl", "setuser", "default", "off"]),
            json!(["keys", "*"]),
            json!(["function", "load", "#!lua name=x\n"]),
            json!(["fcall", "f", 0]),
            json!(["script", "flush"]),
            json!(["script", "kill"]),
            json!(["script"]),
            json!(["multi"]),
            json!(["select", 1]),
            json!(["copy", "a", "b", "db", 1]),
            json!(["blpop", "k", 0]),
            json!(["client", "kill", "type", "normal"]),
            json!(["publish", "c", "m"]),
            json!(["debug", "sleep", 1]),
            json!(["xread", "block", 0, "streams", "s", "$"]),
        ] {
            let why = refused(bad.clone());
            assert!(
                why.as_deref()
                    .is_some_and(|w| w.starts_with("ERR command is not allowed")),
                "{bad}: {why:?}"
            );
        }
        assert_eq!(
            refused(json!(["script", "flush"])).as_deref(),
            Some(
                "ERR command is not allowed: SCRIPT FLUSH is not on tollgate-rest-proxy's allow-list"
            )
        );
        assert_eq!(
            refused(json!(["xgroup"])).as_deref(),
            Some("ERR command is not allowed: XGROUP is not on tollgate-rest-proxy's allow-list")
        );
        let long = "G".repeat(MAX_NAME + 1);
        assert!(refused(json!([long])).is_some_and(|why| why.contains(&long)));
        assert_eq!(
            refused(json!(["xreadgroup", "group", "g", "c", "block", 1])).as_deref(),
            Some(
                "ERR command is not allowed: XREADGROUP BLOCK would block a connection other \
                 callers share"
            )
        );
    }

    #[test]
    fn acl_rules_hold_the_list_and_the_proxys_own_commands() {
        let rules = acl_rules(|name| name != "HGETDEL");
        assert_eq!(
            rules[..6],
            [
                "on",
                "resetkeys",
                "~*",
                "resetchannels",
                "clearselectors",
                "-@all"
            ]
        );
        for expected in [
            "+get",
            "+script|load",
            "+xgroup|create",
            "+multi",
            "+script|kill",
        ] {
            assert!(rules.iter().any(|r| r == expected), "{expected}");
        }
        assert!(!rules.iter().any(|r| r == "+hgetdel" || r == "+select"));
        assert_eq!(
            acl_rules(|_| true).len(),
            6 + COMMANDS.len() + PROXY_OWN.len()
        );
    }
}
