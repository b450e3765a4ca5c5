local t = {}
for i = 1, math.maxinteger do t[i] = ("x"):rep(1024) .. i end
