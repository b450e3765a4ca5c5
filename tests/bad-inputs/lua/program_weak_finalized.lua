-- issue 10 item 4: a finalized vram.program kept reachable through a weak
-- table, then called (was a NULL dereference). Lua clears weak keys of
-- finalized objects only in the next cycle, so the key is still there.
local probes = { {1,1},{1,2},{1,3},{2,1},{2,2},{2,3},{3,5} }
local traces, names = {}, nil
for i, p in ipairs(probes) do
  local t = vram.tape()
  t:trace(p[1], p[2])
  local x = t:alloc(p[1] * p[2] * 4, "activations", "x")
  t:drop(x)
  traces[i] = t:take_trace()
  names = t:names()
end
local weak = setmetatable({}, { __mode = "k" })
weak[assert(vram.fit_program(traces, names, nil, probes, { 1, 2 }))] = true
collectgarbage()
for p in pairs(weak) do print(p:peak(4, 8)) print(#p) end
for _, tr in ipairs(traces) do print(#tr) end
