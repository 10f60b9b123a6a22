package redisstore

// luaSource is the decision script. KEYS[1] is the key's state (one hash
// tag, so one slot); KEYS[2], given only with a hybrid flush's batch, is
// the batch's deduplication key (same hash tag). ARGV:
//
//	1 n         units asked for (a flush: units to add)
//	2 limit     the key's limit for this call (Config.Limit, or KeyLimit's)
//	3 w         the sub-window width, µs
//	4 span      N for the sliding algorithms, 0 for FixedWindow
//	5 weighted  1 or 0
//	6 ttl       ms
//	7 force     1: a hybrid flush, add n without the check; absent or 0:
//	            decide
//	8 reserve   units the caller admitted locally and has not recorded yet:
//	            the check counts them as present in the current sub-window,
//	            and they are not added (a hybrid limiter's exact decision);
//	            absent: 0
//	9 seq       with KEYS[2]: the batch's sequence number. A batch whose
//	            seq is at most the one KEYS[2] holds was applied already (a
//	            resend, or a client retry): it adds nothing, and the reply
//	            is the estimate, as for a pull. KEYS[2] expires 2 × ttl after
//	            the replica's last batch on the key.
//
// A plain decision sends the first six only: each argument costs the
// server time.
//
// The state is one string, read with one GET and written whole with one
// SET … PX ttl: span+3 little-endian IEEE doubles, every one an integer
// below 2^53, so exact. With c_x the count of epoch x and l the newest
// epoch the key has seen, the layout is
//
//	l, mid, c_(l−span), c_(l−span+1), …, c_l
//
// where mid = c_(l−span+1) + … + c_(l−1) (FixedWindow, span 0: mid = 0 and
// the ring is c_l alone). A decision reads l, mid, the oldest count and
// the newest (three struct.unpack calls on fixed offsets, whatever N is),
// and updates mid when the ring moves. An admission writes the state back
// with string operations on the bytes read: in l's sub-window (the common
// case) only the last eight bytes change; when the ring moves by d ≤ span
// sub-windows, the new state is the new header, the bytes of c_(l−span+d) …
// c_l, d−1 zeros and n; when it moves by more, the header, zeros and n.
// Only a denial reads more of the ring, for RetryAfter. A value of any
// other length (another client's value at our key) is answered with a
// WRONGTYPE error and left alone. A decision is thus TIME, GET and, when
// it admits, SET: three redis.calls.
//
// The script is written for the server's time per call (issue 12's target
// is redis_rate's): no closure is created on the path that admits, its cost
// does not grow with N, and the helpers needed only to deny (RetryAfter)
// are defined only then.
//
// Time is Redis TIME, in µs: below 2^53 until the year 2255, so every
// quantity is an exact integer in Lua's doubles under the bounds New
// enforces (see checkBounds). Per key, time never runs backwards: a TIME
// before the start of the key's newest sub-window l (the Redis host's
// clock stepped back, or a replica promoted with a clock behind the old
// primary's) is taken as that start, as the engine takes a time older
// than a key's newest. The decision then counts into l, and a denial's
// RetryAfter adds the lag (l's start − TIME), so that it stays a true
// bound: the state says nothing can fit before TIME reaches l's start.
// This needs no field of its own: l is in the state already, so the
// encoding is unchanged and old and new replicas share keys.
//
// Replies {allowed, remaining, retryAfterNs (−1 = Never), t}: t is the
// time the script decided at, Redis TIME in µs: the hybrid mode's
// observation time, and for tests and debugging.
const luaSource = `
if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end -- Redis 7 has only effects replication
local floor = math.floor
local key = KEYS[1]
local n = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local w = tonumber(ARGV[3])
local span = tonumber(ARGV[4])
local weighted = ARGV[5] == '1'
local force = ARGV[7] == '1'
local reserve = 0
if ARGV[8] then reserve = tonumber(ARGV[8]) end
if force and n >= 1 and KEYS[2] then
  local last = tonumber(redis.call('GET', KEYS[2]) or '0')
  if tonumber(ARGV[9]) <= last then n = 0 end -- applied already: answer as a pull
end
local need = n + reserve

local tm = redis.call('TIME')
local t = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
local e0 = floor(t / w) -- exact: corrected below
while e0 * w > t do e0 = e0 - 1 end
while (e0 + 1) * w <= t do e0 = e0 + 1 end
local off = t - e0 * w

-- The state: l and mid, then the ring c_(l-span) .. c_l, so that c_(l-span+k)
-- is at byte 17 + 8k. d is how far e is past l: 0 in l's sub-window (or
-- clamped to it), 1 … span when part of the ring moves out, and more than
-- span (or a new key) when all of it does.
local raw = redis.call('GET', key)
local e, l, cur, mid, o0 = e0, -1, 0, 0, 0
local lag = 0 -- µs: TIME behind the start of the key's newest sub-window (a backward clock step)
local cur0 = 0 -- c_l as stored
local d = span + 1
if raw then
  if #raw ~= 8 * (span + 3) then
    return redis.error_reply('WRONGTYPE ringlimit: the value at ' .. key .. ' is not this limiter geometry state')
  end
  l, mid, o0 = struct.unpack('<ddd', raw)
  cur = struct.unpack('<d', raw, 8 * span + 17)
  cur0 = cur
  if span == 0 then o0 = 0 end -- the ring's one count is cur
  if e0 <= l then
    d = 0
    if e0 < l then e, off, lag = l, 0, l * w - t end -- time never runs backwards per key
  elseif e0 - l <= span then
    -- c'_k = c_(k+d): old' = c_d, mid' = c_(d+1) + … + c_span (c_span = cur)
    d = e0 - l
    local gone = 0 -- c_1 + … + c_d
    if d == 1 then
      gone = struct.unpack('<d', raw, 25)
    else
      local x = {struct.unpack(string.rep('d', d), raw, 25)}
      for k = 1, d do gone = gone + x[k] end
    end
    o0 = struct.unpack('<d', raw, 17 + 8 * d)
    mid, cur = mid + cur - gone, 0
  end
end
if d > span then cur, mid, o0 = 0, 0, 0 end
local full, old = mid + o0, 0
if weighted then full, old = mid, o0 end

-- fits: cur + full + need + the weighted part of old ≤ limit, exactly;
-- the weighted part is old·(w−off)/w, compared as old·(w−off) ≤ room·w.
local room = limit - cur - full - need
local fits = room >= 0 and (old <= room or (weighted and old * (w - off) <= room * w))

-- used: the units the estimate counts, before this request; the weighted
-- part of the oldest sub-window is rounded up, so that Remaining never
-- promises a unit that would be refused.
local used = cur + full + old
if weighted and old > 0 and off > 0 then
  local x = old * (w - off)
  local q = floor(x / w)
  while q * w > x do q = q - 1 end
  while (q + 1) * w <= x do q = q + 1 end
  if q * w ~= x then q = q + 1 end
  used = cur + full + q
end

if n >= 1 and (force or (n <= limit and fits)) then
  local state
  if d == 0 then -- only c_l changes
    state = string.sub(raw, 1, 8 * span + 16) .. struct.pack('<d', cur + n)
  elseif d <= span then -- the ring moves by d: c_d .. c_l, d-1 zeros, n
    state = struct.pack('<dd', e, mid) .. string.sub(raw, 17 + 8 * d) .. string.rep('\0', 8 * (d - 1)) .. struct.pack('<d', n)
  else
    state = struct.pack('<dd', e, 0) .. string.rep('\0', 8 * span) .. struct.pack('<d', n)
  end
  redis.call('SET', key, state, 'PX', ARGV[6])
  if force and KEYS[2] then redis.call('SET', KEYS[2], ARGV[9], 'PX', 2 * tonumber(ARGV[6])) end
  used = used + n
  if used >= limit then return {1, 0, 0, t} end
  return {1, limit - used, 0, t}
end
local rem = 0
if used < limit then rem = limit - used end
if n == 0 then return {1, rem, 0, t} end
if n < 0 or n > limit then return {0, rem, -1, t} end

-- A denial: the least wait after which need fits, as the engine computes
-- it (RetryAfter), or -1 for Never.
local function idiv(x, y)
  local q = floor(x / y)
  while q * y > x do q = q - 1 end
  while (q + 1) * y <= x do q = q + 1 end
  return q
end
local wn = w * 1000   -- ns
local offn = off * 1000
local function c(k) -- the count of epoch e-span+k: c_(l-span+k+d) in raw
  if k == span then return cur end
  local j = k + d
  if j > span then return 0 end
  if j == span then return cur0 end
  return struct.unpack('<d', raw, 17 + 8 * j)
end
local function retryAfter()
  local fl, o = cur + full, old
  local x = 0 -- index into c of the epoch leaving next
  for j = 0, span + 1 do
    if j > 0 then
      if weighted then
        x = x + 1
        o = c(x)
        fl = fl - o
      else
        fl = fl - c(x)
        x = x + 1
      end
    end
    local rm = limit - fl - need
    if rm >= 0 then
      if o <= rm then
        if j > 0 then return j * wn - offn end
      else
        local rp = wn - idiv(rm * wn, o)
        if j == 0 and rp < offn then rp = offn end
        if rp < wn then return j * wn + rp - offn end
      end
    end
  end
  return -1
end
local ra = retryAfter()
if ra >= 0 then ra = ra + lag * 1000 end -- the wait for TIME to reach l's sub-window, then the computed one
return {0, rem, ra, t}
`
