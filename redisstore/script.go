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
//	7 force     1: a hybrid flush, add n without the check; 0: decide
//	8 reserve   units the caller admitted locally and has not recorded yet:
//	            the check counts them as present in the current sub-window,
//	            and they are not added (a hybrid limiter's exact decision)
//	9 seq       with KEYS[2]: the batch's sequence number. A batch whose
//	            seq is at most the one KEYS[2] holds was applied already (a
//	            resend, or a client retry): it adds nothing, and the reply
//	            is the estimate, as for a pull. KEYS[2] expires 2 × ttl after
//	            the replica's last batch on the key.
//
// The state is one string, read with one GET and written whole with one
// SET … PX ttl: span+2 little-endian IEEE doubles (Lua's struct library,
// format "<d…d"), the newest epoch l the key has seen and then the counts
// of epochs l−span … l. Every value is an integer below 2^53, so a double
// holds it exactly. A value of any other length (another client's value
// at our key) is answered with a WRONGTYPE error and left alone. A
// decision is thus TIME, GET and, when it admits, SET: three redis.calls.
//
// Time is Redis TIME, in µs: below 2^53 until the year 2255, so every
// quantity is an exact integer in Lua's doubles under the bounds New
// enforces (see checkBounds).
//
// Replies {allowed, remaining, retryAfterNs (−1 = Never), sec, usec}: the
// last two are the time the script decided at: the hybrid mode's
// observation time, and for tests and debugging.
const luaSource = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local key = KEYS[1]
local n = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local w = tonumber(ARGV[3])
local span = tonumber(ARGV[4])
local weighted = ARGV[5] == '1'
local force = ARGV[7] == '1'
local reserve = tonumber(ARGV[8] or '0')
local seq = tonumber(ARGV[9] or '0')
if force and n >= 1 and KEYS[2] then
  local last = tonumber(redis.call('GET', KEYS[2]) or '0')
  if seq <= last then n = 0 end -- applied already: answer as a pull
end
local need = n + reserve

local function idiv(x, y)
  local q = math.floor(x / y)
  while q * y > x do q = q - 1 end
  while (q + 1) * y <= x do q = q + 1 end
  return q
end

local tm = redis.call('TIME')
local sec, usec = tonumber(tm[1]), tonumber(tm[2])
local t = sec * 1000000 + usec
local e0 = idiv(t, w)
local off = t - e0 * w

-- c[0..span]: the counts of epochs e-span .. e
local fmt = '<' .. string.rep('d', span + 2)
local raw = redis.call('GET', key)
local c = {}
local l = -1
if raw then
  if #raw ~= 8 * (span + 2) then
    return redis.error_reply('WRONGTYPE ringlimit: the value at ' .. key .. ' is not this limiter geometry state')
  end
  local v = {struct.unpack(fmt, raw)}
  l = v[1]
  for k = 0, span do c[k] = v[k + 2] end
else
  for k = 0, span do c[k] = 0 end
end
local e = e0
if e0 < l then e, off = l, 0 end
if e > l and l >= 0 then
  local d = e - l -- shift the ring to end at e; ascending k reads ahead of what it writes
  for k = 0, span do
    if k + d <= span then c[k] = c[k + d] else c[k] = 0 end
  end
end

local cur = c[span]
local full, old = 0, 0
for k = 0, span - 1 do full = full + c[k] end
if weighted and span > 0 then full = full - c[0]; old = c[0] end

local wn = w * 1000   -- ns
local offn = off * 1000

local function fits(fl, o, m)
  local room = limit - fl - m
  if room < 0 then return false end
  if o <= room then return true end
  if not weighted then return false end
  return o * (w - off) <= room * w
end
local function remaining(fl, o)
  local used = fl + o
  if weighted and o > 0 and off > 0 then
    local x = o * (w - off)
    local q = idiv(x, w)
    if q * w ~= x then q = q + 1 end
    used = fl + q
  end
  if used >= limit then return 0 end
  return limit - used
end
local function retryAfter()
  local fl, o = cur + full, old
  local x = 0 -- index into c of the epoch leaving next
  for j = 0, span + 1 do
    if j > 0 then
      if weighted then
        x = x + 1
        o = c[x] or 0
        fl = fl - o
      else
        fl = fl - (c[x] or 0)
        x = x + 1
      end
    end
    local room = limit - fl - need
    if room >= 0 then
      if o <= room then
        if j > 0 then return j * wn - offn end
      else
        local rp = wn - idiv(room * wn, o)
        if j == 0 and rp < offn then rp = offn end
        if rp < wn then return j * wn + rp - offn end
      end
    end
  end
  return -1
end

if n >= 1 and (force or n <= limit) then
  if not force and not fits(cur + full, old, need) then
    return {0, remaining(cur + full, old), retryAfter(), sec, usec}
  end
  c[span] = cur + n
  local out = {e}
  for k = 0, span do out[k + 2] = c[k] end
  redis.call('SET', key, struct.pack(fmt, unpack(out)), 'PX', ARGV[6])
  if force and KEYS[2] then redis.call('SET', KEYS[2], string.format('%d', seq), 'PX', 2 * tonumber(ARGV[6])) end
  return {1, remaining(cur + n + full, old), 0, sec, usec}
end
-- a peek: n = 0, n < 0 or n > limit; records nothing
local rem = remaining(cur + full, old)
if n == 0 then return {1, rem, 0, sec, usec} end
if n < 0 then return {0, rem, -1, sec, usec} end
if fits(cur + full, old, n) then return {1, rem, 0, sec, usec} end
return {0, rem, -1, sec, usec}
`
