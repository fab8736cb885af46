//! [`Batcher`]: the counter calls waiting on one endpoint share a script call.
//!
//! A call is sent at once when fewer than [`DEPTH`] script calls are in
//! flight on the endpoint; otherwise it waits for the next one to end,
//! and goes with every call that waited with it (at most [`MOST`]), in one
//! call of [`CHECK`](crate::scripts::CHECK), each with its own deadline,
//! record and reply. No call waits for a batch to fill: under light load
//! every batch is one call; under load, batches grow by themselves to what
//! arrived during one round trip, and the server's per-call work (the
//! script's dispatch, `TIME`, the reply) is paid once per batch.
//!
//! A batch is sent by a task of its own, so a caller that gives up (its
//! attempt's timer) drops its wait and nobody else's. The task waits for
//! the reply at most until the latest deadline among its calls and two
//! skew margins (as long as the limiter awaits an answer); a call
//! whose caller gave up, or whose deadline passed, before its batch left
//! is not sent.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tollgate_core::{Counter, Deadline, StoreError};
use tracing::instrument::WithSubscriber;

use crate::call::{self, Counters, Part, Priors};
use crate::record::Record;
use crate::reply::{self, Reply};
use crate::scripts::SCRIPTS;
use crate::transport::{Transport, eval};

/// Script calls in flight at once on one endpoint: two, so that the server
/// has the next batch to run while the reply to the last one travels back.
pub(crate) const DEPTH: usize = 2;

/// The most calls in one batch: a bound on one script's run (a few
/// hundred microseconds), not on throughput.
pub(crate) const MOST: usize = 64;

/// Batches the counter calls of one endpoint store (its route is `()`).
pub(crate) struct Batcher<T> {
    shared: Arc<Shared<T>>,
}

struct Shared<T> {
    transport: Arc<T>,
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Member>,
    /// Tasks sending batches.
    sending: usize,
}

/// One call in a batch.
struct Member {
    op: Counters,
    counters: Vec<Counter>,
    record: Record,
    deadline: Deadline,
    reply: oneshot::Sender<Result<Reply, StoreError>>,
}

impl<T: Transport<Route = ()>> Batcher<T> {
    /// A batcher sending through `transport`.
    pub(crate) fn new(transport: Arc<T>) -> Batcher<T> {
        Batcher {
            shared: Arc::new(Shared {
                transport,
                queue: Mutex::default(),
            }),
        }
    }

    /// Runs `op` on `counters`, recorded as `record`: the call's own reply
    /// (read by [`reply::script_result`]), sent alone or with the calls
    /// waiting beside it.
    pub(crate) async fn call(
        &self,
        op: Counters,
        counters: &[Counter],
        record: Record,
        deadline: Deadline,
    ) -> Result<Reply, StoreError> {
        let started = Instant::now();
        if deadline.has_passed() {
            return Err(StoreError::Timeout(Duration::ZERO));
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError::Backend("tollgate-redis needs a tokio runtime".into()))?;
        let (reply, answer) = oneshot::channel();
        let member = Member {
            op,
            counters: counters.to_vec(),
            record,
            deadline,
            reply,
        };
        let batch = {
            let mut queue = lock(&self.shared.queue);
            queue.waiting.push(member);
            (queue.sending < DEPTH).then(|| {
                queue.sending += 1;
                queue.take()
            })
        };
        if let Some(batch) = batch {
            let sender = Sender {
                shared: Arc::clone(&self.shared),
                armed: true,
            };
            // Logs of the batch go where the caller's go.
            runtime.spawn(sender.run(batch).with_current_subscriber());
        }
        match answer.await {
            Ok(result) => reply::script_result(result?, started.elapsed()),
            Err(_) => Err(StoreError::Connection(
                "the batch carrying the call ended without its reply".into(),
            )),
        }
    }
}

impl Queue {
    /// The next batch: the calls that waited longest, at most [`MOST`].
    fn take(&mut self) -> Vec<Member> {
        if self.waiting.len() <= MOST {
            std::mem::take(&mut self.waiting)
        } else {
            self.waiting.drain(..MOST).collect()
        }
    }
}

