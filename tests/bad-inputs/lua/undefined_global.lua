local n = 1
print(n + undefined_variable)
