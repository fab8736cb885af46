//! Building script calls: one `EVALSHA` (or, after `NOSCRIPT`, one `EVAL`)
//! with its keys, for every transport of this crate.

use std::io::Write as _;

use redis::{Arg, Cmd, RedisWrite as _, Script};
use tollgate_core::Counter;
use tollgate_redis_scripts::{Call, Counters, Single};

/// The start of an `EVALSHA` of `script` with `keys` keys, to which the
/// caller appends the keys, then the deadline and the other arguments;
/// `room` is the command's expected size (see [`room`]).
pub(crate) fn evalsha(script: &Script, keys: usize, room: (usize, usize)) -> Cmd {
    let (args, bytes) = room;
    let mut cmd = Cmd::with_capacity(args, bytes);
    cmd.arg("EVALSHA").arg(script.get_hash()).arg(keys);
    cmd
}

/// The room to reserve for a script call, as (arguments, bytes): `keys`
/// keys under `prefix`, then the deadline and `per_key` arguments per key,
/// `text` the bytes of the keys and of the arguments that are not numbers.
/// A size hint only: a command outgrowing it grows (so no test can tell a
/// wrong hint from a right one, and mutation testing skips this function).
fn room(
    keys: usize,
    per_key: usize,
    text: impl IntoIterator<Item = usize>,
    prefix: &str,
) -> (usize, usize) {
    let args = 1 + per_key * keys;
    let text: usize = text.into_iter().sum();
    (4 + keys + args, 64 + text + keys * prefix.len() + args * 20)
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
    let n = counters.clone().count();
    let text = counters.clone().map(|c| c.key.len());
    let mut call = Keyed {
        cmd: evalsha(script, n, room(n, layout.per_counter(), text, prefix)),
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
    let text = [key.len(), layout.text_bytes()];
    let mut call = Keyed {
        cmd: evalsha(script, 1, room(1, layout.args(), text, prefix)),
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
        let mut cmd = evalsha(&script, 2, room(2, 0, [6], "p:"));
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
