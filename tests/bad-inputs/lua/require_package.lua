print(require("package").loadlib)
