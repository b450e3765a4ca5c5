error({ msg = "m", code = "x" })
