package redisstore

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/ringlimit/ringlimit/engine"
)

// The operations of heldSource, its ARGV[1].
const (
	opReserve = "r" // decide n as AllowN does, and say where the units went
	opCancel  = "c" // return units to the sub-window they were recorded in
	opCharge  = "g" // record units at now whatever the limit (a debt)
	opPeek    = "p" // record nothing
)

// heldSource is the script of reservations, cancels, settles and charges
// (reserve.go). It wraps the decision script, luaSource, in a Lua function
// whose redis, KEYS and ARGV are its parameters, so that a reservation is
// decided by the very code AllowN runs, and a charge is its force path (a
// hybrid flush's: add n without the check). KEYS[1] is the key's state,
// as for a decision, and KEYS[2] its reset mark (resetSource), in the same
// hash tag: one Cluster slot. ARGV:
//
//	1 op        opReserve, opCancel, opCharge or opPeek
//	2 n         units to reserve, return or charge (opPeek: 0)
//	3 limit     the key's limit for this call
//	4 … 7       w (µs), span, weighted, ttl (ms): as luaSource's 3 … 6
//	8 x         opCancel: the epoch the units were recorded in (the
//	            reservation's); opCharge: the most one sub-window may count
//	9 mark      opCancel: the reset mark the reservation read (0: none)
//
// Every TIME inside a cancel, charge or peek returns the first one's answer
// (the proxy below), so a charge and the Decision after it are at one
// instant; a reservation is one decision, on redis itself.
//
// opCancel returns min(n, c_x) units to c_x, and to mid when x is one of
// its sub-windows, with SETRANGE (the TTL stays), when x is in the window
// now: max(l, e) − span ≤ x ≤ l, with l the key's newest epoch and e
// TIME's. Otherwise the sub-window has left the window (x < max(l, e) −
// span; the engine's Cancel judges by the key's newest time instead, and
// may still subtract units that count nowhere), or the state is not the
// one the units went into (no state: it expired, which it does only one
// Window plus a sub-window after its last write, when x has left the
// window; x > l: a state created afresh under a clock stepped back), and
// nothing changes. Nothing changes either when the key's reset mark is
// not the one the reservation read: a Reset (Limiter.Reset) ran since, and
// the units it forgot give nothing back to the fresh count, as the
// engine's. A reservation that reads a mark renews its TTL, so that the
// mark outlives the reservation's sub-window.
//
// opCharge refuses (reply status 0) when the current sub-window (TIME's,
// or l when TIME is older) would count more than ARGV[8]; else it runs the
// decision with force, which adds n at that sub-window, moving the ring as
// an admission does, and sets the TTL.
//
// Replies {allowed, remaining, retryAfterNs (−1 = Never), t, x, mark}:
// for opReserve the decision's (luaSource's reply), x the epoch its units
// were recorded in (−1: none) and mark the key's reset mark (0: none); for
// the others the Decision a one-unit
// request would get now, recording nothing (Remaining before it, as
// engine.Engine's Settle and ChargeAt report), and x the status: 1 done,
// 0 not (opCancel: nothing to return; opCharge: the sub-window is full).
var heldSource = "local function decide(redis, KEYS, ARGV)\n" + luaSource + "\nend\n" + opsSource

