class C:
    def a(self):
        pass
        return 1

    def b(self):
        pass
        return 1
