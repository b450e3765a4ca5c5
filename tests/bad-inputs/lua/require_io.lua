local io = require("io")
print(io.open("/etc/passwd"):read("a"))
