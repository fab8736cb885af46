//! The all-or-nothing increment, as one Lua script.

/// `KEYS`: the counters. `ARGV`: per counter, its lifetime in milliseconds
/// and its max. Reads every counter; if each is below its max, increments
/// them all and sets their lifetimes. Returns `{applied, count...}`: the new
/// counts when applied (1), the current ones when not (0).
///
/// Redis runs a script atomically, so no other command sees a partial batch;
/// every stored value is checked before the first `INCR`, so the script
/// never fails with some counters incremented.
/// Lua numbers are doubles: counts and maxes are exact up to 2^53.
pub const RESERVE: &str = r"
local n = #KEYS
local counts = {}
local fits = 1
for i = 1, n do
  local value = redis.call('GET', KEYS[i])
  local count = 0
  if value then
    -- Only what INCR accepts and a count can be (no sign, space, dot,
    -- exponent or leading zero): refused here, before any write, since a
    -- script that fails midway keeps the writes it made.
    if value ~= '0' and not string.find(value, '^[1-9]%d*$') then
      return redis.error_reply('ERR counter is not an integer')
    end
    count = tonumber(value)
  end
  counts[i] = count
  if count >= tonumber(ARGV[2 * i]) then
    fits = 0
  end
end
if fits == 1 then
  for i = 1, n do
    counts[i] = redis.call('INCR', KEYS[i])
    redis.call('PEXPIRE', KEYS[i], ARGV[2 * i - 1])
  end
end
local reply = {fits}
for i = 1, n do
  reply[i + 1] = counts[i]
end
return reply
";
