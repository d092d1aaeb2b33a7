"""The Redis side of ``hasten.limits.ledger``: the same arithmetic as Lua, atomic per key.

Each script runs as one atomic step in Redis, so replicas never race between reading a
count and adding to it. The step order, the comparisons and the float arithmetic copy
``ledger.admit``/``settle``/``renew`` line for line (Lua numbers are the same IEEE doubles
as Python floats); numbers cross the wire as ``%.17g`` strings so none is rounded.
``tests/limits/test_scripts.py`` runs both on the same random sequences and compares.

A negative ``now_ms`` means "Redis's own clock" (``TIME``): in production every replica
then reads one clock, and skew between the replicas' hosts cannot loosen a limit.
A limit of -1 is "no such limit": its key is never touched.
"""

from __future__ import annotations

_PRELUDE = """
local function num(x) return string.format('%.17g', x) end
local window = 60000.0
local now = tonumber(ARGV[1])
if now < 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
end
"""

# KEYS: requests (zset id -> time), tokens (tat), slots (zset id -> expiry), budget (hash),
#       reserved (hash id -> "<expiry> <usd>": the budget the requests in progress reserved)
# ARGV: now_ms, request id, rpm, tpm, num_tokens, max_concurrent, slot_lease_ms,
#       budget_usd, budget_period_ms, reserve_usd
ADMIT = (
    _PRELUDE
    + """
local id = ARGV[2]
local rpm = tonumber(ARGV[3])
local tpm = tonumber(ARGV[4])
local cost = tonumber(ARGV[5])
local max_conc = tonumber(ARGV[6])
local lease = tonumber(ARGV[7])
local budget = tonumber(ARGV[8])
local period_ms = tonumber(ARGV[9])
local reserve = tonumber(ARGV[10])
local denied_by = false
local retry = 0
local function deny(what, after)
  if not denied_by then denied_by = what end
  if after > retry then retry = after end
end
local count = 0
if rpm >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', num(now - window))
  count = redis.call('ZCARD', KEYS[1])
end
local slots = 0
if max_conc >= 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', num(now))
  slots = redis.call('ZCARD', KEYS[3])
end
if budget >= 0 then
  local period = math.floor(now / period_ms)
  local stored = redis.call('HMGET', KEYS[4], 'period', 'usd')
  local spent = 0
  if stored[1] and tonumber(stored[1]) == period then spent = tonumber(stored[2]) end
  if spent >= budget then
    deny('budget', (period + 1) * period_ms - now)
  else
    -- In request id order, as the model sums them: the same floats, the same total.
    local all = redis.call('HGETALL', KEYS[5])
    local ids, amounts = {}, {}
    for i = 1, #all, 2 do
      local expiry, usd = string.match(all[i + 1], '^(%S+) (%S+)$')
      if tonumber(expiry) <= now then
        redis.call('HDEL', KEYS[5], all[i])
      else
        table.insert(ids, all[i])
        amounts[all[i]] = tonumber(usd)
      end
    end
    table.sort(ids)
    local reserved = 0
    for _, held in ipairs(ids) do reserved = reserved + amounts[held] end
    if spent + reserved >= budget then deny('budget_reserved', 1000.0) end
  end
end
if rpm >= 0 and count >= rpm then
  local after = window
  if count > 0 then
    local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
    after = tonumber(oldest[2]) + window - now
  end
  deny('requests', after)
end
local tat = now
local new_tat = now
if tpm >= 0 then
  local stored = tonumber(redis.call('GET', KEYS[2]) or '0')
  if stored > now then tat = stored end
  new_tat = tat
  if tpm <= 0 or cost > tpm then
    deny('tokens_too_large', 0)
  else
    new_tat = tat + cost * (window / tpm)
    if new_tat - now > window then deny('tokens', new_tat - window - now) end
  end
end
if max_conc >= 0 and slots >= max_conc then deny('concurrency', 1000.0) end
if not denied_by then
  if rpm >= 0 then
    redis.call('ZADD', KEYS[1], num(now), id)
    redis.call('PEXPIRE', KEYS[1], math.ceil(2 * window))
    count = count + 1
  end
  if tpm >= 0 then
    redis.call('SET', KEYS[2], num(new_tat), 'PX', math.ceil(new_tat - now + window))
    tat = new_tat
  end
  if max_conc >= 0 then
    redis.call('ZADD', KEYS[3], num(now + lease), id)
    redis.call('PEXPIRE', KEYS[3], math.ceil(lease + window))
  end
  if budget >= 0 and reserve > 0 then
    redis.call('HSET', KEYS[5], id, num(now + lease) .. ' ' .. num(reserve))
    redis.call('PEXPIRE', KEYS[5], math.ceil(lease + window))
  end
end
local req_reset = 0
local req_remaining = 0
if rpm >= 0 then
  req_remaining = math.max(rpm - count, 0)
  if count > 0 then
    local newest = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
    req_reset = tonumber(newest[2]) + window - now
  end
end
local tok_reset = math.max(tat - now, 0)
local tok_remaining = 0
if tpm > 0 then
  tok_remaining = math.max(math.floor((window - tok_reset) / (window / tpm)), 0)
end
return {denied_by or '', num(retry), num(req_remaining), num(req_reset),
        num(tok_remaining), num(tok_reset)}
"""
)

