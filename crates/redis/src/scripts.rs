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
//! Lua numbers are doubles. Counts, costs, maxes and floors are at most
//! 2^53 (the core's bounds; a shadow rule's max is 2^53; a floor is a time
//! in µs, about 1.8e15 now), so every count, cost, max and floor is exact
//! (and so is raising a count to its floor, `math.max`);
//! `count + cost` is exact up to 2^53 and, above it, rounds to a value that
//! is still above 2^53 (rounding is monotonic and 2^53 is a double), so
//! `math.min(count + cost, 2^53)` saturates exactly and `count + cost <= max`
//! is decided exactly. Numbers written back as text go through
//! `string.format('%.0f')`, exact for every integer up to 2^53 (Lua's own
//! `tostring` keeps only 14 digits), or, for records, `string.format('%d')`
//! where Lua's C `long` holds 2^53 (it is 32 bits on some platforms), and
//! come back as integer replies, exact up to 2^53.

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
/// `KEYS`: per call, in call order, its counters, in order, then the keys
/// of its priors that the script reads (`~part/whole` below), in counter
/// order; then the `m` hashes of records the calls use. `ARGV`: `m`; then
/// per hash how long it is kept from its first write (ms), how many calls
/// it records and their ids (their fields in it), in call order; then per
/// call its head `<op><n>.<hash>` (`op` below, `n` its counters, `hash`
/// its hash, `1..=m`, or `0`: no record and no id), its cutoff (wall-clock
/// ms), and one argument per counter:
///
/// | `op` | what | per counter |
/// |---|---|---|
/// | `c` | count: raises each count to its floor, adds the cost, saturating at 2^53 | `lifetime:cost[@floor][~prior]` |
/// | `r` | reserve: adds every cost if each count, raised to its floor, stays within its max (less its prior's weighed count), else none | `lifetime:cost:max[@floor][~prior]` |
/// | `f` | refund: gives each cost back, never below 0 nor the floor, keeping the lifetime; an absent counter stays absent | `cost[@floor]` |
/// | `g` | give back an applied reservation (Redis Cluster, for a slot that applied a reservation another slot refused) | `cost[@floor]` |
///
/// (lifetimes in ms, every number in decimal digits). `@floor` (1 to 2^53,
/// no leading zero) gives a counter a floor (`Counter::floor`,
/// tollgate-core): the least count it is taken to hold, e.g.
/// `60000:3:3000000@1781524989000000`; without it the floor is 0.
///
/// `~prior` gives a count's or reservation's counter a prior
/// (`Counter::prior`, tollgate-core): `~part/whole` (`whole` 1 to
/// 31622400, `Window::MAX_SECS`; `part` 0 to `whole`; no leading zeros),
/// whose key is the call's next key after its counters' (the first
/// counter with such a prior takes the first, and so on), or
/// `~part/whole=count` (`count` 0 to 2^53, no leading zero), a prior whose
/// count was read beforehand (Redis Cluster, for a prior in another hash
/// slot), with no key. E.g. `60000:1:100~17/60` and
/// `60000:1:100@1781524989000000~17/60=42`. The script reads each keyed
/// prior's count (`GET`; 0 when absent; never written, its lifetime left
/// alone) before it writes anything, and checks a reservation's counter
/// against its max less `floor(count × part / whole)` (exact; never below
/// 0). A prior that holds something other than a count is answered as a
/// counter that does, and a prior on a refund or give-back is a malformed
/// call.
///
/// `#id` (32 hex digits; after `lifetime:1`, `lifetime:1:max` or `1`,
/// with neither floor nor prior) makes a counter a set of leases
/// (`Counter::lease`): a sorted set of lease ids, each scored by when it
/// ends (ms on the server's clock). Every op removes the set's expired
/// leases (`ZREMRANGEBYSCORE` up to now, after every other counter of the
/// call is read) and counts the rest (`ZCARD`); a count, or a reservation
/// that fits (held + 1 within the max), adds the lease `id` ending
/// `lifetime` from now (`ZADD NX`: a lease held already stays as it is,
/// and a set holding the call's lease already fits it: a retry applied
/// without its record, as Cluster sends one while a slot migrates)
/// and gives the set a lifetime to its last lease's end (`PEXPIREAT`); a
/// refund leaves the set as it is; a give-back of an applied reservation
/// removes the lease (`ZREM`). A count's and a reservation's reply ends,
/// after its priors' counts, with two numbers per lease counter, in
/// counter order: the ms until its first lease ends (0: none), and how
/// many expired leases the call removed.
///
/// A batch repeats few heads and counter arguments (a rule's counters
/// share one), and the script converts each distinct one once: text to
/// number conversions (`strtod`, twice per `tonumber`) were a fifth of a
/// check's work.
///
/// Returns one reply per call, in order: the counts after it (`c`, `f`,
/// `g`), or `{applied, count...}` (`r`: 1 and the new counts, or 0 and
/// the current ones), a count's and a reservation's followed by the count
/// of each counter's prior, in counter order (one per counter with a
/// prior, given or read), then two numbers per lease counter (above);
/// `DEADLINE`; or an error reply when a counter or a prior holds
/// something other than a count, or a set of leases something other than
/// a sorted set (nothing written for that call but the removal of expired
/// leases). When any call or hash is not well formed, the script applies
/// nothing and answers the error reply `ERR tollgate: a malformed call`.
///
/// **Records.** The script reads each hash once (`HMGET` of its ids). A
/// call (`c`, `r`, `f`) whose id is there is answered the recorded reply
/// and applies nothing, even past its deadline: a retry of an applied
/// call. Otherwise its reply is recorded (its numbers in decimal, comma
/// separated, its priors' counts included, so that a retry answers the
/// priors the call read even after they changed): one `HSET` per hash of
/// every reply applied. Each `HSET`
/// also sets the field `""` to 65 bytes: when every field is new, `""`
/// included, the hash is, and it gets how long it is kept (`PEXPIRE`, once per hash rather
/// than once per script call; the store sends a time that outlasts every
/// write to the hash by a record's lifetime). And 65 bytes are more than a
/// compact hash's values may hold (Redis's `hash-max-listpack-value`, 64
/// by default), so Redis keeps the hash as a hash table from its first
/// write: as a listpack (up to 512 fields) every `HMGET` and `HSET` scans
/// it, which was a sixth of a check's work.
///
/// `g` reads its record the other way: only when it says the reservation
/// was applied (or there is none: a reservation sent without one), it
/// deletes it (`HDEL`, so a retry of the reservation applies afresh) and
/// gives each cost back, removing a counter brought back to its floor or
/// below (0 for a counter without one): the reservation may have created
/// it, and a refused reservation creates no counter (a floored counter
/// that held its floor or less was raised to the floor, where it counts as
/// absent does). A racing caller's increment in between keeps it above,
/// so it stays, with its lifetime. Otherwise (never applied, or undone
/// already) it changes nothing. It answers the counts after and is not
/// recorded. (A racing caller whose own floor passed the reserved count in
/// between has the cost given back too: an under-count of at most the
/// cost, when the callers' clocks, which the floors are, differ by more
/// than the cost, or the give-back comes that late.)
///
/// **Lifetimes.** `c` and `r` give a counter without a floor its lifetime
/// when they create it (`PEXPIRE` when `INCRBY` answers the call's own
/// cost: the counter was absent, or 0) and leave an existing counter's
/// lifetime alone: a counter lives its window's full length from its first
/// count, so from before its window ends until at most two windows after
/// the window began. A counter with a floor holds a time in µs (a GCRA
/// limit's theoretical arrival time), pushed forward by each call: every
/// time `c` and `r` write it, they give it its lifetime past that time
/// from now (`SET … PX`: the lifetime and `count - floor` µs, rounded up to
/// whole ms; `Counter::lifetime_at`, tollgate-core).
///
/// **Work.** On the common path a count or reservation is one `INCRBY` per
/// counter (`PEXPIRE` too when it creates it) and a field of its hash of
/// records; the script reads `TIME` once. `INCRBY` refuses text and
/// other types by itself; its reply tells what else is wrong: below the
/// cost (the count was negative), at or above 2^53 (exactness), above a
/// reservation's max. Then the call takes its increments back (`DECRBY`,
/// and `DEL` of a counter brought back to 0) and runs the exact slow path,
/// the one a call with a floored counter takes at once: `GET` and validate
/// every counter as text, decide, and `SET` each (a new one with its
/// lifetime, an existing one keeping its own; a floored one as below).
///
/// A count or reservation with a floored counter among its counters takes
/// an exact path from the start (its counters' arguments tell, as they are
/// validated; a call without one is not slowed): `GET` and validate every
/// counter, raise each to its floor, decide, and `SET` each: a floored
/// counter for its lifetime past the time it holds (`PX`), one without as
/// the fast path would leave it (`PX` when it held 0 or nothing, else
/// `KEEPTTL`). A refund of a floored counter that holds 0 looks whether it
/// exists (`EXISTS`): an absent one stays absent.
///
/// A reservation with lease counters and neither floor nor prior reads
/// its sets first (a full one refuses it before any other counter is
/// touched), then takes the common path for its other counters, then its
/// leases; a count with a lease counter takes the exact path, as one with
/// a floor.
///
/// A count or reservation with a prior first reads its keyed priors (one
/// `GET` each, validated as a counter is). A count then takes the common
/// path (a prior changes nothing it writes; the exact one with a floored
/// counter); a reservation takes the exact path, each counter checked
/// against its max less its prior's weighed count. The argument of a
/// counter without a prior or floor is read by the first pattern the
/// script tries, as before priors: a call without either pays nothing for
/// them.
pub const CHECK: &str = r"
local LIMIT = 9007199254740992
local MALFORMED = 'ERR tollgate: a malformed call'
local call, pcall, tonumber, format, match = redis.call, redis.pcall, tonumber, string.format, string.match
local clock = call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)

