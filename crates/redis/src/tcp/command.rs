//! Script calls as the redis crate's commands: one `EVALSHA` (or, after
//! `NOSCRIPT`, the same call as one `EVAL`), and `MGET`; and the
//! [`Transport`] of every connection that sends such commands ([`Resp`]).

use std::borrow::Cow;
use std::future::Future;

use redis::{Arg, Cmd};
use tollgate_core::{Deadline, StoreError};

use crate::call::{Call, Size};
use crate::reply::Reply;
use crate::scripts::Script;
use crate::transport::Transport;

/// A connection that sends the redis crate's commands (one server, a
/// cluster): it is a [`Transport`] once it can send one command.
pub(crate) trait Resp: Send + Sync + 'static {
    /// Where a command goes.
    type Route: Send;

    /// Sends `cmd` to `route` in one round trip; a server's error reply is
    /// `Ok(Reply::Error)`.
    fn send(
        &self,
        cmd: &Cmd,
        route: &mut Self::Route,
        deadline: Deadline,
    ) -> impl Future<Output = Result<Reply, StoreError>> + Send;
}

impl<T: Resp> Transport for T {
    type Args = Cmd;
    type Route = T::Route;

    fn args(&self, script: &Script, size: Size) -> Cmd {
        evalsha(script, size)
    }

    async fn eval(
        &self,
        script: &Script,
        args: &Cmd,
        code: bool,
        route: &mut T::Route,
        deadline: Deadline,
    ) -> Result<Reply, StoreError> {
        self.send(&script_call(script, args, code), route, deadline)
            .await
    }

    async fn mget(
        &self,
        keys: &[&str],
        route: &mut T::Route,
        deadline: Deadline,
    ) -> Result<Reply, StoreError> {
        self.send(&mget(keys), route, deadline).await
    }
}

impl Call for Cmd {
    fn key(&mut self, key: &str) {
        self.arg(key);
    }

    fn number(&mut self, value: u64) {
        self.arg(value);
    }

    fn text(&mut self, value: &str) {
        self.arg(value);
    }
}

/// The room to reserve for a call of `size`, as (arguments, bytes): a size
/// hint only (see [`Size`]; mutation testing skips this function).
fn room(size: Size) -> (usize, usize) {
    let args = 3 + size.keys + size.args;
    (args, 64 + size.text + args * 20)
}

/// The start of an `EVALSHA` of `script` about `size` large, to which the
/// caller appends the keys, then the arguments.
fn evalsha(script: &Script, size: Size) -> Cmd {
    let (args, bytes) = room(size);
    let mut cmd = Cmd::with_capacity(args, bytes);
    cmd.arg("EVALSHA").arg(&script.sha).arg(size.keys);
    cmd
}

/// The call to send for `args` (an `EVALSHA` of `script` built by
/// [`evalsha`]): itself, or with `code`, the same call as `EVAL`.
fn script_call<'a>(script: &Script, args: &'a Cmd, code: bool) -> Cow<'a, Cmd> {
    if code {
        Cow::Owned(as_eval(args, script.code))
    } else {
        Cow::Borrowed(args)
    }
}

/// The same call as `evalsha` (an `EVALSHA` built by [`evalsha`]), sent as
/// `EVAL` with the script's `code`: the server runs it and caches it, and
/// the call still names its keys, so a cluster routes it to the same node.
fn as_eval(evalsha: &Cmd, code: &str) -> Cmd {
    let mut cmd = Cmd::with_capacity(evalsha.args_iter().len(), code.len() + 64);
    cmd.arg("EVAL").arg(code);
    for arg in evalsha.args_iter().skip(2) {
        if let Arg::Simple(bytes) = arg {
            cmd.arg(bytes);
        }
    }
    cmd
}

/// `MGET key...`.
fn mget(keys: &[&str]) -> Cmd {
    let mut cmd = redis::cmd("MGET");
    for key in keys {
        cmd.arg(*key);
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{Counters, Part, Priors};
    use crate::scripts::SCRIPTS;

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
        let script = &SCRIPTS.check;
        let counters = [tollgate_core::Counter {
            key: "a:1".into(),
            ttl: std::time::Duration::from_secs(1),
            cost: 42,
            max: 50,
            floor: 0,
            prior: None,
            lease: false,
        }];
        let record = crate::record::Record {
            key: "r".into(),
            id: "i".into(),
            lifetime_ms: 9,
        };
        let parts = [Part {
            op: Counters::Refund,
            counters: counters.iter(),
            record: &record,
            cutoff: 7,
            priors: Priors::Keyed,
        }];
        let mut cmd = evalsha(script, crate::call::size(&parts));
        crate::call::write(&mut cmd, &parts);
        let eval = as_eval(&cmd, script.code);
        let sent = args(&cmd);
        let resent = args(&eval);
        assert_eq!(sent[0], b"EVALSHA");
        assert_eq!(sent[1], script.sha.as_bytes());
        assert_eq!(resent[0], b"EVAL");
        assert_eq!(resent[1], script.code.as_bytes());
        assert_eq!(sent[2..], resent[2..]);
        assert_eq!(
            resent[2..],
            [
                &b"2"[..],
                b"a:1",
                b"r",
                b"1",
                b"118",
                b"1",
                b"i",
                b"f1.1",
                b"7",
                b"42"
            ]
        );
    }
}
