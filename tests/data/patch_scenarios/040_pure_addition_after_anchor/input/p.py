def f():
    pass

def g():
    pass