# KEYS: tokens, slots, budget, reserved
# ARGV: now_ms, request id, tpm, token_delta, budget_usd, budget_period_ms, cost_usd
SETTLE = (
    _PRELUDE
    + """
local tpm = tonumber(ARGV[3])
local delta = tonumber(ARGV[4])
local budget = tonumber(ARGV[5])
local period_ms = tonumber(ARGV[6])
local cost = tonumber(ARGV[7])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[4], ARGV[2])
if tpm > 0 and delta ~= 0 then
  local stored = tonumber(redis.call('GET', KEYS[1]) or '0')
  local base = now
  if stored > now then base = stored end
  local tat = base + delta * (window / tpm)
  if tat < now then tat = now end
  if tat > now + window then tat = now + window end
  redis.call('SET', KEYS[1], num(tat), 'PX', math.ceil(tat - now + window))
end
if budget >= 0 and cost > 0 then
  local period = math.floor(now / period_ms)
  local stored = redis.call('HMGET', KEYS[3], 'period', 'usd')
  local spent = 0
  if stored[1] and tonumber(stored[1]) == period then spent = tonumber(stored[2]) end
  spent = spent + cost
  redis.call('HSET', KEYS[3], 'period', num(period), 'usd', num(spent))
  redis.call('PEXPIRE', KEYS[3], math.ceil((period + 1) * period_ms - now + window))
end
return 1
"""
)

# KEYS: per held request its key's slots zset and reserved hash; ARGV: now_ms,
# slot_lease_ms, then one id per held request
RENEW = (
    _PRELUDE
    + """
local lease = tonumber(ARGV[2])
for i = 1, #KEYS, 2 do
  local id = ARGV[(i + 1) / 2 + 2]
  redis.call('ZADD', KEYS[i], 'XX', num(now + lease), id)
  redis.call('PEXPIRE', KEYS[i], math.ceil(lease + window))
  local held = redis.call('HGET', KEYS[i + 1], id)
  if held then
    local _, usd = string.match(held, '^(%S+) (%S+)$')
    redis.call('HSET', KEYS[i + 1], id, num(now + lease) .. ' ' .. usd)
    redis.call('PEXPIRE', KEYS[i + 1], math.ceil(lease + window))
  end
end
return #KEYS / 2
"""
)

# KEYS: requests (zset id -> time); ARGV: now_ms, request id, ago_ms. A pre-admitted
# request (hasten.limits.tickets) counted from when it was used (ago_ms before now), not
# from when it was granted.
REDATE = (
    _PRELUDE
    + """
return redis.call('ZADD', KEYS[1], 'XX', 'CH', num(now - tonumber(ARGV[3])), ARGV[2])
"""
)

# KEYS: requests (zset); ARGV: the members of pre-admitted requests that never ran.
FORGET = """
return redis.call('ZREM', KEYS[1], unpack(ARGV))
"""
