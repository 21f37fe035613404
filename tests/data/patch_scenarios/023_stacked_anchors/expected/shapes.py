class Square:
    def area(self):
        return 0


class Circle:
    def area(self):
        return 3.14 * self.r ** 2
