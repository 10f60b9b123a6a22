package redisstore

import "github.com/redis/go-redis/v9"

// tbSource is the token bucket's decision script: GCRA on the key's
// theoretical arrival time (TAT), in integers exact in Lua's doubles.
// KEYS[1] is the key's state (one hash tag, so one slot). ARGV:
//
//	1 n      units asked for; 0 reads (admitted, nothing written)
//	2 p      the emission interval T = Window/Limit is p/q µs, in lowest
//	3 q      terms: a tick is 1/q µs and T is p ticks
//	4 depth  Burst × p: the bucket's depth in ticks
//
// Go checks, before any call, 0 ≤ n ≤ Burst and depth + p + 2q ≤ 2^53
// and depth < 2^50·q (the bucket fills in under 2^50 µs); then every
// integer the script computes stays below 2^53 and is exact
// (docs/design.md, "The token bucket on Redis").
//
// The state is one string of 33 bytes: the byte 'h', then four
// little-endian doubles a, b, q', p': TAT = a + b/q' µs of Redis TIME,
// with 0 ≤ b < q', written under the rate T' = p'/q' µs. A state written
// under another rate (the key's rate changed: KeyLimit, or a deploy)
// keeps the units it owes, rounded up: owed = ⌈(TAT − t)/T'⌉ (0 if
// TAT ≤ t), at most Burst, and TAT becomes t + owed·T exactly in the new
// ticks (written at once, so a denial keeps it too); the change never
// forgives a unit owed, except what a smaller new bucket cannot hold
// (design §11a). Under the same rate (a change of Burst alone) the state
// is kept as is. An older 25-byte 'g' state (no p') that is not full is
// read as an empty bucket, TAT = t + Burst·T. A missing key is a full
// bucket: TAT = now. A value of another length or tag is answered
// WRONGTYPE and left alone.
//
// With t = TIME (µs) and tat = max(TAT, t), written tat = t + d µs + b
// ticks (d = a − t ≥ 0 whole µs), n units fit iff
//
//	tat + n·T − t ≤ Burst·T  ⟺  d·q + b + n·p ≤ depth  ⟺  d ≤ ⌊(depth − b − n·p) / q⌋
//
// (and depth − b − n·p ≥ 0); the right side is computed without forming
// d·q, which a TAT far ahead of t (a backward clock step) could make
// inexact. An admission moves TAT by exactly n·p ticks: b + n·p, with its
// whole µs carried into a, so the rate never drifts. Time never runs
// backwards for a key: an older t than the TAT is simply further from it,
// and gains nothing. The key expires ⌊(TAT − t)/1000⌋ + 1 ms after an
// admission, when the bucket is full again (TAT ≤ TIME), so an expired
// key and a full one decide alike.
//
// Replies {allowed, remaining, wait_us, wait_ticks, t}: remaining is the
// whole units left (⌊room/p⌋, after an admission); a denial's least wait
// is wait_us µs + wait_ticks ticks (wait_ticks may be negative), which Go
// turns into nanoseconds, rounded up (tokenBucket.parse); t is the time
// the script decided at, Redis TIME in µs.
//
// Like luaSource, the script creates no closure and costs the same on
// every path: TIME, GET, and SET when it admits or re-ticks a state
// written under another rate.
const tbSource = `
if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end -- Redis 7 has only effects replication
local floor = math.floor
local key = KEYS[1]
local n = tonumber(ARGV[1])
local p = tonumber(ARGV[2])
local q = tonumber(ARGV[3])
local depth = tonumber(ARGV[4])

local tm = redis.call('TIME')
local t = tonumber(tm[1]) * 1000000 + tonumber(tm[2])

local a, b = t, 0 -- TAT = a + b/q µs; a missing key is a full bucket
local raw = redis.call('GET', key)
if raw then
  local tag = string.byte(raw, 1)
  local owed = -1 -- ≥ 0: the state was written under another rate; re-tick it
  if tag == 104 and #raw == 33 then -- 'h'
    local sq, sp
    tag, a, b, sq, sp = struct.unpack('<Bdddd', raw)
    if sq ~= q or sp ~= p then
      -- another rate wrote it: owed = ⌈(TAT − t)/T_old⌉ units (0 if TAT ≤ t),
      -- with TAT − t = e/sq µs, e = (a − t)·sq + b. When e ≥ 2^52 (only
      -- past a backward clock step) owed is taken as the whole bucket.
      owed = 0
      if a >= t then
        local d0 = a - t
        if d0 * sq < 4503599627370496 then
          local e = d0 * sq + b -- < 2^52 + sq ≤ 2^53
          local k = floor(e / sp)
          while k * sp > e do k = k - 1 end
          while (k + 1) * sp <= e do k = k + 1 end
          if k * sp < e then k = k + 1 end
          owed = k
        else
          owed = depth / p
        end
      end
    end
  elseif tag == 103 and #raw == 25 then -- 'g': an older state without p
    local sb
    tag, a, sb = struct.unpack('<Bdd', raw)
    owed = 0
    if a > t or (a == t and sb > 0) then owed = depth / p end -- not full: empty
  else
    return redis.error_reply('WRONGTYPE ringlimit: the value at ' .. key .. ' is not this limiter token bucket state')
  end
  if owed >= 0 then
    -- TAT' = t + owed·T_new, owed at most Burst (depth/p is exact): x ≤ depth
    if owed > depth / p then owed = depth / p end
    local x = owed * p
    local c = floor(x / q)
    while c * q > x do c = c - 1 end
    while (c + 1) * q <= x do c = c + 1 end
    a, b = t + c, x - c * q
    -- written now, so that a denial or a read keeps the units owed too
    redis.call('SET', key, struct.pack('<Bdddd', 104, a, b, q, p), 'PX', floor(c / 1000) + 1)
  end
  if a < t then a, b = t, 0 end -- tat = max(TAT, t): b < q, so TAT < t iff a < t
end
local d = a - t -- whole µs, ≥ 0

-- fits iff r = depth − b − n·p ≥ 0 and d ≤ ⌊r/q⌋. k = ⌊r/q⌋ exactly: the
-- double quotient is within one of it, and each product checked is at
-- most r + q < 2^53.
local r = depth - b - n * p
local fits = false
if r >= 0 then
  local k = floor(r / q)
  while k * q > r do k = k - 1 end
  while (k + 1) * q <= r do k = k + 1 end
  fits = d <= k
end

if fits then
  -- room = r − d·q ≥ 0 ticks left after the n units (d·q ≤ r: exact)
  local room = r - d * q
  local rem = floor(room / p)
  while rem * p > room do rem = rem - 1 end
  while (rem + 1) * p <= room do rem = rem + 1 end
  if n >= 1 then
    local nb = b + n * p -- < q + depth
    local c = floor(nb / q)
    while c * q > nb do c = c - 1 end
    while (c + 1) * q <= nb do c = c + 1 end
    local na = a + c
    redis.call('SET', key, struct.pack('<Bdddd', 104, na, nb - c * q, q, p), 'PX', floor((na - t) / 1000) + 1)
  end
  return {1, rem, 0, 0, t}
end
if n == 0 then return {1, 0, 0, 0, t} end -- a read of a bucket with less than one unit (d > ⌊depth/q⌋ too)

-- A denial: the units left now (n not counted), and the least wait,
-- tat + n·T − Burst·T − t = d µs + (b + n·p − depth) ticks.
local rem = 0
local r0 = depth - b
if r0 >= 0 then
  local k = floor(r0 / q)
  while k * q > r0 do k = k - 1 end
  while (k + 1) * q <= r0 do k = k + 1 end
  if d <= k then
    local room = r0 - d * q
    rem = floor(room / p)
    while rem * p > room do rem = rem - 1 end
    while (rem + 1) * p <= room do rem = rem + 1 end
  end
end
return {0, rem, d, b + n * p - depth, t}
`

var tbScript = redis.NewScript(tbSource)
