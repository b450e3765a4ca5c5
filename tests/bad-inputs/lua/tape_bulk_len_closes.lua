-- issue 10 item 2: bulk reads its edge list's length with __len
local t = vram.tape()
local id = t:alloc(16, "activations")
local list = setmetatable({ id, 8 }, { __len = function() do local c <close> = t end return 2 end })
t:bulk(16, 16, 1, list, 1)
