class Checker:
    def a(self):
        x = 1
        return x

    def b(self):
        y = 2
        return y