/// A task sending batches until none waits. Dropped without finishing (its
/// runtime shut down), it still frees its place, so that the next call
/// sends.
struct Sender<T> {
    shared: Arc<Shared<T>>,
    armed: bool,
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        if self.armed {
            lock(&self.shared.queue).sending -= 1;
        }
    }
}

impl<T: Transport<Route = ()>> Sender<T> {
    async fn run(mut self, mut batch: Vec<Member>) {
        loop {
            send(&*self.shared.transport, batch).await;
            let mut queue = lock(&self.shared.queue);
            if queue.waiting.is_empty() {
                queue.sending -= 1;
                self.armed = false;
                return;
            }
            batch = queue.take();
        }
    }
}

/// Sends one batch and hands each call its reply.
async fn send<T: Transport<Route = ()>>(transport: &T, batch: Vec<Member>) {
    let started = Instant::now();
    let mut members = Vec::with_capacity(batch.len());
    for member in batch {
        if member.deadline.has_passed() {
            let _ = member.reply.send(Err(StoreError::Timeout(Duration::ZERO)));
        } else if !member.reply.is_closed() {
            members.push(member);
        }
    }
    let Some(latest) = members
        .iter()
        .map(|m| m.deadline)
        .max_by_key(Deadline::instant)
    else {
        return;
    };
    let script = &SCRIPTS.check;
    let parts: Vec<Part<'_, _>> = members
        .iter()
        .map(|m| Part {
            op: m.op,
            counters: m.counters.iter(),
            record: &m.record,
            cutoff: m.deadline.cutoff_unix_millis(),
            priors: Priors::Keyed,
        })
        .collect();
    let mut args = transport.args(script, call::size(&parts));
    call::write(&mut args, &parts);
    drop(parts);
    let mut route = ();
    let sent = eval(transport, script, args, &mut route, latest);
    // Awaited as long as the limiter awaits an answer: its deadline, and
    // two skew margins for an answer the server applied by its cutoff.
    let until = latest.instant() + Deadline::SKEW_MARGIN * 2;
    let answer = match tokio::time::timeout_at(until.into(), sent).await {
        Ok(answer) => answer.and_then(|answer| reply::calls(answer, members.len())),
        Err(_) => Err(StoreError::Timeout(started.elapsed())),
    };
    match answer {
        Ok(replies) => {
            for (member, reply) in members.into_iter().zip(replies) {
                let _ = member.reply.send(Ok(reply));
            }
        }
        Err(err) => {
            for member in members {
                let _ = member.reply.send(Err(copy(&err)));
            }
        }
    }
}

/// The same failure again, for another call of the batch it ended.
fn copy(err: &StoreError) -> StoreError {
    match err {
        StoreError::Connection(source) => StoreError::Connection(source.to_string().into()),
        StoreError::Timeout(after) => StoreError::Timeout(*after),
        StoreError::Busy(source) => StoreError::Busy(source.to_string().into()),
        StoreError::InvalidReply(text) => StoreError::InvalidReply(text.clone()),
        StoreError::Backend(source) => StoreError::Backend(source.to_string().into()),
        StoreError::Open => StoreError::Open,
        other => StoreError::Backend(other.to_string().into()),
    }
}

