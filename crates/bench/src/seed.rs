//! The seed: the true ceiling of the same work on Redis, the cheapest
//! correct calls written by hand for this workload, with none of the
//! store's guarantees (no deadline check, no record of the call, no
//! validation of stored values).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::args::Mode;
use crate::load::{Outcome, Side};
use crate::sides::Workload;

/// Adds every cost if each counter stays within its max, else none.
///
/// `KEYS`: the counters. Per counter `i`, `ARGV[3i-2]` its cost, `ARGV[3i-1]`
/// its max and `ARGV[3i]` its lifetime in ms. Returns 1 when applied, 0
/// when refused (every counter as it was).
///
/// Why it is correct: a script runs alone, so no other call sees the
/// counters between its writes. It adds each cost in turn (`INCRBY`, which
/// also adds a cost twice to a key named twice); at the first counter past
/// its max it takes back, last first, every cost it added (that counter's
/// included) and deletes a counter brought back to 0, which it created
/// (or which held 0 and read 0 either way), so a refusal leaves every
/// counter as it was. A counter gets its lifetime when `INCRBY` created it
/// (the reply is the cost) and keeps it after: the key names its window, so
/// it need not live longer. Stored values are trusted to be counts.
///
/// Chosen over reading first (`MGET` of every counter, compare, then
/// `INCRBY` an existing counter or `SET … PX` a new one: no write on a
/// refusal), which is cheaper when most checks are refused and dearer when
/// most are allowed, as every check of `--mode reserve` and `settle` is.
/// Measured on a private redis-server 7.0.15 (2 shared cores), Redis's own
/// time per call from `INFO commandstats` (`usec_per_call` of `evalsha`,
/// after `CONFIG RESETSTAT`), with
/// `redis-benchmark -p 7391 -n 300000 -c 50 -r 10000 EVALSHA <sha> 4
/// m:__rand_int__ h:__rand_int__ d:__rand_int__ e:__rand_int__` and per
/// counter `1 1000000000000 <ttl>` after 50,000 calls of warm-up (all
/// allowed; five alternating runs): this script 5.65 to 5.89 µs (median
/// 5.86), reading first 5.99 to 7.58 µs (median 6.31). With `-r 100` and
/// the second counter's max at 15, full (all refused; three runs): this
/// script 3.68 to 3.87 µs, reading first 3.02 to 3.07 µs. In this
/// benchmark (`--limits 4 --mode reserve --duration 2 --rounds 2 --no-raw`,
/// two runs each) the server's CPU per check was 7.38 to 8.64 µs against
/// 8.38 to 8.87 µs reading first; under `--attack` (90% refused) 5.44 to
/// 7.11 µs against 4.73 to 6.25 µs.
const RESERVE: &str = r"
for i = 1, #KEYS do
  local cost = tonumber(ARGV[3 * i - 2])
  local count = redis.call('INCRBY', KEYS[i], cost)
  if count > tonumber(ARGV[3 * i - 1]) then
    for j = i, 1, -1 do
      if redis.call('DECRBY', KEYS[j], ARGV[3 * j - 2]) == 0 then
        redis.call('DEL', KEYS[j])
      end
    end
    return 0
  end
  if count == cost then
    redis.call('PEXPIRE', KEYS[i], ARGV[3 * i])
  end
end
return 1
";

/// Gives `ARGV[1]` units back to counter `KEYS[1]`, never below 0.
///
/// One `DECRBY`; when it leaves the counter at 0 or below (it held less
/// than the refund, or had expired and `DECRBY` created it), the counter
/// is deleted, which reads as 0 and leaves no key without a lifetime
/// behind. Atomic, so no check in between sees a negative count.
const REFUND: &str = r"
if redis.call('DECRBY', KEYS[1], ARGV[1]) <= 0 then
  redis.call('DEL', KEYS[1])
end
return 1
";

