-- a Lua table well inside the budget whose cJSON tree (about 64 bytes a
-- value, in C) is not: the encoder allocates from the same budget
local t = {}
for i = 1, 2000000 do t[i] = i end
print(#vram.json.encode(t))
