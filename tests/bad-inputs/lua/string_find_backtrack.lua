-- one C call (the pattern matcher backtracks) that would run for hours:
-- the instruction budget never fires inside it; the CPU budget does
local s = string.rep("a", 3000)
print(s:find(string.rep("a-", 12) .. "b"))