-- Each distinct head, cutoff and counter argument of this script call,
-- parsed once (false: malformed): a batch repeats few of them.
local heads, cutoffs, counters = {}, {}, {}

-- A call's head `<op><n>.<hash>`: its op's code, its counters, its hash.
local function head_of(arg)
  local head = heads[arg]
  if head == nil and arg then
    local code, n, hash = match(arg, '^([crfg])(%d+)%.(%d+)$')
    head = code and {code = code, n = tonumber(n), hash = tonumber(hash)} or false
    heads[arg] = head
  end
  return head
end

-- A counter's argument without its floor: `cost`, `lifetime:cost` or
-- `lifetime:cost:max` (`parts` 1 to 3), or false.
local function parse(arg)
  local a, b, c = match(arg, '^(%d+):(%d+):(%d+)$')
  if a then
    return {parts = 3, life = a, cost = tonumber(b), text = b, max = tonumber(c), floor = 0}
  end
  a, b = match(arg, '^(%d+):(%d+)$')
  if a then
    return {parts = 2, life = a, cost = tonumber(b), text = b, floor = 0}
  elseif match(arg, '^%d+$') then
    return {parts = 1, cost = tonumber(arg), text = arg, floor = 0}
  end
  return false
end

-- A counter's argument: as `parse` reads it, or followed by `@floor` (1 to
-- 2^53, no leading zero), by `~prior`, or by both in that order (`parts`
-- 10 more; `prior`: `{part, whole, count, keyed}`, below), or false. The
-- first pattern reads an argument without either: a call without floors
-- and priors pays nothing for them (nor does a script call: the helpers
-- below are made only for an argument that has either).
local function counter_of(arg)
  local counter = counters[arg]
  if counter == nil and arg then
    counter = parse(arg)
    local leased, id = match(arg, '^([%d:]+)#(%x+)$')
    if leased then
      -- A lease counter's: 32 hex digits of id, a cost of 1.
      counter = #id == 32 and parse(leased)
      if counter and counter.cost == 1 then
        counter.parts, counter.lease = counter.parts + 10, id
      else
        counter = false
      end
    elseif not counter then
      -- Whether digits without a leading zero are at most 2^53.
      local function within(digits)
        return #digits < 16 or (#digits == 16 and digits <= '9007199254740992')
      end
      -- A prior `part/whole[=count]` (whole 1 to 31622400, part 0 to
      -- whole, count 0 to 2^53, none with a leading zero): `count` nil and
      -- `keyed` 1 when its key is among the call's keys; or false.
      local function prior_of(text)
        local part, whole, rest = match(text, '^(%d+)/([1-9]%d*)(.*)$')
        if not part or #part > 8 or #whole > 8 or (#part > 1 and string.byte(part) == 48) then
          return false
        end
        local prior = {part = tonumber(part), whole = tonumber(whole), keyed = 1}
        if prior.whole > 31622400 or prior.part > prior.whole then
          return false
        elseif rest ~= '' then
          local count = match(rest, '^=(0)$') or match(rest, '^=([1-9]%d*)$')
          if not count or not within(count) then
            return false
          end
          prior.count, prior.keyed = tonumber(count), 0
        end
        return prior
      end
      local body, prior = match(arg, '^([^~]+)~(.*)$')
      if body then
        prior = prior_of(prior)
      else
        body = arg
      end
      local base, floor = match(body, '^(.+)@([1-9]%d*)$')
      if prior == false then
        counter = false
      elseif base then
        counter = within(floor) and parse(base)
        if counter then
          counter.floor = tonumber(floor)
        end
      else
        counter = prior and parse(body)
      end
      if counter then
        counter.parts, counter.prior = counter.parts + 10, prior
      else
        counter = false
      end
    end
    counters[arg] = counter
  end
  return counter