fn lock(queue: &Mutex<Queue>) -> MutexGuard<'_, Queue> {
    // The queue holds plain values, consistent even after a panic elsewhere.
    queue
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::sync::Semaphore;

    use super::*;
    use crate::call::{Size, Written};
    use crate::scripts::Script;

    /// An endpoint that answers a script call only when let through, and
    /// keeps the keys of each: a count of one counter answers 1, except
    /// on the key `bad`, which answers an error reply.
    struct Gate {
        open: Semaphore,
        sent: Mutex<Vec<Vec<String>>>,
        waiting: AtomicUsize,
    }

    impl Transport for Gate {
        type Args = Written;
        type Route = ();

        fn args(&self, _: &Script, _: Size) -> Written {
            Written::default()
        }

        async fn eval(
            &self,
            _: &Script,
            args: &Written,
            _: bool,
            _: &mut (),
            _: Deadline,
        ) -> Result<Reply, StoreError> {
            let keys: Vec<String> = args
                .0
                .iter()
                .filter(|a| a.starts_with("k:"))
                .cloned()
                .collect();
            self.waiting.fetch_add(1, Ordering::SeqCst);
            let permit = self.open.acquire().await.unwrap();
            permit.forget();
            // Each call has one counter, and the calls share one hash.
            let counters = &keys[..keys.len().saturating_sub(1)];
            let replies = counters
                .iter()
                .map(|key| match key.as_str() {
                    "k:bad" => Reply::Error("ERR counter is not an integer".into()),
                    _ => Reply::Array(vec![Reply::Int(1)]),
                })
                .collect();
            lock_sent(&self.sent).push(keys);
            Ok(Reply::Array(replies))
        }

        async fn mget(&self, _: &[&str], _: &mut (), _: Deadline) -> Result<Reply, StoreError> {
            Ok(Reply::Nil)
        }
    }

    fn lock_sent(sent: &Mutex<Vec<Vec<String>>>) -> MutexGuard<'_, Vec<Vec<String>>> {
        sent.lock().unwrap()
    }

    /// A batcher on a gate that lets nothing through yet.
    fn closed() -> (Arc<Gate>, Arc<Batcher<Gate>>) {
        let gate = Arc::new(Gate {
            open: Semaphore::new(0),
            sent: Mutex::default(),
            waiting: AtomicUsize::new(0),
        });
        let batcher = Arc::new(Batcher::new(Arc::clone(&gate)));
        (gate, batcher)
    }

    /// A batcher on a closed gate, with two script calls (`a`, `b`) held in
    /// flight: the calls made now wait for one of them to end.
    async fn two_in_flight() -> (Arc<Gate>, Arc<Batcher<Gate>>, [Pending; 2]) {
        let (gate, batcher) = closed();
        let deadline = Deadline::after(Duration::from_secs(10));
        let first = [
            count(&batcher, "a", deadline),
            count(&batcher, "b", deadline),
        ];
        until_waiting(&gate, 2).await;
        (gate, batcher, first)
    }

    type Pending = tokio::task::JoinHandle<Result<Reply, StoreError>>;

    fn counter(key: &str) -> Counter {
        Counter {
            key: key.into(),
            ttl: Duration::from_secs(60),
            cost: 1,
            max: 10,
            floor: 0,
            prior: None,
            lease: false,
        }
    }

    /// Waits until `done` holds, failing after 5 s.
    async fn until(what: &str, done: impl Fn() -> bool) {
        let started = std::time::Instant::now();
        while !done() {
            assert!(started.elapsed() < Duration::from_secs(5), "never: {what}");
            tokio::task::yield_now().await;
        }
    }

    async fn until_waiting(gate: &Gate, n: usize) {
        let sent = || gate.waiting.load(Ordering::SeqCst) >= n;
        until(&format!("{n} script calls in flight"), sent).await;
    }

    async fn until_queued(batcher: &Batcher<Gate>, n: usize) {
        let queued = || lock(&batcher.shared.queue).waiting.len() >= n;
        until(&format!("{n} calls waiting"), queued).await;
    }

    fn count(batcher: &Arc<Batcher<Gate>>, key: &'static str, deadline: Deadline) -> Pending {
        let batcher = Arc::clone(batcher);
        tokio::spawn(async move {
            let record = Record::new(tollgate_core::CheckId::new(), deadline);
            batcher
                .call(Counters::Count, &[counter(key)], record, deadline)
                .await
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn calls_waiting_behind_two_in_flight_share_the_next_script_call_each_with_its_reply() {
        let (gate, batcher, first) = two_in_flight().await;
        let deadline = Deadline::after(Duration::from_secs(10));
        let queued = ["c", "bad", "d"].map(|key| count(&batcher, key, deadline));
        until_queued(&batcher, 3).await;
        gate.open.add_permits(3);
        for call in first {
            assert_eq!(
                call.await.unwrap().unwrap(),
                Reply::Array(vec![Reply::Int(1)])
            );
        }
        let [c, bad, d] = queued;
        assert_eq!(c.await.unwrap().unwrap(), Reply::Array(vec![Reply::Int(1)]));
        let err = bad.await.unwrap().unwrap_err();
        assert_eq!(err.kind(), "backend", "{err:?}");
        assert_eq!(d.await.unwrap().unwrap(), Reply::Array(vec![Reply::Int(1)]));
        let sent = lock_sent(&gate.sent).clone();
        assert_eq!(sent.len(), 3, "{sent:?}");
        // The three in one script call (in the order they queued up).
        let shared = sent.iter().find(|keys| keys.len() == 4).map(|keys| {
            let mut calls: Vec<&str> = keys[..3].iter().map(String::as_str).collect();
            calls.sort_unstable();
            calls
        });
        assert_eq!(
            shared,
            Some(vec!["k:bad", "k:c", "k:d"]),
            "one script call for the three: {sent:?}"
        );
        assert_eq!(lock(&batcher.shared.queue).sending, 0);
    }

    /// A batch task dropped unfinished (its runtime shut down) frees its
    /// place: a later call on the endpoint is sent, not queued forever
    /// behind senders that no longer run.
    #[test]
    fn a_batch_task_dropped_with_its_runtime_frees_its_place() {
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        };
        let first = runtime();
        let (gate, batcher, in_flight) = first.block_on(two_in_flight());
        drop(in_flight);
        drop(first);
        assert_eq!(lock(&batcher.shared.queue).sending, 0);
        runtime().block_on(async {
            gate.open.add_permits(1);
            let call = count(&batcher, "c", Deadline::after(Duration::from_secs(5)));
            let reply = tokio::time::timeout(Duration::from_secs(5), call).await;
            let reply = reply.expect("the call was never sent").unwrap().unwrap();
            assert_eq!(reply, Reply::Array(vec![Reply::Int(1)]));
        });
    }

    /// A batch waits for its reply as long as the limiter awaits an
    /// answer: two skew margins past its latest deadline (an answer the
    /// server applied by its cutoff), and not longer.
    #[tokio::test(start_paused = true)]
    async fn a_batch_awaits_its_reply_two_skew_margins_past_its_deadline() {
        for (late, answered) in [(3, true), (5, false)] {
            let (gate, batcher) = closed();
            let deadline = Deadline::after(Duration::from_millis(100));
            let call = count(&batcher, "a", deadline);
            until_waiting(&gate, 1).await;
            // `late` half-margins past the deadline, the server answers.
            let at = deadline.instant() + Deadline::SKEW_MARGIN * late / 2;
            tokio::time::sleep_until(at.into()).await;
            gate.open.add_permits(1);
            let reply = call.await.unwrap();
            if answered {
                assert_eq!(reply.unwrap(), Reply::Array(vec![Reply::Int(1)]));
            } else {
                assert_eq!(reply.unwrap_err().kind(), "timeout");
            }
        }
    }

    // Paused time: `late` outlives its deadline without a real wait.
    #[tokio::test(start_paused = true)]
    async fn a_call_whose_caller_gave_up_before_its_batch_left_is_not_sent() {
        let (gate, batcher, first) = two_in_flight().await;
        let deadline = Deadline::after(Duration::from_secs(10));
        let gone = count(&batcher, "gone", deadline);
        let late = count(&batcher, "late", Deadline::after(Duration::from_millis(20)));
        let kept = count(&batcher, "kept", deadline);
        until_queued(&batcher, 3).await;
        gone.abort();
        tokio::time::sleep(Duration::from_millis(40)).await;
        gate.open.add_permits(3);
        for call in first {
            call.await.unwrap().unwrap();
        }
        assert_eq!(late.await.unwrap().unwrap_err().kind(), "timeout");
        kept.await.unwrap().unwrap();
        let sent = lock_sent(&gate.sent).clone();
        assert_eq!(sent.len(), 3, "{sent:?}");
        let third = sent
            .iter()
            .find(|keys| keys[0] != "k:a" && keys[0] != "k:b");
        assert_eq!(
            third.map(|keys| (keys[0].as_str(), keys.len())),
            Some(("k:kept", 2)),
            "only the call still awaited: {sent:?}"
        );
    }
}
