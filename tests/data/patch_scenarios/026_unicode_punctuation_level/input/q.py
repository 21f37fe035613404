msg = “don’t” — ok
z = 0
