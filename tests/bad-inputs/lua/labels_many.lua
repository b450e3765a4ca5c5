-- issue 10 item 10 / issue 11 item 4: labels past 511 were dropped silently
-- and a new phase then failed as "out of memory"
local t = vram.tape()
for i = 1, 2000 do t:alloc(1, "activations", "label" .. i) end
t:phase("after")
local names = t:names()
assert(#names >= 2001, "labels dropped: " .. #names)
for i = 1, 100 do t:phase("phase" .. i) t:alloc(1, "activations") end
local n = 0
for _ in pairs(t:stats().phase_peaks) do n = n + 1 end
assert(n >= 100, "phase peaks dropped: " .. n)
print("labels ok", #names, n)
