-- a negative __len must not become a C size
local t = vram.tape()
local id = t:alloc(16, "activations")
local list = setmetatable({}, { __len = function() return -5 end })
t:node({ id }, list, { id })
