error(setmetatable({}, { __tostring = function() error("refusing to be shown") end }))
