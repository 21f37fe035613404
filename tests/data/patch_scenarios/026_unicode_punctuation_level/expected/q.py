msg = “don’t” — ok
z = 1
