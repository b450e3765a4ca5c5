-- a structured error whose __index raises on every key it lacks (code)
error(setmetatable({ msg = "m" }, { __index = function(_, k) error("no field " .. k) end }))
