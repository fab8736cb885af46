//! The Lua scripts of every store of this crate (over TCP, Cluster and
//! REST), each sent as one `EVALSHA`. Each is a documented `pub const` with
//! its `KEYS`/`ARGV` contract, so that a raw client can send exactly the
//! same work.
//!
//! Every write makes the same deadline check before it writes (a counter
//! call first looks up its record: answering a retry of a call already
//! applied writes nothing, so it needs no deadline): the script reads the
//! server's clock (`TIME`, once per script) and, when it is past the
//! call's cutoff (the caller's `Deadline::cutoff_unix_millis`
//! (tollgate-core), wall-clock milliseconds, skew margin included), the
//! call writes nothing and answers the status reply `DEADLINE`, which the
//! store reports as `StoreError::Timeout`. Redis 5 and later replicate
//! scripts by their effects, so a script may read `TIME` before it writes.
//!
//! A counter holds a count: `0` or digits without a leading zero, at most
//! 2^53 (`9007199254740992`). A counter call that finds anything else
//! (other text, a negative number, a number over 2^53, another type)
//! answers an error reply and leaves every counter as it was.
//!
//! Lua numbers are doubles. Counts, costs and maxes are at most 2^53 (the
//! core's bounds; a shadow rule's max is 2^53), so every count, cost and
//! max is exact;
//! `count + cost` is exact up to 2^53 and, above it, rounds to a value that
//! is still above 2^53 (rounding is monotonic and 2^53 is a double), so
//! `math.min(count + cost, 2^53)` saturates exactly and `count + cost <= max`
//! is decided exactly. Numbers written back as text go through
//! `string.format('%.0f')`, exact for every integer up to 2^53 (Lua's own
//! `tostring` keeps only 14 digits), and come back as integer replies,
//! exact up to 2^53.

use std::sync::LazyLock;

/// The deadline check of a one-key script: `DEADLINE`, nothing written,
/// once the server's clock is past `ARGV[1]`.
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

/// Every counter call — count, reserve, refund, give back — for any number
/// of calls at once: a batch of checks shares one script call, each call
/// with its own deadline, record and reply.
///
/// `KEYS`: each call's counters, in order, then the `m` hashes of records
/// the calls use. `ARGV`: `m`, then each hash's record lifetime in ms, then
/// per call `op`, `n` (its counters), its cutoff (wall-clock ms), its hash
/// (`1..=m`; `0`: no record), its id (its field in that hash), then per
/// counter:
///
/// | `op` | what | per counter |
/// |---|---|---|
/// | `c` | count: adds each cost, saturating at 2^53 | lifetime ms, cost |
/// | `r` | reserve: adds every cost if each count stays within its max, else none | lifetime ms, cost, max |
/// | `f` | refund: gives each cost back, never below 0, keeping the lifetime; an absent counter stays absent | cost |
/// | `g` | give back an applied reservation (Redis Cluster, for a slot that applied a reservation another slot refused) | cost |
///
/// Returns one reply per call, in order: the counts after it (`c`, `f`,
/// `g`), or `{applied, count...}` (`r`: 1 and the new counts, or 0 and
/// the current ones); `DEADLINE`; or an error reply when a counter holds
/// something other than a count (nothing written for that call).
///
/// **Records.** The script reads each hash once (`HMGET` of the ids of the
/// calls that use it). A call (`c`, `r`, `f`) whose id is there is
/// answered the recorded reply and applies nothing, even past its
/// deadline: a retry of an applied call. Otherwise its reply is recorded:
/// one `HSET` per hash of every reply applied, and `PEXPIRE` of twice the
/// hash's record lifetime.
///
/// `g` reads its record the other way: only when it says the reservation
/// was applied (or there is none: a reservation sent without one), it
/// deletes it (`HDEL`, so a retry of the reservation applies afresh) and
/// gives each cost back, removing a counter brought back to 0 (the
/// reservation may have created it, and a refused reservation creates no
/// counter; a racing caller's increment in between keeps it above 0, so it
/// stays, with its lifetime). Otherwise (never applied, or undone already)
/// it changes nothing. It answers the counts after and is not recorded.
///
/// **Lifetimes.** `c` and `r` give a counter its lifetime when they create
/// it (`PEXPIRE` when `INCRBY` answers the call's own cost: the counter was
/// absent, or 0) and leave an existing counter's lifetime alone: a counter
/// lives its window's full length from its first count, so from before its
/// window ends until at most two windows after the window began.
///
/// **Work.** On the common path a count or reservation is one `INCRBY` per
/// counter (`PEXPIRE` too when it creates it) and a field of its hash of
/// records; the script reads `TIME` once. `INCRBY` refuses text and
/// other types by itself; its reply tells what else is wrong: below the
/// cost (the count was negative), at or above 2^53 (exactness), above a
/// reservation's max. Then the call takes its increments back (`DECRBY`,
/// and `DEL` of a counter brought back to 0) and runs the exact slow path:
/// `GET` and validate every counter as text, decide, and `SET` each with
/// its lifetime.
pub const CHECK: &str = r"
local LIMIT = 9007199254740992
local call, pcall, tonumber = redis.call, redis.pcall, tonumber
local clock = call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- Reads counters k+1..k+n: their counts, or nil and an error reply.
local function read(k, n)
  local counts = {}
  for i = 1, n do
    local value = pcall('GET', KEYS[k + i])
    if type(value) == 'table' then
      return nil, value
    elseif not value or value == '0' then
      counts[i] = 0
    elseif #value > 16 or not string.find(value, '^[1-9]%d*$') then
      return nil, redis.error_reply('ERR counter is not an integer')
    else
      if #value == 16 then
        -- Compared in two exact parts: 15 digits, then the last one ('2' is 50).
        local head = tonumber(string.sub(value, 1, 15))
        if head > 900719925474099
            or (head == 900719925474099 and string.byte(value, 16) > 50) then
          return nil, redis.error_reply('ERR counter is over 2^53')
        end
      end
      counts[i] = tonumber(value)
    end
  end
  return counts