end

-- Removes the expired leases (ending at or before now) of the set at
-- `key`: how many it holds then and how many it lost, or nil and an error
-- reply.
local function sweep(key)
  local removed = pcall('ZREMRANGEBYSCORE', key, '-inf', format('%.0f', now))
  if type(removed) == 'table' then
    return nil, removed
  end
  return call('ZCARD', key), removed
end

-- Whether `counter` is a set of leases, at `key`, that holds the call's
-- lease already: the call's own retry, applied without its record (Redis
-- Cluster sends one so while a slot migrates), which it fits.
local function holds(key, counter)
  return counter.lease ~= nil and call('ZSCORE', key, counter.lease) ~= false
end

-- Reads counters k+1..k+n (with their arguments from ARGV[a + 1] when
-- `a` is given): their counts, then, when any is a lease counter, how many
-- expired leases were removed from each (`gone[i]`); or nil and an error
-- reply. A lease counter's set loses its expired leases (those ending at
-- or before now), after every other counter is read, and counts its
-- leases; unless `held[i]` gives its count already (swept by the caller).
local function read(k, n, a, held)
  local counts, gone = {}, nil
  for i = 1, n do
    if held and held[i] then
      counts[i] = held[i]
    elseif a and counters[ARGV[a + i]].lease then
      gone = gone or {}
      gone[i] = 0
    else
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
  end
  if gone then
    for i = 1, n do
      if gone[i] then
        local held, removed = sweep(KEYS[k + i])
        if not held then
          return nil, removed
        end
        gone[i], counts[i] = removed, held
      end
    end
  end
  return counts, gone
