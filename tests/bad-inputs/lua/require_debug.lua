print(require("debug").getregistry())
