"""The course's helper package: the library the notebooks import.

For computing (graded code may import these: see :mod:`shared.policy`):

- :mod:`shared.mlp`, :mod:`shared.data`  the MLP of any depth and synthetic data
- :mod:`shared.cluster`   the simulated cluster and its traffic ledger
- :mod:`shared.memory`    byte counts, and peak bytes measured with tracemalloc
- :mod:`shared.dtypes`    the bytes of one number of each dtype (``shared.memory`` hands them on), two input checks
- :mod:`shared.lesson_blocks`  the helper's versions of lesson functions that later lessons build on
- :mod:`shared.training`  lesson 040's configuration and one worker's gradients

For the learner's view of the course (not for graded code):

- :mod:`shared.lessons`   the 7 parts and 40 lessons (names, grade ids, XP)
- :mod:`shared.checking`  the visible tests: comparisons whose failures explain themselves
- :mod:`shared.mistakes`  each lesson's common mistakes, recognised by name
- :mod:`shared.policy`    the rules for graded code
- :mod:`shared.progress`  XP, the progress panel, ``make progress``
- :mod:`shared.plotting`, :mod:`shared.notebook`  the course's plots and the notebooks' set-up
- :mod:`shared.answers`   which helper functions answer which lesson (locked while it is graded)
"""
