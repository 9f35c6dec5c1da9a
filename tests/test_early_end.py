"""The rule for a model-written program that ends before the input does (backend/runtime/early_end.py)."""

from backend.core.program import CopyLines, Gen
from backend.runtime.early_end import copy_tag, rest_to_copy


def test_rest_to_copy():
    assert rest_to_copy([CopyLines(1, 92), CopyLines(99, 99)], 155) == (100, 155)
    assert rest_to_copy([CopyLines(1, 155)], 155) is None           # reached the end
    assert rest_to_copy([CopyLines(150, 155), CopyLines(1, 3)], 155) is None  # reached it earlier
    assert rest_to_copy([CopyLines(1, 10), Gen("x\n")], 155) is None  # a gen may replace the tail
    assert rest_to_copy([], 155) is None                             # nothing written: nothing to continue
    assert copy_tag(100, 155) == '<copy lines="100-155"/>'
