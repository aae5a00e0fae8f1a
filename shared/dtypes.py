"""The floating-point dtypes the course uses, and the bytes of one number of each.

A leaf of the helper package: the helper versions of the memory lessons
(:mod:`shared.lesson_blocks`) and :mod:`shared.memory`, which the notebooks import it
from, both read it.
"""

#: Bytes of one number of each floating-point dtype the course uses (lessons 036-038 name them so;
#: "mixed" precision is their mix: float16 passes, float32 master weights and optimizer state).
BYTES_PER_NUMBER = {"float16": 2, "float32": 4, "float64": 8}
