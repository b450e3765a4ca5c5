-- issue 10 item 10: tape:bulk without its optional label always failed
local t = vram.tape()
local w = t:param(64, "weights")
t:mark() t:mark()
local i = t:bulk(16, 512, 2, { w, 64, w, 64 }, 1)
print("bulk ok", i)
