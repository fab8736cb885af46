//! The Lua scripts of every store of this crate (over TCP, Cluster and
//! REST): one per write, each sent as one `EVALSHA`. Each is a documented
//! `pub const` with its `KEYS`/`ARGV` contract, so that a raw client can
//! send exactly the same work.
//!
//! Every write script makes the same deadline check before it writes (a
//! counter script first looks up its call's record: answering a retry of a
//! call already applied writes nothing, so it needs no deadline): it reads
//! the server's clock (`TIME`) and, when it is past `ARGV[1]` (the caller's
//! `Deadline::cutoff_unix_millis` (tollgate-core),
//! wall-clock milliseconds, skew margin included), it writes nothing and
//! returns the status reply `DEADLINE`, which the store reports as
//! `StoreError::Timeout`. Redis 5 and
//! later replicate scripts by their effects, so a script may read `TIME`
//! before it writes.
//!
//! Every counter script reads all its counters before its first write and
//! refuses (an error reply, nothing written) any stored value that is not a
//! count: only `0` or digits without a leading zero, at most 2^53
//! (`9007199254740992`), compared as text, so no value is rounded on the
//! way in. A value of another type (a list) fails the first `GET` with
//! `WRONGTYPE`, also before any write.
//!
//! Lua numbers are doubles. Counts and costs are at most 2^53 and maxes at
//! most 2^53 - 1 (the core's bounds), so every count, cost and max is exact;
//! `count + cost` is exact up to 2^53 and, above it, rounds to a value that
//! is still above 2^53 (rounding is monotonic and 2^53 is a double), so
//! `math.min(count + cost, 2^53)` saturates exactly and `count + cost <= max`
//! is decided exactly. Numbers are written back as `string.format('%.0f')`,
//! exact for every integer up to 2^53 (Lua's own `tostring` keeps only 14
//! digits), and returned as integer replies, exact up to 2^53.

use std::sync::LazyLock;

/// The deadline check: `DEADLINE`, nothing written, once the server's
/// clock is past `ARGV[1]`.
macro_rules! deadline_check {
    () => {
        r"
local clock = redis.call('TIME')
if tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) > tonumber(ARGV[1]) then
  return redis.status_reply('DEADLINE')
end
"
    };
}

/// A write script: the deadline check, then `$body`.
macro_rules! write_script {
    ($($body:expr),+) => {
        concat!(deadline_check!(), $($body),+)
    };
}

/// Reads every counter into `counts` (`n` of them, `KEYS[1..n]`), or
/// returns an error reply before any write when one holds something else
/// than a count.
macro_rules! read_counts {
    () => {
        r"
local counts = {}
for i = 1, n do
  local value = redis.call('GET', KEYS[i])
  if not value or value == '0' then
    counts[i] = 0
  elseif #value > 16 or not string.find(value, '^[1-9]%d*$') then
    return redis.error_reply('ERR counter is not an integer')
  else
    if #value == 16 then
      -- Compared in two exact parts: 15 digits, then the last one ('2' is 50).
      local head = tonumber(string.sub(value, 1, 15))
      if head > 900719925474099
          or (head == 900719925474099 and string.byte(value, 16) > 50) then
        return redis.error_reply('ERR counter is over 2^53')
      end
    end
    counts[i] = tonumber(value)
  end
end
"
    };
}

