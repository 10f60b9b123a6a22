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
// The state is one string of 25 bytes: the byte 'g', then three
// little-endian doubles a, b, q': TAT = a + b/q' µs of Redis TIME, with
// 0 ≤ b < q'. A state written with another q' (the key's rate changed:
// KeyLimit, or a deploy) has its TAT rounded up to the next whole µs, a
// move that never grants a unit. A missing key is a full bucket: TAT =
// now. A value of another length or tag is answered WRONGTYPE and left
// alone.
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
// every path: TIME, GET, and SET when it admits.
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
  if #raw ~= 25 then
    return redis.error_reply('WRONGTYPE ringlimit: the value at ' .. key .. ' is not this limiter token bucket state')
  end
  local tag, sq
  tag, a, b, sq = struct.unpack('<Bddd', raw)
  if tag ~= 103 then -- 'g'
    return redis.error_reply('WRONGTYPE ringlimit: the value at ' .. key .. ' is not this limiter token bucket state')
  end
  if sq ~= q then -- another rate wrote it: round TAT up to whole µs
    if b > 0 then a = a + 1 end
    b = 0
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
    redis.call('SET', key, struct.pack('<Bddd', 103, na, nb - c * q, q), 'PX', floor((na - t) / 1000) + 1)
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
