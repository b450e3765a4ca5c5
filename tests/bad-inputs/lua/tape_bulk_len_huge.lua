-- issue 10 item 3: bulk's edge count from a hostile __len
local t = vram.tape()
local id = t:alloc(16, "activations")
local list = setmetatable({ id, 8 }, { __len = function() return (1 << 32) - 2 end })
t:bulk(16, 16, (1 << 31) - 1, list, 1)
