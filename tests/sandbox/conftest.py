from tests.sandbox._boxes import new_box

__all__ = ["new_box"]