/// A counter script: the call's record (`KEYS[n+1]`, unless `ARGV[#ARGV]`
/// is 0: no record), whose reply it returns when the call was applied
/// before (even past the deadline: a replay writes nothing); the deadline
/// check; every counter read into `counts`; then `$body`, which returns
/// `remember(reply)`: the reply, recorded for `ARGV[#ARGV]` ms.
macro_rules! counter_script {
    ($body:literal) => {
        concat!(
            r"
local n = #KEYS
local record
if ARGV[#ARGV] ~= '0' then
  n = n - 1
  record = KEYS[n + 1]
  local done = redis.call('GET', record)
  if done then
    local reply = {}
    for number in string.gmatch(done, '%d+') do
      reply[#reply + 1] = tonumber(number)
    end
    return reply
  end
end
local function remember(reply)
  if record then
    local text = {}
    for i = 1, #reply do
      text[i] = string.format('%.0f', reply[i])
    end
    redis.call('SET', record, table.concat(text, ','), 'PX', ARGV[#ARGV])
  end
  return reply
end
",
            deadline_check!(),
            read_counts!(),
            $body
        )
    };
}

/// Adds each cost, saturating at 2^53: the store's `count`.
///
/// `KEYS`: the counters, then the call's record. `ARGV[1]`: the deadline
/// (wall-clock ms); then per counter `i`, `ARGV[2i]` its lifetime in ms and
/// `ARGV[2i+1]` its cost; last, the record's lifetime in ms. Sets each
/// counter to `min(count + cost, 2^53)` with its lifetime (`SET … PX`).
/// Returns the new counts (recorded: a retry of the call is answered them
/// and applies nothing), `DEADLINE`, or an error reply (nothing written)
/// when a counter holds something else than a count.
pub const COUNT: &str = counter_script!(
    r"
for i = 1, n do
  counts[i] = math.min(counts[i] + tonumber(ARGV[2 * i + 1]), 9007199254740992)
  redis.call('SET', KEYS[i], string.format('%.0f', counts[i]), 'PX', ARGV[2 * i])
end
return remember(counts)
"
);

/// Adds every cost if each fits, else none: the store's `reserve`.
///
/// `KEYS`: the counters, then the call's record. `ARGV[1]`: the deadline
/// (wall-clock ms); then per counter `i`, `ARGV[3i-1]` its lifetime in ms,
/// `ARGV[3i]` its cost and `ARGV[3i+1]` its max; last, the record's
/// lifetime in ms. When `count + cost <= max` for every counter, sets each
/// to `count + cost` with its lifetime (`SET … PX`). Returns `{applied,
/// count...}`: 1 and the new counts, or 0 and the current counts (recorded
/// either way: a retry is answered the same); `DEADLINE`; or an error
/// reply (nothing written) when a counter holds something else than a
/// count.
pub const RESERVE: &str = counter_script!(
    r"
local fits = 1
for i = 1, n do
  if counts[i] + tonumber(ARGV[3 * i]) > tonumber(ARGV[3 * i + 1]) then
    fits = 0
  end
end
if fits == 1 then
  for i = 1, n do
    counts[i] = counts[i] + tonumber(ARGV[3 * i])
    redis.call('SET', KEYS[i], string.format('%.0f', counts[i]), 'PX', ARGV[3 * i - 1])
  end
end
local reply = {fits}
for i = 1, n do
  reply[i + 1] = counts[i]
end
return remember(reply)
"
);

/// Gives each cost back, never below 0: the store's `refund`.
///
/// `KEYS`: the counters, then the call's record. `ARGV[1]`: the deadline
/// (wall-clock ms); then `ARGV[i+1]` the cost of counter `i`; last, the
/// record's lifetime in ms. Sets each existing counter to `max(count -
/// cost, 0)`, keeping its lifetime (`SET … KEEPTTL`); an absent counter
/// stays absent and reads 0. Returns the new counts (recorded),
/// `DEADLINE`, or an error reply (nothing written) when a counter holds
/// something else than a count.
pub const REFUND: &str = counter_script!(
    r"
for i = 1, n do
  if counts[i] > 0 then
    counts[i] = math.max(counts[i] - tonumber(ARGV[i + 1]), 0)
    redis.call('SET', KEYS[i], string.format('%.0f', counts[i]), 'KEEPTTL')
  end
end
return remember(counts)
"
);

/// Undoes an applied reservation: what a Redis Cluster store sends to
/// each slot that applied a reservation another slot refused.
///
/// `KEYS`, `ARGV` and the reply are [`REFUND`]'s, `KEYS[n+1]` being the
/// reservation's record. Only when that record says the reservation was
/// applied (or there is none: a reservation sent without one), deletes it
/// (so a retry of the reservation applies afresh) and gives each cost back, removing a counter brought back to 0: the
/// reservation may have created it, and a refused reservation creates no
/// counter (a racing caller's increment in between keeps it above 0, so it
/// stays, with its lifetime). Otherwise (never applied, or undone already)
/// changes nothing. Returns the counts after.
pub const GIVE_BACK: &str = write_script!(
    r"
local n = #KEYS
local record
local applied = true
if ARGV[#ARGV] ~= '0' then
  n = n - 1
  record = KEYS[n + 1]
  applied = string.sub(redis.call('GET', record) or '', 1, 2) == '1,'
end
",
    read_counts!(),
    r"
if applied then
  if record then
    redis.call('DEL', record)
  end
  for i = 1, n do
    if counts[i] > 0 then
      counts[i] = math.max(counts[i] - tonumber(ARGV[i + 1]), 0)
      if counts[i] == 0 then
        redis.call('DEL', KEYS[i])
      else
        redis.call('SET', KEYS[i], string.format('%.0f', counts[i]), 'KEEPTTL')
      end
    end
  end
end
return counts
"
);

/// Removes a counter: the store's `delete`.
///
/// `KEYS[1]`: the counter. `ARGV[1]`: the deadline (wall-clock ms).
/// Returns `DEL`'s reply (1 when it existed, else 0) or `DEADLINE`.
pub const DELETE: &str = write_script!(
    r"
return redis.call('DEL', KEYS[1])
"
);

/// Stores a webhook mark unless the key holds one: the store's `claim`.
///
/// `KEYS[1]`: the mark. `ARGV[1]`: the deadline (wall-clock ms), `ARGV[2]`
/// the caller's token, `ARGV[3]` the lease in ms. Sets the key to the
/// token for the lease (`SET … PX`) when it is absent. Returns 1 when the
/// key now holds the token (set now, or by an earlier attempt of the same
/// claim), 0 when it holds another value, or `DEADLINE`.
pub const CLAIM: &str = write_script!(
    r"
local held = redis.call('GET', KEYS[1])
if not held then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
if held == ARGV[2] then
  return 1
end
return 0
"
);

/// Marks a webhook delivery done: the store's `finish`.
///
/// `KEYS[1]`: the mark. `ARGV[1]`: the deadline (wall-clock ms), `ARGV[2]`
/// the caller's token, `ARGV[3]` the lifetime in ms, `ARGV[4]` the done
/// value. When the key holds the token, nothing, or already the done value,
/// sets it to the done value for the lifetime (`SET … PX`) and returns 1;
/// returns 0 when another token holds it, or `DEADLINE`.
pub const FINISH: &str = write_script!(
    r"
local held = redis.call('GET', KEYS[1])
if held and held ~= ARGV[2] and held ~= ARGV[4] then
  return 0
end
redis.call('SET', KEYS[1], ARGV[4], 'PX', ARGV[3])
return 1
"
);

/// Gives a webhook mark up: the store's `release`.
///
/// `KEYS[1]`: the mark. `ARGV[1]`: the deadline (wall-clock ms), `ARGV[2]`
/// the caller's token. Deletes the key when it holds the token and returns
/// 1; returns 0 otherwise, or `DEADLINE`.
pub const RELEASE: &str = write_script!(
    r"
if redis.call('GET', KEYS[1]) == ARGV[2] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"
);

/// One script: its code, and its SHA-1 (lowercase hex, as Redis names
/// scripts), computed once.
#[derive(Debug)]
pub(crate) struct Script {
    pub(crate) code: &'static str,
    pub(crate) sha: String,
}

impl Script {
    fn new(code: &'static str) -> Script {
        Script {
            code,
            sha: sha1_smol::Sha1::from(code).digest().to_string(),
        }
    }
}

/// Every script a store sends.
#[derive(Debug)]
pub(crate) struct Scripts {
    pub(crate) count: Script,
    pub(crate) reserve: Script,
    pub(crate) refund: Script,
    pub(crate) give_back: Script,
    pub(crate) delete: Script,
    pub(crate) claim: Script,
    pub(crate) finish: Script,
    pub(crate) release: Script,
}

/// The scripts, hashed once per process.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    count: Script::new(COUNT),
    reserve: Script::new(RESERVE),
    refund: Script::new(REFUND),
    give_back: Script::new(GIVE_BACK),
    delete: Script::new(DELETE),
    claim: Script::new(CLAIM),
    finish: Script::new(FINISH),
    release: Script::new(RELEASE),
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_redis_script_names() {
        // `SCRIPT LOAD "return 1"` answers this sha on every Redis.
        assert_eq!(
            Script::new("return 1").sha,
            "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
        );
        assert_eq!(SCRIPTS.count.sha.len(), 40);
        assert_ne!(SCRIPTS.count.sha, SCRIPTS.reserve.sha);
    }
}
