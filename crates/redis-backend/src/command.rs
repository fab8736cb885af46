//! Building script calls: one `EVALSHA` (or, after `NOSCRIPT`, one `EVAL`)
//! with its keys, for every transport of this crate.

use std::io::Write as _;

use redis::{Arg, Cmd, RedisWrite as _, Script};
use tollgate_core::Counter;
use tollgate_redis_scripts::{Call, Counters, Single};

/// The start of an `EVALSHA` of `script` with `keys` keys, to which the
/// caller appends the keys, then the deadline and `args` more arguments;
/// `bytes` is the keys' total length, `prefix` the store's key prefix.
pub(crate) fn evalsha(
    script: &Script,
    keys: usize,
    args: usize,
    bytes: usize,
    prefix: &str,
) -> Cmd {
    let size = 64 + bytes + keys * prefix.len() + args * 20;
    let mut cmd = Cmd::with_capacity(4 + keys + args, size);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
    cmd
}

/// Appends `key` with `prefix` as one argument, without building the
/// prefixed key on its own.
pub(crate) fn push_key(cmd: &mut Cmd, prefix: &str, key: &str) {
    if prefix.is_empty() {
        cmd.arg(key);
    } else {
        let mut arg = cmd.writer_for_next_arg();
        // Writing to the command's own buffer cannot fail.
        let _ = arg.write_all(prefix.as_bytes());
        let _ = arg.write_all(key.as_bytes());
    }
}

/// An `EVALSHA` of the counter script `script` (laid out as `layout`) on
/// `counters`, with the deadline `cutoff`; keys under `prefix`.
pub(crate) fn counters<'a, I>(
    script: &Script,
    layout: Counters,
    counters: I,
    cutoff: u64,
    prefix: &str,
) -> Cmd
where
    I: IntoIterator<Item = &'a Counter>,
    I::IntoIter: Clone,
{
    let counters = counters.into_iter();
    let (n, bytes) = counters
        .clone()
        .fold((0, 0), |(n, bytes), c| (n + 1, bytes + c.key.len()));
    let mut call = Keyed {
        cmd: evalsha(script, n, 1 + layout.per_counter() * n, bytes, prefix),
        prefix,
    };
    layout.write(&mut call, counters, cutoff);
    call.cmd
}

/// An `EVALSHA` of the one-key script `script` (laid out as `layout`) on
/// `key`, with the deadline `cutoff`; the key under `prefix`.
pub(crate) fn single(
    script: &Script,
    layout: Single<'_>,
    key: &str,
    cutoff: u64,
    prefix: &str,
) -> Cmd {
    let bytes = key.len() + layout.text_bytes();
    let mut call = Keyed {
        cmd: evalsha(script, 1, 1 + layout.args(), bytes, prefix),
        prefix,
    };
    layout.write(&mut call, key, cutoff);
    call.cmd
}

/// A script call written into a [`Cmd`], its keys under a prefix.
struct Keyed<'a> {
    cmd: Cmd,
    prefix: &'a str,
}

impl Call for Keyed<'_> {
    fn key(&mut self, key: &str) {
        push_key(&mut self.cmd, self.prefix, key);
    }

    fn number(&mut self, value: u64) {
        self.cmd.arg(value);
    }

    fn text(&mut self, value: &str) {
        self.cmd.arg(value);
    }
}

/// The same call as `evalsha` (an `EVALSHA` built by [`evalsha`]), sent as
/// `EVAL` with the script's `code`: the server runs it and caches it, and
/// the call still names its keys, so a cluster routes it to the same node.
pub(crate) fn as_eval(evalsha: &Cmd, code: &str) -> Cmd {
    let mut cmd = Cmd::with_capacity(evalsha.args_iter().len(), code.len() + 64);
    cmd.arg("EVAL").arg(code);
    for arg in evalsha.args_iter().skip(2) {
        if let Arg::Simple(bytes) = arg {
            cmd.arg(bytes);
        }
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(cmd: &Cmd) -> Vec<Vec<u8>> {
        cmd.args_iter()
            .filter_map(|arg| match arg {
                Arg::Simple(bytes) => Some(bytes.to_vec()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_eval_carries_the_same_keys_and_arguments() {
        let code = "return 1";
        let script = Script::new(code);
        let mut cmd = evalsha(&script, 2, 1, 6, "p:");
        push_key(&mut cmd, "p:", "a:1");
        push_key(&mut cmd, "p:", "b:2");
        cmd.arg(42_u64);
        let eval = as_eval(&cmd, code);
        let sent = args(&cmd);
        let resent = args(&eval);
        assert_eq!(sent[0], b"EVALSHA");
        assert_eq!(resent[0], b"EVAL");
        assert_eq!(resent[1], code.as_bytes());
        assert_eq!(sent[2..], resent[2..]);
        assert_eq!(resent[3], b"p:a:1");
        assert_eq!(resent[5], b"42");
    }
}
