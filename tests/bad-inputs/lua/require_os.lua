local os = require("os")
os.execute("echo PWNED")
