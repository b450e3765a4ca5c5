-- issue 10 item 7: the tape's C memory counts against --max-memory (with
-- --max-memory 16 this reached 127 MB RSS and exited 0)
local t = vram.tape()
for i = 1, 1e9 do t:alloc(1, "activations") end
