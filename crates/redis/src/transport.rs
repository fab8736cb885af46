//! [`Transport`]: how a store reaches Redis (TCP, Cluster, REST), and
//! [`eval`], the one script path every transport takes.

use std::future::Future;
use std::time::{Duration, Instant};

use tollgate_core::{Deadline, StoreError};

use crate::call::{Call, Size};
use crate::failure;
use crate::reply::{self, Reply};
use crate::scripts::Script;

/// One way to send commands to Redis. It writes a call's keys and
/// arguments in its own wire format, sends it and hands the reply over as
/// a [`Reply`]; everything else (the deadline, `NOSCRIPT`, what a reply
/// means) is [`eval`]'s and [`reply`](crate::reply)'s, written once.
pub(crate) trait Transport: Send + Sync + 'static {
    /// A call's keys and arguments, written in this transport's format.
    type Args: Call + Send + Sync;

    /// Where a call goes: nothing for one endpoint; a slot (or the node a
    /// redirect named) on a cluster.
    type Route: Send;

    /// An empty script call of `script` about `size` large, to which the
    /// caller writes the keys, then the arguments.
    fn args(&self, script: &Script, size: Size) -> Self::Args;

    /// Sends `args` as one `EVALSHA` of `script`, or with `code` as one
    /// `EVAL` of its code, to `route`, in one round trip. A server's error
    /// reply is `Ok(Reply::Error)`; failing to reach the server, or to read
    /// its reply, is the error. The attempt's `deadline` bounds what the
    /// transport waits for on the caller's behalf (a connection being made).
    fn eval(
        &self,
        script: &Script,
        args: &Self::Args,
        code: bool,
        route: &mut Self::Route,
        deadline: Deadline,
    ) -> impl Future<Output = Result<Reply, StoreError>> + Send;

    /// Sends `MGET` of `keys` to `route`, in one round trip.
    fn mget(
        &self,
        keys: &[&str],
        route: &mut Self::Route,
        deadline: Deadline,
    ) -> impl Future<Output = Result<Reply, StoreError>> + Send;
}

/// Runs `script` with `args` over `transport`: the one script path.
///
/// A deadline already passed sends nothing (the script would refuse it,
/// and nobody waits for the answer). Otherwise one `EVALSHA`; when the
/// server answers `NOSCRIPT` (after a restart, a failover, `SCRIPT FLUSH`),
/// one `EVAL` of the script's code in the same call, which the server
/// caches (never `SCRIPT LOAD` first: a replica may not have the loaded
/// script yet). The script's `DEADLINE` reply is [`StoreError::Timeout`]
/// (nothing was applied), an error reply is the error it says.
pub(crate) async fn eval<T: Transport>(
    transport: &T,
    script: &Script,
    args: T::Args,
    route: &mut T::Route,
    deadline: Deadline,
) -> Result<Reply, StoreError> {
    let started = Instant::now();
    if deadline.has_passed() {
        return Err(StoreError::Timeout(Duration::ZERO));
    }
    let mut answer = transport
        .eval(script, &args, false, route, deadline)
        .await?;
    if matches!(&answer, Reply::Error(text) if failure::is_noscript(text)) {
        if deadline.has_passed() {
            return Err(StoreError::Timeout(started.elapsed()));
        }
        tracing::debug!("script not cached by the server; sending it with EVAL");
        answer = transport.eval(script, &args, true, route, deadline).await?;
    }
    reply::script_result(answer, started.elapsed())
}

/// Sends `MGET` of `keys` over `transport` (a read: no script, nothing to
/// apply late, but a deadline already passed still sends nothing).
pub(crate) async fn mget<T: Transport>(
    transport: &T,
    keys: &[&str],
    route: &mut T::Route,
    deadline: Deadline,
) -> Result<Reply, StoreError> {
    if deadline.has_passed() {
        return Err(StoreError::Timeout(Duration::ZERO));
    }
    match transport.mget(keys, route, deadline).await? {
        Reply::Error(text) => Err(failure::from_server(&text)),
        answer => Ok(answer),
    }
}