end

-- Takes back the first m increments of a call whose counters take `step`
-- arguments each, the cost second.
local function undo(k, a, step, m)
  for i = 1, m do
    if call('DECRBY', KEYS[k + i], ARGV[a + step * (i - 1) + 2]) == 0 then
      call('DEL', KEYS[k + i])
    end
  end
end

-- Sets counter k+i to `count` for `life` ms.
local function store(k, i, count, life)
  call('SET', KEYS[k + i], string.format('%.0f', count), 'PX', life)
end

local function count(k, a, n)
  local counts = {}
  for i = 1, n do
    local at = a + 2 * i
    local cost = tonumber(ARGV[at])
    local new = pcall('INCRBY', KEYS[k + i], ARGV[at])
    if type(new) ~= 'number' or new < cost or new >= LIMIT then
      undo(k, a, 2, type(new) == 'number' and i or i - 1)
      local err
      counts, err = read(k, n)
      if not counts then
        return err
      end
      for j = 1, n do
        counts[j] = math.min(counts[j] + tonumber(ARGV[a + 2 * j]), LIMIT)
        store(k, j, counts[j], ARGV[a + 2 * j - 1])
      end
      return counts
    end
    if new == cost then
      call('PEXPIRE', KEYS[k + i], ARGV[at - 1])
    end
    counts[i] = new
  end
  return counts
end