const opsSource = `
if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end
local key = KEYS[1]
local state1 = {key} -- the decision's KEYS: the state alone (its KEYS[2] is a flush's dedup key)
local op = ARGV[1]
local n = tonumber(ARGV[2])
local span = tonumber(ARGV[5])
if op == 'r' then -- AllowN's decision, on redis itself (one TIME)
  local r = decide(redis, state1, {ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]})
  if r.err then return r end
  local x, mark = -1, 0
  if r[1] == 1 and n >= 1 then
    x = struct.unpack('<d', redis.call('GET', key)) -- after an admission, l is its epoch
    local m = redis.call('GET', KEYS[2])
    if m then
      mark = tonumber(m)
      redis.call('PEXPIRE', KEYS[2], ARGV[7])
    end
  end
  return {r[1], r[2], r[3], r[4], x, mark}
end

local tm = redis.call('TIME')
-- proxies of redis whose TIME is tm: fixed passes every other command,
-- nowrite drops SET (a peek runs the decision without recording)
local function proxy(write)
  return setmetatable({call = function(cmd, ...)
    if cmd == 'TIME' then return tm end
    if cmd == 'SET' and not write then return false end
    return redis.call(cmd, ...)
  end}, {__index = redis})
end
local fixed, nowrite = proxy(true), proxy(false)
local function args(units, force)
  return {units, ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], force}
end
-- peek: what a one-unit request gets now, Remaining before it, and status
-- x. One unit fits exactly when Remaining (limit minus the count, its
-- weighted part rounded up) is at least 1, the limit being an integer; only
-- a refusal runs the decision for one unit (without its SET), for its
-- RetryAfter.
local function peek(x)
  local a = decide(nowrite, state1, args('0'))
  if a.err or a[2] >= 1 then
    if not a.err then a[5], a[6] = x, 0 end
    return a
  end
  local b = decide(nowrite, state1, args('1'))
  if b.err then return b end
  return {b[1], a[2], b[3], b[4], x, 0}
end
-- epoch: the sub-window of tm, exactly (as luaSource's e0)
local function epoch()
  local w = tonumber(ARGV[4])
  local t = tonumber(tm[1]) * 1000000 + tonumber(tm[2])
  local e0 = math.floor(t / w)
  while e0 * w > t do e0 = e0 - 1 end
  while (e0 + 1) * w <= t do e0 = e0 + 1 end
  return e0
end
local function state()
  local raw = redis.call('GET', key)
  if raw and #raw ~= 8 * (span + 3) then
    return nil, redis.error_reply('WRONGTYPE ringlimit: the value at ' .. key .. ' is not this limiter geometry state')
  end
  return raw
end

if op == 'p' then return peek(0) end
if op == 'c' then
  local raw, err = state()
  if err then return err end
  local x, done = tonumber(ARGV[8]), 0
  if raw and tonumber(redis.call('GET', KEYS[2]) or '0') == tonumber(ARGV[9]) then
    local l, mid = struct.unpack('<dd', raw)
    if x <= l and x >= math.max(l, epoch()) - span then
      local k = x - l + span -- c_x is at byte 17 + 8k
      local c = struct.unpack('<d', raw, 17 + 8 * k)
      local back = math.min(c, n)
      if back > 0 then
        redis.call('SETRANGE', key, 16 + 8 * k, struct.pack('<d', c - back))
        if k > 0 and k < span then redis.call('SETRANGE', key, 8, struct.pack('<d', mid - back)) end
        done = 1
      end
    end
  end
  return peek(done)
end
if op == 'g' then
  local raw, err = state()
  if err then return err end
  local cur = 0 -- the count of the sub-window the charge goes to
  if raw then
    local l = struct.unpack('<d', raw)
    if epoch() <= l then cur = struct.unpack('<d', raw, 8 * span + 17) end
  end
  if n > tonumber(ARGV[8]) - cur then return peek(0) end
  local r = decide(fixed, state1, args(ARGV[2], '1'))
  if r.err then return r end
  return peek(1)
end
return redis.error_reply('ERR ringlimit: unknown operation ' .. tostring(op))
`

var heldScript = redis.NewScript(heldSource)

// resetSource is Limiter.Reset's script: it deletes the key's state
// (KEYS[1]) and sets its reset mark (KEYS[2], same hash tag) to Redis TIME
// in µs, for ARGV[1] ms (the state's TTL: one Window and one sub-window,
// after which every unit from before the Reset has left the window). A
// reservation's cancel or settle finds another mark than the one it read,
// and gives nothing back to the fresh count (heldSource).
const resetSource = `
if not redis.REDIS_VERSION_NUM and redis.replicate_commands then redis.replicate_commands() end
redis.call('DEL', KEYS[1])
local tm = redis.call('TIME')
redis.call('SET', KEYS[2], tm[1] .. string.format('%06d', tonumber(tm[2])), 'PX', ARGV[1])
return 1
`

var resetScript = redis.NewScript(resetSource)

// heldReply is heldSource's reply.
type heldReply struct {
	d  engine.Decision
	at time.Time // Redis TIME of the call
	x  int64     // opReserve: the units' epoch, −1 none; else the status
	// mark: opReserve, the key's reset mark after an admission (0: none)
	mark int64
}

func parseHeld(res any, limit int64) (heldReply, error) {
	a, ok := res.([]any)
	if !ok || len(a) != 6 {
		return heldReply{}, fmt.Errorf("redisstore: unexpected script reply %v", res)
	}
	var v [6]int64
	for i := range a {
		x, ok := a[i].(int64)
		if !ok {
			return heldReply{}, fmt.Errorf("redisstore: unexpected script reply %v", res)
		}
		v[i] = x
	}
	d := engine.Decision{Allowed: v[0] == 1, Limit: limit, Remaining: v[1], RetryAfter: time.Duration(v[2])}
	if v[2] < 0 {
		d.RetryAfter = engine.Never
	}
	return heldReply{d: d, at: time.UnixMicro(v[3]), x: v[4], mark: v[5]}, nil
}
