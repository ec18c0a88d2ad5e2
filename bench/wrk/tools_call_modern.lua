-- wrk script: stateless MCP 2026-07-28 `tools/call` round trips (no initialize, no session).
--
-- It runs the base script (tools_call.lua: its response() answer checks, its done() summary line)
-- and replaces request(): every request carries the client envelope in `params._meta` and the
-- routing headers the 2026-07-28 wire requires (MCP-Protocol-Version, Mcp-Method, Mcp-Name), and no
-- Mcp-Session-Id. Ids are unique as in the base script: BENCH_ID_BASE + thread_index * 1e9 + counter.
--
-- Used by bench/roundtrip/wrk.py (`make bench`, target switchboard-modern) and bench/workers.py.
--
-- Environment (besides the base script's BENCH_TOOL, BENCH_TEXT, BENCH_ARG, BENCH_EXPECT, BENCH_ID_BASE,
-- BENCH_CHECK_BODY; BENCH_EXPECT is checked by the base script's response()):
--   BENCH_BASE_SCRIPT       path of tools_call.lua (default: the file next to this one)
--   BENCH_PROTOCOL_VERSION  MCP-Protocol-Version header and default envelope version (default 2026-07-28)
--   BENCH_META              the `_meta` object as JSON text (default: the version, empty client
--                           capabilities and clientInfo {"name":"switchboard-bench","version":"1.0"})

local function env(name, default)
   local value = os.getenv(name)
   if value == nil or value == "" then
      return default
   end
   return value
end

local here = debug.getinfo(1, "S").source:match("^@(.*/)") or "./"
dofile(env("BENCH_BASE_SCRIPT", here .. "tools_call.lua"))

local m_version = env("BENCH_PROTOCOL_VERSION", "2026-07-28")
local m_tool = env("BENCH_TOOL", "echo")
local m_text = env("BENCH_TEXT", "bench")
local m_arg = env("BENCH_ARG", "text")
local m_base = tonumber(env("BENCH_ID_BASE", "0")) or 0
local m_meta = env("BENCH_META",
   '{"io.modelcontextprotocol/protocolVersion":"' .. m_version .. '",' ..
   '"io.modelcontextprotocol/clientCapabilities":{},' ..
   '"io.modelcontextprotocol/clientInfo":{"name":"switchboard-bench","version":"1.0"}}')

-- Per-thread state, as in the base script (each wrk thread has its own Lua VM).
local m_counter, m_offset = 0, 0
local m_headers = {
   ["Content-Type"] = "application/json",
   ["Accept"] = "application/json, text/event-stream",
   ["MCP-Protocol-Version"] = m_version,
   ["Mcp-Method"] = "tools/call",
   ["Mcp-Name"] = m_tool,
}
local m_head = '{"jsonrpc":"2.0","method":"tools/call","params":{"name":"' .. m_tool ..
   '","arguments":{"' .. m_arg .. '":"' .. m_text .. '"},"_meta":' .. m_meta .. '},"id":'

local base_init = init
function init(args)
   base_init(args)
   m_offset = m_base + (thread_index or 0) * 1000000000
end

function request()
   m_counter = m_counter + 1
   return wrk.format("POST", nil, m_headers, m_head .. string.format("%d", m_offset + m_counter) .. "}")
end
