-- relaybus: append a batch of events to the log atomically with a file offset.
--
-- KEYS: 1 seq, 2 log, 3 sessions (zset), 4 session hash, 5 session events stream,
--       6 offsets hash of the host, 7 epoch, 8 rewinds hash (read only)
-- ARGV: 1 expected epoch, 2 session id,
--       3 offset field ("" = this batch commits no offset),
--       4 expected committed value ("" = the field must be absent),
--       5 new committed value,
--       6 log maxlen, 7 session maxlen, 8 session ttl seconds, 9 stamp ms (field t),
--       10 hash updates as a JSON object of strings ("" = none),
--       11 activity score for the sessions zset ("" = leave it),
--       12.. events, three arguments each: kind, flags, frame prefix.
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
local ttl = tonumber(ARGV[8])
local stamp = ARGV[9]
local first_seq, last_seq, last_qseq = 0, 0, 0

local i = 12
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

if ARGV[10] ~= '' then
  local updates = cjson.decode(ARGV[10])
  for k, v in pairs(updates) do
    redis.call('HSET', KEYS[4], k, v)
  end
end
if last_seq > 0 then
  redis.call('HSET', KEYS[4], 'lastSeqId', last_seq)
end
if last_seq > 0 or ARGV[10] ~= '' then
  redis.call('EXPIRE', KEYS[4], ttl)
  if redis.call('EXISTS', KEYS[5]) == 1 then
    redis.call('EXPIRE', KEYS[5], ttl)
  end
end
if ARGV[11] ~= '' then
  redis.call('ZADD', KEYS[3], ARGV[11], sid)
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', tonumber(ARGV[11]) - ttl * 1000)
end
if field ~= '' then
  redis.call('HSET', KEYS[6], field, ARGV[5])
end
return {'OK', first_seq, last_seq, last_qseq, tonumber(redis.call('HGET', KEYS[8], 'gen') or '0')}
