//! Reading the text of Redis's `INFO`: one field, the calls of each
//! command (`INFO commandstats`), the replies of one error (`INFO
//! errorstats`).

use std::collections::BTreeMap;

/// The value of field `name` (`name:value` on a line of its own), trimmed.
pub fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

/// `INFO commandstats` as command → calls sent: run, or refused before
/// running (`rejected_calls`: `NOPERM`, a wrong arity). A command never
/// sent is not there.
pub fn command_calls(info: &str) -> BTreeMap<String, u64> {
    info.lines()
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            Some((
                name.to_owned(),
                stat(stats, "calls")? + stat(stats, "rejected_calls").unwrap_or(0),
            ))
        })
        .collect()
}

/// How many times `command` (`ping`, `acl|setuser`) ran, from `INFO
/// commandstats`: its `calls`, without those refused before running.
/// `None` when it was never sent.
pub fn command_runs(info: &str, command: &str) -> Option<u64> {
    stat(field(info, &format!("cmdstat_{command}"))?, "calls")
}

/// The number `key=` holds in a commandstats line's `key=value,…` list.
fn stat(stats: &str, key: &str) -> Option<u64> {
    stats
        .split(',')
        .find_map(|s| s.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// How many replies of error `code` (`UNKILLABLE`, `NOPERM`) the server
/// has sent, from `INFO errorstats`; `None` when it sent none.
pub fn error_count(info: &str, code: &str) -> Option<u64> {
    field(info, &format!("errorstat_{code}"))?
        .strip_prefix("count=")?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_command_calls_are_read_from_info_text() {
        let info = "# Stats\r\ntotal_connections_received:12\r\n\
            cmdstat_ping:calls=3,usec=9,usec_per_call=3.00,rejected_calls=2,failed_calls=0\r\n\
            cmdstat_script|kill:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=1\r\n";
        assert_eq!(field(info, "total_connections_received"), Some("12"));
        assert_eq!(field(info, "total_connections"), None);
        let calls = command_calls(info);
        assert_eq!(calls.get("ping"), Some(&5));
        assert_eq!(calls.get("script|kill"), Some(&1));
        assert_eq!(calls.len(), 2);
        assert_eq!(command_runs(info, "ping"), Some(3));
        assert_eq!(command_runs(info, "script|kill"), Some(1));
        assert_eq!(command_runs(info, "script"), None);
        let errors =
            "# Errorstats\r\nerrorstat_NOPERM:count=19\r\nerrorstat_UNKILLABLE:count=1\r\n";
        assert_eq!(error_count(errors, "UNKILLABLE"), Some(1));
        assert_eq!(error_count(errors, "NOPERM"), Some(19));
        assert_eq!(error_count(errors, "NOTBUSY"), None);
    }
}
