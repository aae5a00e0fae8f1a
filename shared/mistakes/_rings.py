"""The ring's two phases, as the catalogue's mistakes of lessons 028, 034 and 035 run them.

Lesson 028's ring all-reduce is a reduce-scatter and then an all-gather; lesson 034's all-gather and
the reduce-scatter inside lesson 035's ZeRO step are one phase each.  The helper's versions of those
lessons refuse to run while their own lesson is graded, and a mistake must still give its wrong
numbers then, so the catalogue runs the rounds itself, written once here.

Each worker r holds a list (or a dict) of N chunks, ``chunks[r][c]``.  Worker r *owns* chunk
``(r + owner) % N``: the one it holds whole after the reduce-scatter, and the first it sends in the
all-gather (lesson 028's ring: ``owner=1``; ZeRO's shards, worker r's is shard r: ``owner=0``).
"""

from __future__ import annotations


def reduce_scatter_rounds(chunks, cluster, *, owner: int, add_to_sent: bool = False) -> None:
    """The reduce-scatter's N - 1 rounds, summing in place.  In round s worker r sends chunk
    ``(r + owner - 1 - s) % N`` to worker r + 1, which adds it to its own chunk of that index; afterwards
    worker r holds the whole sum of the chunk it owns.  ``add_to_sent``: lesson 028's mistake "off by
    one", the received chunk added to the one the worker itself sent."""
    n = len(chunks)
    for step in range(n - 1):
        with cluster.round():
            for r in range(n):
                cluster.send(r, (r + 1) % n, chunks[r][(r + owner - 1 - step) % n])
        for r in range(n):
            index = (r + owner - 1 - step) % n if add_to_sent else (r + owner - 2 - step) % n
            chunks[r][index] = chunks[r][index] + cluster.receive(r, (r - 1) % n)


def all_gather_rounds(chunks, cluster, *, owner: int) -> None:
    """The all-gather's N - 1 rounds, in place.  In round s worker r sends chunk ``(r + owner - s) % N``
    (its own first, then what it received last) to worker r + 1, which stores it under that index;
    afterwards every worker holds every chunk (a dict in the order the chunks arrived)."""
    n = len(chunks)
    for step in range(n - 1):
        with cluster.round():
            for r in range(n):
                cluster.send(r, (r + 1) % n, chunks[r][(r + owner - step) % n])
        for r in range(n):
            chunks[r][(r + owner - 1 - step) % n] = cluster.receive(r, (r - 1) % n)
