-- wrk script: JSON-RPC `tools/call` round trips against a Streamable HTTP MCP server.
--
-- Every request is a POST of `tools/call` for tool BENCH_TOOL (default "echo")
-- with a unique JSON-RPC id: BENCH_ID_BASE + thread_index * 1e9 + per-thread counter.
--
-- Environment (set by bench/run.py):
--   BENCH_SESSION_ID        Mcp-Session-Id from the driver's initialize (empty: no header, stateless)
--   BENCH_PROTOCOL_VERSION  MCP-Protocol-Version header (default 2025-11-25)
--   BENCH_TOOL              tool name (default echo)
--   BENCH_TEXT              text to echo (default "bench")
--   BENCH_ARG               name of the tool's argument carrying it (default "text"; server-everything: "message")
--   BENCH_EXPECT            the text content the answer must carry, as a JSON string (default BENCH_TEXT;
--                           server-everything answers "Echo: " .. BENCH_TEXT)
--   BENCH_ID_BASE           numeric offset so ids stay unique across wrk runs (default 0)
--   BENCH_CHECK_BODY        "1" (default): count 2xx responses whose body lacks the echoed text
--
-- done() prints one line "BENCH_JSON {...}" with the summary, latency percentiles (µs)
-- and the count of bad bodies, for the driver to parse.

local session_id = os.getenv("BENCH_SESSION_ID") or ""
local protocol_version = os.getenv("BENCH_PROTOCOL_VERSION") or "2025-11-25"
local tool = os.getenv("BENCH_TOOL") or "echo"
local text = os.getenv("BENCH_TEXT") or "bench"
local arg_name = os.getenv("BENCH_ARG") or ""
if arg_name == "" then arg_name = "text" end
local expect = os.getenv("BENCH_EXPECT") or ""
if expect == "" then expect = text end
local id_base = tonumber(os.getenv("BENCH_ID_BASE") or "0") or 0
local check_body = (os.getenv("BENCH_CHECK_BODY") or "1") == "1"

local threads = {}
local thread_count = 0

function setup(thread)
   thread:set("thread_index", thread_count)
   thread_count = thread_count + 1
   table.insert(threads, thread)
end

-- Per-thread state (each wrk thread has its own Lua VM). `bad` is a global so
-- that done(), running in the main VM, can read it with thread:get("bad").
local counter = 0
bad = 0
local headers = {
   ["Content-Type"] = "application/json",
   ["Accept"] = "application/json, text/event-stream",
   ["MCP-Protocol-Version"] = protocol_version,
}
if session_id ~= "" then
   headers["Mcp-Session-Id"] = session_id
end
local body_head = '{"jsonrpc":"2.0","method":"tools/call","params":{"name":"' .. tool ..
   '","arguments":{"' .. arg_name .. '":"' .. text .. '"}},"id":'
local expected = '"' .. expect .. '"'
local id_offset = 0

function init(args)
   id_offset = id_base + (thread_index or 0) * 1000000000
end

function request()
   counter = counter + 1
   return wrk.format("POST", nil, headers, body_head .. string.format("%d", id_offset + counter) .. "}")
end

if check_body then
   function response(status, resp_headers, body)
      -- A JSON-RPC error, a wrong/empty answer or a non-2xx status all count as bad.
      if status < 200 or status > 299 or body == nil
         or not string.find(body, expected, 1, true)
         or string.find(body, '"error"', 1, true) then
         bad = bad + 1
      end
   end
end

local function json_escape_free_number(n)
   return string.format("%.3f", n)
end

function done(summary, latency, requests)
   local bad_total = 0
   for _, t in ipairs(threads) do
      bad_total = bad_total + (t:get("bad") or 0)
   end
   local pct = {}
   for _, p in ipairs({ 50, 75, 90, 99, 99.9 }) do
      table.insert(pct, string.format('"%s":%s', tostring(p), json_escape_free_number(latency:percentile(p))))
   end
   local e = summary.errors
   io.write(string.format(
      'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
      '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
      '"bad_bodies":%d,"body_checked":%s,' ..
      '"latency_us":{"min":%s,"max":%s,"mean":%s,"stdev":%s,"percentiles":{%s}}}\n',
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      bad_total, tostring(check_body),
      json_escape_free_number(latency.min), json_escape_free_number(latency.max),
      json_escape_free_number(latency.mean), json_escape_free_number(latency.stdev),
      table.concat(pct, ",")))
end
