local f, e = load("\27LuaT\0\25\147\r\n\26\n", "=x", "b")
assert(f, e)
