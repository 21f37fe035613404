class Checker:
    def a(self):
        x = 10
        return x

    def b(self):
        y = 20
        return y
