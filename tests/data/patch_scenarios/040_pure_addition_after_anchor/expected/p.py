def f():
    """F."""
    pass

def g():
    pass