end

-- Gives the set of leases at `key` a lifetime to its last lease's end.
local function outlive(key)
  local last = call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    -- As digits, whatever form the server gives a score in.
    call('PEXPIREAT', key, format('%.0f', tonumber(last[2])))
  end
end

-- Adds the lease `counter.lease` to the set at `key`, which held `held`,
-- ending its lifetime from now (one held already stays as it is): the
-- leases held after.
local function take(key, counter, held)
  local ends = format('%.0f', now + tonumber(counter.life))
  if call('ZADD', key, 'NX', ends, counter.lease) == 0 then
    return held
  end
  outlive(key)
  return held + 1
end

-- Appends to `reply`, per lease counter of a call (its keys from k + 1,
-- arguments from ARGV[a + 1]; `gone` as `read` gives it), in order: the
-- ms until its first lease ends (0: none), and how many expired leases
-- the call removed from it.
local function lease_tail(reply, k, a, n, gone)
  for i = 1, n do
    if gone[i] then
      local first = call('ZRANGE', KEYS[k + i], 0, 0, 'WITHSCORES')
      reply[#reply + 1] = first[2] and tonumber(first[2]) - now or 0
      reply[#reply + 1] = gone[i]
    end
  end
end

-- Takes back the first m increments of a call (its counters' arguments
-- from ARGV[a + 1]; a lease counter has none).
local function undo(k, a, m)
  for i = 1, m do
    local counter = counters[ARGV[a + i]]
    if not counter.lease and call('DECRBY', KEYS[k + i], counter.text) == 0 then
      call('DEL', KEYS[k + i])
    end
  end
end

-- Sets counter k+i, which held `before`, to `count` on the exact path of
-- a count or reservation. One with a floor holds a time, in µs: it lives
-- its lifetime past that time, from now (its lifetime and `count - floor`
-- µs rounded up to whole ms). One without is left as the fast path leaves
-- it: its lifetime when it held 0 or nothing, else the one it has.
local function put(k, i, counter, before, count)
  local floor = counter.floor
  if floor > 0 then
    -- Exact: `ahead` and `q * 1000` are integers up to 2^53 (and even
    -- past it), and `r` is their difference, below 2000.
    local ahead = count - floor
    local q = math.floor(ahead / 1000)
    local r = ahead - q * 1000
    if r < 0 then
      q, r = q - 1, r + 1000
    elseif r >= 1000 then
      q, r = q + 1, r - 1000
    end
    if r > 0 then
      q = q + 1
    end
    call('SET', KEYS[k + i], format('%.0f', count), 'PX', format('%.0f', tonumber(counter.life) + q))
  elseif before == 0 then
    call('SET', KEYS[k + i], format('%.0f', count), 'PX', counter.life)
  else
    call('SET', KEYS[k + i], format('%.0f', count), 'KEEPTTL')
  end
end

-- A count on the exact path (a call with a floored counter, or one the
-- fast path took back): each count raised to its floor, plus the cost,
-- saturating at 2^53.
local function count_exact(k, a, n)
  local counts, gone = read(k, n, a)
  if not counts then
    return gone
  end
  for i = 1, n do
    local counter = counters[ARGV[a + i]]
    local before = counts[i]
    if counter.lease then
      counts[i] = take(KEYS[k + i], counter, before)
    else
      counts[i] = math.min(math.max(before, counter.floor) + counter.cost, LIMIT)
      put(k, i, counter, before, counts[i])
    end
  end
  return counts, gone
end

-- A reservation on the exact path (a call with a floored counter or a
-- prior, or one the fast path took back): every count raised to its floor
-- fits its cost within its max (less `weighed[i]`, its prior's weighed
-- count, never below 0), or none is written.
local function reserve_exact(k, a, n, weighed)
  local counts, gone = read(k, n, a)
  if not counts then
    return gone
  end
  local fits = 1
  for i = 1, n do
    local each = counters[ARGV[a + i]]
    local max = each.max
    if weighed and weighed[i] then
      max = math.max(max - weighed[i], 0)
    end
    -- Exact: differences of two integers up to 2^53. A set holding the
    -- call's lease already fits it (`holds`).
    if each.cost > max - math.max(counts[i], each.floor) and not holds(KEYS[k + i], each) then
      fits = 0
    end
  end
  local reply = {fits}
  for i = 1, n do
    if fits == 1 then
      local each = counters[ARGV[a + i]]
      local before = counts[i]
      if each.lease then
        counts[i] = take(KEYS[k + i], each, before)
      else
        counts[i] = math.max(before, each.floor) + each.cost
        put(k, i, each, before, counts[i])
      end
    end
    reply[i + 1] = counts[i]
  end
  return reply, gone
end

local function count(k, a, n)
  local counts = {}
  for i = 1, n do
    local counter = counters[ARGV[a + i]]
    local cost = counter.cost
    local new = pcall('INCRBY', KEYS[k + i], counter.text)
    if type(new) ~= 'number' or new < cost or new >= LIMIT then
      undo(k, a, type(new) == 'number' and i or i - 1)
      return count_exact(k, a, n)
    end
    if new == cost then
      call('PEXPIRE', KEYS[k + i], counter.life)
    end
    counts[i] = new
  end
  return counts
end

-- A reservation on the fast path: `INCRBY` each counter, taken back and
-- decided on the exact path when one does not fit (or holds something
-- else than a count). A lease counter is passed over (its place in the
-- reply 0): `reserve_leased` takes its lease. Returns the reply, and true
-- when the exact path decided it (and took any lease).
local function reserve(k, a, n)
  local reply = {1}
  for i = 1, n do
    local counter = counters[ARGV[a + i]]
    if counter.lease then
      reply[i + 1] = 0
    else
      local new = pcall('INCRBY', KEYS[k + i], counter.text)
      -- At 2^53 and above a double no longer tells 2^53 + 1 from 2^53: that
      -- case (a max of 2^53, a shadow rule's) goes to the exact path too.
      if type(new) ~= 'number' or new < counter.cost or new >= LIMIT or new > counter.max then
        undo(k, a, type(new) == 'number' and i or i - 1)
        return reserve_exact(k, a, n), true
      end
      -- Created now: a later counter's refusal takes it back with DEL.
      if new == counter.cost then
        call('PEXPIRE', KEYS[k + i], counter.life)
      end
      reply[i + 1] = new
    end
  end
  return reply
end

-- A reservation whose only special counters are sets of leases (no floor,
-- no prior): its sets first (swept and counted: a full one refuses the
-- call, its other counters read as they are), then its other counters on
-- the fast path, then its leases. Returns the reply and, per lease
-- counter, the expired leases removed (`read`'s `gone`).
local function reserve_leased(k, a, n)
  local held, gone, fits = {}, {}, true
  for i = 1, n do
    local counter = counters[ARGV[a + i]]
    if counter.lease then
      local count, removed = sweep(KEYS[k + i])
      if not count then
        return removed
      end
      held[i], gone[i] = count, removed
      fits = fits and (count + 1 <= counter.max or holds(KEYS[k + i], counter))
    end
  end
  if not fits then
    local counts, err = read(k, n, a, held)
    if not counts then
      return err
    end
    local reply = {0}
    for i = 1, n do
      reply[i + 1] = counts[i]
    end
    return reply, gone
  end
  local reply, exact = reserve(k, a, n)
  if not exact then
    for i = 1, n do
      if held[i] then
        reply[i + 1] = take(KEYS[k + i], counters[ARGV[a + i]], held[i])
      end
    end
  end
  return reply, gone
end

local function refund(k, a, n)
  local counts, err = read(k, n, a)
  if not counts then
    return err
  end
  for i = 1, n do
    local counter = counters[ARGV[a + i]]
    -- A lease counter stays as it is (its count: its leases). A floored
    -- counter holding 0 is raised to its floor; an absent one stays absent.
    if not counter.lease and (counts[i] > 0 or (counter.floor > 0 and call('EXISTS', KEYS[k + i]) == 1)) then
      counts[i] = math.max(counts[i] - counter.cost, counter.floor)
      call('SET', KEYS[k + i], format('%.0f', counts[i]), 'KEEPTTL')
    end
  end
  return counts
end

-- Gives back an applied reservation (`applied`: its record said so, or it
-- had none). A counter brought back to its floor or below (0 without
-- one) holds no more than the reservation found or made of it: removed.
local function give_back(k, a, n, applied)
  local counts, err = read(k, n, a)
  if not counts or not applied then
    return counts or err
  end
  for i = 1, n do
    local counter = counters[ARGV[a + i]]
    if counter.lease then
      -- The reservation's lease, removed.
      if call('ZREM', KEYS[k + i], counter.lease) == 1 then
        counts[i] = counts[i] - 1
        if counts[i] > 0 then
          outlive(KEYS[k + i])
        end
      end
    elseif counts[i] > 0 then
      counts[i] = counts[i] - counter.cost
      if counts[i] <= counter.floor then
        counts[i] = 0
        call('DEL', KEYS[k + i])
      else
        call('SET', KEYS[k + i], format('%.0f', counts[i]), 'KEEPTTL')
      end
    end
  end
  return counts
end

-- Each op: what runs it, how many parts its counters' arguments have, and
-- what runs a call of it with a floored counter, a prior or a lease
-- counter (`true`: `special`, below; the ops whose counters may have
-- priors).
local ops = {
  c = {count, 2, true},
  r = {reserve, 3, true},
  f = {refund, 1, refund},
  g = {give_back, 1, give_back},
}

local m = tonumber(ARGV[1])
if not m then
  return redis.error_reply(MALFORMED)
end
local hashes, last = #KEYS - m, #ARGV

-- Each hash: how long it is kept, its ids, the next of them and the
-- last, and its new fields.
local keep, next_id, stop, writes = {}, {}, {}, {}
local a = 2
for hash = 1, m do
  local ids = tonumber(ARGV[a + 1])
  if not ids or not match(ARGV[a], '^[1-9]%d*$') or a + 1 + ids > last then
    return redis.error_reply(MALFORMED)
  end
  keep[hash], next_id[hash], stop[hash], writes[hash] = ARGV[a], a + 2, a + 1 + ids, {}
  a = a + 2 + ids
end

-- Every call well formed before any is applied: its head, its cutoff, its
-- counters' keys and arguments, its priors' keys, its id. (Each distinct
-- head and argument is parsed once; a table read costs less than a
-- function call.) `specials[a]`: the call at ARGV[a] has a floored
-- counter, a prior or a lease counter, and this many keys of priors after
-- its counters' (nil: no call has any).
local first, k, used, specials = a, 0, {}, nil
while a <= last do
  local head, cutoff = heads[ARGV[a]], cutoffs[ARGV[a + 1]]
  if head == nil then
    head = head_of(ARGV[a])
  end
  if not cutoff and ARGV[a + 1] then
    cutoff = tonumber(ARGV[a + 1])
    cutoffs[ARGV[a + 1]] = cutoff
  end
  local op = head and ops[head.code]
  if not op or not cutoff or head.hash > m or k + head.n > hashes then
    return redis.error_reply(MALFORMED)
  end
  local keyed
  for i = 1, head.n do
    local arg = ARGV[a + 1 + i]
    local counter = counters[arg]
    if counter == nil then
      counter = counter_of(arg)
    end
    if not counter or counter.parts ~= op[2] then
      if not counter or counter.parts ~= op[2] + 10 or (counter.prior and op[3] ~= true) then
        return redis.error_reply(MALFORMED)
      end
      keyed = (keyed or 0) + (counter.prior and counter.prior.keyed or 0)
    end
  end
  if keyed then
    specials = specials or {}
    specials[a] = keyed
    k = k + keyed
  end
  if head.hash > 0 then
    used[head.hash] = (used[head.hash] or 0) + 1
  end
  k = k + head.n
  a = a + 2 + head.n
end
if k ~= hashes then
  return redis.error_reply(MALFORMED)
end
-- Each hash's ids, one per call that uses it.
for hash = 1, m do
  if (used[hash] or 0) ~= stop[hash] - next_id[hash] + 1 then
    return redis.error_reply(MALFORMED)
  end
end

-- A count or reservation (its op in its head, ARGV[a - 1]) with a floored
-- counter, a prior or a lease counter (`k`, `a`, `n` as for the other
-- ops). Its priors are read first (so that one holding something else
-- than a count writes nothing), from its keys after its counters' (0 when
-- absent), or given. A count then takes the fast path (a prior changes
-- nothing it writes), or the exact one with a floored or lease counter; a
-- reservation the exact path, each counter within its max less its
-- prior's weighed count. The reply, then the priors' counts in counter
-- order, then two numbers per lease counter (`lease_tail`). Made only when a call needs
-- it: a function is made (a closure, its upvalues found) every time the
-- script runs, which costs a call without floors and priors about 1,000
-- instructions (callgrind, 0.7% of a count's whole `EVALSHA`).
local special
if specials then
  special = function(k, a, n)
    -- `floor(held * part / whole)`, exact in doubles: with `held` up to
    -- 2^53 and `part <= whole <= 31622400` (< 2^25), `r = fmod(held,
    -- whole)` is exact (fmod always is); `held - r` is a multiple of
    -- `whole` up to 2^53 and so is its quotient `q` times `whole`: both
    -- exact, as is `q * part` (at most `held`); `x = r * part` is below
    -- `whole^2` < 2^50, and `floor(x / whole)` is `(x - fmod(x, whole)) /
    -- whole` alike. The sum is the true result, an integer up to 2^53.
    local function weigh(held, part, whole)
      local r = math.fmod(held, whole)
      local x = r * part
      return (held - r) / whole * part + (x - math.fmod(x, whole)) / whole
    end
    -- Whether the call has a prior, a floored counter, a lease counter.
    local keyed, priored, floored, leased = 0, false, false, false
    for i = 1, n do
      local counter = counters[ARGV[a + i]]
      if counter.prior then
        keyed, priored = keyed + counter.prior.keyed, true
      end
      floored = floored or counter.floor > 0
      leased = leased or counter.lease ~= nil
    end
    local values, err = read(k + n, keyed)
    if not values then
      return err
    end
    local found, weighed, j = {}, {}, 0
    for i = 1, n do
      local prior = counters[ARGV[a + i]].prior
      if prior then
        local held = prior.count
        if not held then
          j = j + 1
          held = values[j]
        end
        found[#found + 1] = held
        weighed[i] = weigh(held, prior.part, prior.whole)
      end
    end
    local reply, gone, at
    if heads[ARGV[a - 1]].code == 'r' and leased and not (priored or floored) then
      reply, gone = reserve_leased(k, a, n)
      at = n + 1
    elseif heads[ARGV[a - 1]].code == 'r' then
      reply, gone = reserve_exact(k, a, n, weighed)
      at = n + 1
    elseif floored or leased then
      reply, gone = count_exact(k, a, n)
      at = n
    else
      reply, at = count(k, a, n), n
    end
    if not reply.err then
      for i = 1, #found do
        reply[at + i] = found[i]
      end
      if gone then
        lease_tail(reply, k, a, n, gone)
      end
    end
    return reply
  end
end

-- Each hash's records, read with one HMGET: what each call recorded before.
local found = {}
for hash = 1, m do
  local seen, from, to = {}, next_id[hash], stop[hash]
  if to >= from then
    local values = pcall('HMGET', KEYS[hashes + hash], unpack(ARGV, from, to))
    for i = 1, to - from + 1 do
      if values.err then
        seen[ARGV[from + i - 1]] = values
      elseif values[i] then
        seen[ARGV[from + i - 1]] = values[i]
      end
    end
  end
  found[hash] = seen
end

-- A reply of `size` numbers as a record's text: `%d` where Lua's C long
-- holds 2^53 (one test per script call), else `%.0f`; both exact up to
-- 2^53, and `%d` costs a fraction of the float formatting of `..` and
-- `table.concat`. An empty reply is ''.
local one = format('%d', LIMIT) == '9007199254740992' and '%d' or '%.0f'
local texts = {}
local function text(reply)
  local size = #reply
  local form = texts[size]
  if not form then
    form = size > 0 and one .. string.rep(',' .. one, size - 1) or ''
    texts[size] = form
  end
  return format(form, unpack(reply))
end

-- Each call in turn.
local replies, r = {}, 0
a, k = first, 0
while a <= last do
  local head = heads[ARGV[a]]
  local run, n, hash, cutoff = ops[head.code][1], head.n, head.hash, cutoffs[ARGV[a + 1]]
  local keyed = specials and specials[a]
  if keyed then
    run = ops[head.code][3]
    if run == true then
      run = special
    end
  end
  local id
  if hash > 0 then
    id = ARGV[next_id[hash]]
    next_id[hash] = next_id[hash] + 1
  end
  local done = hash > 0 and found[hash][id]
  local reply
  if type(done) == 'table' then
    reply = done
  elseif run == give_back then
    if now > cutoff then
      reply = redis.status_reply('DEADLINE')
    else
      local applied = hash == 0 or (done and string.sub(done, 1, 2) == '1,')
      reply = give_back(k, a + 1, n, applied)
      if applied and hash > 0 and not reply.err then
        call('HDEL', KEYS[hashes + hash], id)
      end
    end
  elseif done then
    -- The recorded reply.
    reply = {}
    for digits in string.gmatch(done, '%d+') do
      reply[#reply + 1] = tonumber(digits)
    end
  elseif now > cutoff then
    reply = redis.status_reply('DEADLINE')
  else
    reply = run(k, a + 1, n)
    if hash > 0 and not reply.err then
      local list, written = writes[hash], text(reply)
      list[#list + 1] = id
      list[#list + 1] = written
      -- A second call of the same id in this script is its replay.
      found[hash][id] = written
    end
  end
  r = r + 1
  replies[r] = reply
  k = k + n + (keyed or 0)
  a = a + 2 + n
end

-- One HSET per hash, with the field '' last: every field is new only when
-- the hash is, and then the hash gets its lifetime.
for hash = 1, m do
  local list = writes[hash]
  if #list > 0 then
    list[#list + 1] = ''
    list[#list + 1] = string.rep('-', 65)
    if call('HSET', KEYS[hashes + hash], unpack(list)) * 2 == #list then
      call('PEXPIRE', KEYS[hashes + hash], keep[hash])
    end
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

/// What every lease script but [`LEASES`] starts with, after its deadline
/// check: `now` (ms on the server's clock), `outlive(key)` (gives a set
/// the lifetime to its last lease's end), and the removal of `KEYS[1]`'s
/// expired leases.
macro_rules! lease_prelude {
    () => {
        r"
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local function outlive(key)
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if last[2] then
    redis.call('PEXPIREAT', key, string.format('%.0f', tonumber(last[2])))
  end
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', now))
"
    };
}

/// Ends a lease: the store's `end_lease`.
///
/// `KEYS[1]`: the set of leases (a sorted set, as [`CHECK`] keeps it).
/// `ARGV[1]`: the deadline (wall-clock ms), `ARGV[2]` the lease's id.
/// Removes the set's expired leases, then the lease, and gives what is left
/// the lifetime to its last lease's end. Returns 1 when the lease was held
/// (unexpired), else 0, or `DEADLINE`.
pub const END_LEASE: &str = write_script!(
    lease_prelude!(),
    r"
local ended = redis.call('ZREM', KEYS[1], ARGV[2])
if ended == 1 then
  outlive(KEYS[1])
end
return ended
"
);

/// Renews a lease: the store's `renew_lease`.
///
/// `KEYS[1]`: the set of leases. `ARGV[1]`: the deadline (wall-clock ms),
/// `ARGV[2]` the lease's id, `ARGV[3]` its new lifetime (ms). Removes the
/// set's expired leases; when the lease is still held, it now ends its
/// lifetime from now and the set lives to its last lease's end. Returns 1
/// when the lease was held, else 0 (an expired lease is not taken again),
/// or `DEADLINE`.
pub const RENEW_LEASE: &str = write_script!(
    lease_prelude!(),
    r"
if not redis.call('ZSCORE', KEYS[1], ARGV[2]) then
  return 0
end
local ends = string.format('%.0f', now + tonumber(ARGV[3]))
redis.call('ZADD', KEYS[1], 'XX', ends, ARGV[2])
outlive(KEYS[1])
return 1
"
);

/// The leases of a set: the store's `leases`. A read: it writes nothing
/// and has no deadline check.
///
/// `KEYS[1]`: the set of leases. `ARGV[1]`: the deadline (unused). Returns
/// `{held, first}`: how many leases end after now, and the ms until the
/// first of them ends (0: none).
pub const LEASES: &str = r"
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local after = '(' .. string.format('%.0f', now)
local held = redis.call('ZCOUNT', KEYS[1], after, '+inf')
local first = redis.call('ZRANGEBYSCORE', KEYS[1], after, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
return {held, first[2] and tonumber(first[2]) - now or 0}
";

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
    pub(crate) end_lease: Script,
    pub(crate) renew_lease: Script,
    pub(crate) leases: Script,
}

/// The scripts, hashed once per process.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    check: Script::new(CHECK),
    delete: Script::new(DELETE),
    claim: Script::new(CLAIM),
    finish: Script::new(FINISH),
    release: Script::new(RELEASE),
    end_lease: Script::new(END_LEASE),
    renew_lease: Script::new(RENEW_LEASE),
    leases: Script::new(LEASES),
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
