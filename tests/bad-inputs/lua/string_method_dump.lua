print(("x"):dump())
