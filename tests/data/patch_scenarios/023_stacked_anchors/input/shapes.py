class Square:
    def area(self):
        return 0


class Circle:
    def area(self):
        return 0
