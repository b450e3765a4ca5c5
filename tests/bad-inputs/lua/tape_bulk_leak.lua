-- issue 10 item 7 / issue 11 item 4: vr_tape_bulk's error paths leaked its
-- copy of the edges; a loop of failing bulks grew to 1.4 GB under
-- --max-memory 64. Every call fails (no marks in a trace) and frees it.
local t = vram.tape()
t:trace(1, 1)
local w = t:param(64, "weights")
local edges = {}
for i = 1, 20000 do edges[#edges + 1] = w edges[#edges + 1] = 64 end
local failures = 0
for i = 1, 2000 do
  if not pcall(t.bulk, t, 16, 16, 20000, edges, 1, "layers") then failures = failures + 1 end
end
print(("bulk failures: %d"):format(failures))
