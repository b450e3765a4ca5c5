-- the tape's C arrays grow with every tensor; Lua's own heap stays small
local t = vram.tape()
for i = 1, math.maxinteger do t:alloc(1, "weights") end
