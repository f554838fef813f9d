-- relaybus: append a batch of events to the log atomically with a file offset.
--
-- KEYS: 1 seq, 2 log, 3 sessions (zset), 4 session hash, 5 session events stream,
--       6 offsets hash of the host, 7 epoch, 8 rewinds hash (read only)
-- ARGV: 1 expected epoch, 2 session id,
--       3 offset field ("" = this batch commits no offset),
--       4 expected committed value ("" = the field must be absent),
--       5 new committed value,
--       6 log maxlen, 7 session maxlen, 8 session ttl seconds, 9 stamp ms (field t),
--       10 activity score for the sessions zset ("" = leave it),
--       11 prune: members scored at or below it leave the sessions zset ("" = not this time),
--       12 n, the number of hash updates, then 13 .. 12+2n their fields and values,
--       then the events, three arguments each: kind, flags, frame prefix.
--       flags: "s" = also XADD to the session stream, "q" = also assign a sessionSeq.
--       A frame prefix is a JSON object without its closing brace; the script closes it
--       with ,"seqId":N (and ,"sessionSeq":M) so clients see ids assigned here.
-- Returns {"OK", first_seq, last_seq, last_session_seq, rewind generation}, {"EPOCH", current}, or
-- {"OFFSET", committed}. All checks happen before the first write: a script is atomic
-- but not rolled back on error, so nothing after the checks may fail.

local epoch = redis.call('GET', KEYS[7])
if epoch ~= ARGV[1] then
  return {'EPOCH', epoch or ''}
end

local field = ARGV[3]
if field ~= '' then
  local committed = redis.call('HGET', KEYS[6], field)
  if (committed or '') ~= ARGV[4] then
    return {'OFFSET', committed or ''}
  end
end

local sid = ARGV[2]
local log_maxlen = ARGV[6]
local session_maxlen = ARGV[7]
local stamp = ARGV[9]
local first_seq, last_seq, last_qseq = 0, 0, 0
local events = 13 + 2 * tonumber(ARGV[12])

local i = events
while i <= #ARGV do
  local kind, flags, prefix = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local seq = redis.call('INCR', KEYS[1])
  local id = string.format('%d-0', seq)
  local frame
  if string.find(flags, 'q', 1, true) then
    last_qseq = redis.call('HINCRBY', KEYS[4], 'sessionSeq', 1)
    frame = prefix .. string.format(',"seqId":%d,"sessionSeq":%d}', seq, last_qseq)
  else
    frame = prefix .. string.format(',"seqId":%d}', seq)
  end
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', log_maxlen, id,
    's', sid, 'k', kind, 'f', frame, 't', stamp)
  if string.find(flags, 's', 1, true) then
    redis.call('XADD', KEYS[5], 'MAXLEN', '~', session_maxlen, id,
      's', sid, 'k', kind, 'f', frame, 't', stamp)
  end
  if first_seq == 0 then first_seq = seq end
  last_seq = seq
  i = i + 3
end

-- The hash updates and lastSeqId in one HSET.
if last_seq > 0 or events > 13 then
  local hset = {'HSET', KEYS[4]}
  for j = 13, events - 1 do
    hset[#hset + 1] = ARGV[j]
  end
  if last_seq > 0 then
    hset[#hset + 1] = 'lastSeqId'
    hset[#hset + 1] = last_seq
  end
  redis.call(unpack(hset))
  redis.call('EXPIRE', KEYS[4], ARGV[8])
  redis.call('EXPIRE', KEYS[5], ARGV[8]) -- a no-op while the session has no stream
end
if ARGV[10] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[10], sid)
end
if ARGV[11] ~= '' then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', ARGV[11])
end
if field ~= '' then
  redis.call('HSET', KEYS[6], field, ARGV[5])
end
return {'OK', first_seq, last_seq, last_qseq, tonumber(redis.call('HGET', KEYS[8], 'gen') or '0')}
