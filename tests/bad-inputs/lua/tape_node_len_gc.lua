-- issue 10 item 2: __len closes the tape through a to-be-closed variable
-- inside the metamethod (the locked metatable hides __close; <close> does not).
local t = vram.tape()
local id = t:alloc(16, "activations")
local list = setmetatable({}, { __len = function()
  do local c <close> = t end
  return 0
end })
t:node({ id }, {}, list)