/// The seed side: the same keys as the other sides, over one multiplexed
/// connection, with hand-written calls.
#[derive(Clone)]
pub(crate) struct Seed {
    /// The connection every check shares.
    connection: redis::aio::MultiplexedConnection,
    /// What a check is made of.
    work: Workload,
    /// [`RESERVE`], ready to send.
    reserve: Arc<redis::Script>,
    /// [`REFUND`], ready to send.
    refund: Arc<redis::Script>,
}

/// One counter of a check: its key, cost, max and lifetime in ms.
struct Counter {
    key: String,
    cost: u64,
    max: u64,
    ttl_ms: u64,
}

impl Seed {
    /// Opens the side on `client`'s server.
    pub(crate) async fn open(client: &redis::Client, work: Workload) -> redis::RedisResult<Seed> {
        Ok(Seed {
            connection: client.get_multiplexed_async_connection().await?,
            work,
            reserve: Arc::new(redis::Script::new(RESERVE)),
            refund: Arc::new(redis::Script::new(REFUND)),
        })
    }

    /// The counters of one check for `principal`, in the current windows.
    fn counters(&self, principal: u64) -> Option<Vec<Counter>> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let limits = self.work.limits(&self.work.who(principal)).ok()?;
        Some(
            limits
                .iter()
                .map(|l| {
                    let window = l.rule().window();
                    Counter {
                        key: l.counter_key(window.index(now)),
                        cost: l.cost(),
                        max: l.rule().max(),
                        ttl_ms: window.secs() * 1_000,
                    }
                })
                .collect(),
        )
    }

    /// `MULTI`, `INCRBY` and `PEXPIRE` per counter, `EXEC`: allowed when
    /// every new count is within its max.
    async fn count(&self, counters: &[Counter]) -> Outcome {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for c in counters {
            pipe.incr(&c.key, c.cost);
            pipe.cmd("PEXPIRE").arg(&c.key).arg(c.ttl_ms).ignore();
        }
        let reply: redis::RedisResult<Vec<u64>> =
            pipe.query_async(&mut self.connection.clone()).await;
        match reply {
            Ok(counts) if counts.len() != counters.len() => Outcome::Error,
            Ok(counts) if counts.iter().zip(counters).all(|(&n, c)| n <= c.max) => Outcome::Allowed,
            Ok(_) => Outcome::Refused,
            Err(_) => Outcome::Error,
        }
    }

    /// The reserve script's reply: 1 when applied, 0 when refused.
    async fn reserve(&self, counters: &[Counter]) -> redis::RedisResult<i64> {
        let mut call = self.reserve.prepare_invoke();
        for c in counters {
            call.key(&c.key).arg(c.cost).arg(c.max).arg(c.ttl_ms);
        }
        call.invoke_async(&mut self.connection.clone()).await
    }

    /// Settles the first counter at half the cost, rounded up: refunds the
    /// rest (nothing to send when that is 0, as tollgate sends nothing).
    async fn settle(&self, counters: &[Counter]) -> redis::RedisResult<()> {
        let Some(first) = counters.first() else {
            return Ok(());
        };
        let back = first.cost - first.cost.div_ceil(2);
        if back == 0 {
            return Ok(());
        }
        let mut call = self.refund.prepare_invoke();
        call.key(&first.key).arg(back);
        let _: i64 = call.invoke_async(&mut self.connection.clone()).await?;
        Ok(())
    }
}

impl Side for Seed {
    async fn check(&self, principal: u64) -> Outcome {
        let Some(counters) = self.counters(principal) else {
            return Outcome::Error;
        };
        if self.work.mode == Mode::Count {
            return self.count(&counters).await;
        }
        match self.reserve(&counters).await {
            Ok(1) => {}
            Ok(0) => return Outcome::Refused,
            _ => return Outcome::Error,
        }
        if self.work.mode == Mode::Settle && self.settle(&counters).await.is_err() {
            return Outcome::Error;
        }
        Outcome::Allowed
    }
}