local function reserve(k, a, n)
  local reply = {1}
  for i = 1, n do
    local at = a + 3 * i - 1
    local cost = tonumber(ARGV[at])
    local new = pcall('INCRBY', KEYS[k + i], ARGV[at])
    -- At 2^53 and above a double no longer tells 2^53 + 1 from 2^53: that
    -- case (a max of 2^53, a shadow rule's) goes to the exact path too.
    if type(new) ~= 'number' or new < cost or new >= LIMIT or new > tonumber(ARGV[at + 1]) then
      undo(k, a, 3, type(new) == 'number' and i or i - 1)
      local counts, err = read(k, n)
      if not counts then
        return err
      end
      local fits = 1
      for j = 1, n do
        -- Exact: the difference of two integers up to 2^53.
        if tonumber(ARGV[a + 3 * j - 1]) > tonumber(ARGV[a + 3 * j]) - counts[j] then
          fits = 0
        end
      end
      reply = {fits}
      for j = 1, n do
        if fits == 1 then
          counts[j] = counts[j] + tonumber(ARGV[a + 3 * j - 1])
          store(k, j, counts[j], ARGV[a + 3 * j - 2])
        end
        reply[j + 1] = counts[j]
      end
      return reply
    end
    reply[i + 1] = new
  end
  for i = 1, n do
    if reply[i + 1] == tonumber(ARGV[a + 3 * i - 1]) then
      call('PEXPIRE', KEYS[k + i], ARGV[a + 3 * i - 2])
    end
  end
  return reply
end

local function refund(k, a, n)
  local counts, err = read(k, n)
  if not counts then
    return err
  end
  for i = 1, n do
    if counts[i] > 0 then
      counts[i] = math.max(counts[i] - tonumber(ARGV[a + i]), 0)
      call('SET', KEYS[k + i], string.format('%.0f', counts[i]), 'KEEPTTL')
    end
  end
  return counts
end

-- Gives back an applied reservation (`applied`: its record said so, or it
-- had none).
local function give_back(k, a, n, applied)
  local counts, err = read(k, n)
  if not counts or not applied then
    return counts or err
  end
  for i = 1, n do
    if counts[i] > 0 then
      counts[i] = math.max(counts[i] - tonumber(ARGV[a + i]), 0)
      if counts[i] == 0 then
        call('DEL', KEYS[k + i])
      else
        call('SET', KEYS[k + i], string.format('%.0f', counts[i]), 'KEEPTTL')
      end
    end
  end
  return counts
end

-- The recorded reply `done`.
local function replayed(done)
  local reply = {}
  for number in string.gmatch(done, '%d+') do
    reply[#reply + 1] = tonumber(number)
  end
  return reply
end

-- A reply (numbers) as a record's text. `table.concat` writes numbers
-- with 14 digits: exact below 10^14, else an exponent.
local function text(reply)
  local written = table.concat(reply, ',')
  if string.find(written, 'e', 1, true) then
    local parts = {}
    for i = 1, #reply do
      parts[i] = string.format('%.0f', reply[i])
    end
    written = table.concat(parts, ',')
  end
  return written
end

local ops = {c = {count, 2}, r = {reserve, 3}, f = {refund, 1}, g = {give_back, 1}}
local malformed = redis.error_reply('ERR tollgate: a malformed call')
local m = tonumber(ARGV[1])
if not m then
  return malformed
end
local hashes, last = #KEYS - m, #ARGV

-- Each hash's ids, read with one HMGET: what each call recorded before.
local ids, found = {}, {}
for hash = 1, m do
  ids[hash] = {}
end
local a = 1 + m
while a < last do
  local op, n, hash = ops[ARGV[a + 1]], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 4])
  if not op or not n or not hash or hash > m or not tonumber(ARGV[a + 3]) then
    return malformed
  end
  if hash > 0 then
    local list = ids[hash]
    list[#list + 1] = ARGV[a + 5]
  end
  a = a + 5 + op[2] * n
end
for hash = 1, m do
  local list, seen = ids[hash], {}
  local values = pcall('HMGET', KEYS[hashes + hash], unpack(list))
  for i = 1, #list do
    if values.err then
      seen[list[i]] = values
    elseif values[i] then
      seen[list[i]] = values[i]
    end
  end
  found[hash], ids[hash] = seen, {}
end

-- Each call, its reply, and each hash's new fields (reusing `ids`).
local replies, k = {}, 0
a = 1 + m
while a < last do
  local op, n, cutoff, hash, id = ops[ARGV[a + 1]], tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4]), ARGV[a + 5]
  local done = hash > 0 and found[hash][id]
  local reply
  if type(done) == 'table' then
    reply = done
  elseif op[1] == give_back then
    if now > cutoff then
      reply = redis.status_reply('DEADLINE')
    else
      local applied = hash == 0 or (done and string.sub(done, 1, 2) == '1,')
      reply = give_back(k, a + 5, n, applied)
      if applied and hash > 0 and not reply.err then
        call('HDEL', KEYS[hashes + hash], id)
      end
    end
  elseif done then
    reply = replayed(done)
  elseif now > cutoff then
    reply = redis.status_reply('DEADLINE')
  else
    reply = op[1](k, a + 5, n)
    if hash > 0 and not reply.err then
      local list, written = ids[hash], text(reply)
      list[#list + 1] = id
      list[#list + 1] = written
      -- A second call of the same id in this script is its replay.
      found[hash][id] = written
    end
  end
  replies[#replies + 1] = reply
  k = k + n
  a = a + 5 + op[2] * n
end

-- One HSET per hash, kept twice its lifetime after this write.
for hash = 1, m do
  local list = ids[hash]
  if #list > 0 then
    call('HSET', KEYS[hashes + hash], unpack(list))
    call('PEXPIRE', KEYS[hashes + hash], 2 * tonumber(ARGV[1 + hash]))
  end
end
return replies
";

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
    pub(crate) check: Script,
    pub(crate) delete: Script,
    pub(crate) claim: Script,
    pub(crate) finish: Script,
    pub(crate) release: Script,
}

/// The scripts, hashed once per process.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    check: Script::new(CHECK),
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
        assert_eq!(SCRIPTS.check.sha.len(), 40);
        assert_ne!(SCRIPTS.check.sha, SCRIPTS.delete.sha);
    }
}
