"""The next notebook's kernel, launched while this notebook runs.

A sandboxed kernel takes about half a second from its launch to its first answer (bubblewrap's mounts, Python's
and ipykernel's imports), and most of that is waiting, not computing: with one grading job the machine's other
core is idle meanwhile.  So when a notebook's kernel is ready (``SandboxedExecute`` at its first cell), a kernel
is launched for the next notebook, and the next notebook takes it (``take``) instead of launching its own then.

Every notebook still gets a kernel of its own in which nothing ran before: a spare is taken once, by the notebook
after the one that launched it, or not at all.  It is the kernel that notebook would have launched itself,
because nothing of a sandboxed launch depends on the notebook: the sandbox's mounts are the part's (its kernel
tree, its cases, its reveal folder: one of each per part in this process, named in ``os.environ``), the kernel
works in the sandbox's own folder, and its control group, uid and private folder are new.  So a spare is taken
only when a launch now would be the same (the same kernel, arguments and environment) and only while young
(``SPARE_SECONDS``): its launcher's wall clock started at its launch, and it was given that much more, so a
notebook has at least ``MCT_NOTEBOOK_SECONDS`` and at most ``SPARE_SECONDS`` more.  A spare not taken, and one
left when the process ends, is killed and everything of it removed (control group, folder).  Without the sandbox
(``MCT_SANDBOX=off``) a kernel works in the notebook's own folder: no spare is launched then, nor after the last
notebook of an nbgrader command (the next command grades another part).
With warm kernels (grading.zygote) what is launched ahead is the sandbox with its holder, and the kernel itself is
forked into it from the zygote as soon as it runs, in a thread of the grader's (``SandboxKernelManager.launch_ahead``),
so that the next notebook finds its kernel started.
"""

from __future__ import annotations

import atexit
import os
import time
from dataclasses import dataclass

from jupyter_core.utils import run_sync

from .. import sandbox

SPARE_SECONDS = 5  # how long a spare waits to be taken, at most (and the head start of its wall clock)
LAUNCHED_LOG = "a kernel launched for the next notebook"  # (tests count these two)
TAKEN_LOG = "this notebook's kernel was launched while the notebook before it ran"


@dataclass
class Spare:
    km: object  # a SandboxKernelManager, launched ahead
    launch: tuple  # what it was launched with (launch_of)
    at: float  # time.monotonic() just before its launch


_waiting: list[Spare] = []  # at most one: the next notebook's


def launch_of(execute) -> tuple:
    """What a kernel launched now for ``execute`` (an nbclient Execute) would depend on."""
    return execute.kernel_name, tuple(execute.extra_arguments), tuple(sorted(os.environ.items()))


def launch_for_next(execute) -> None:
    """Launch a kernel for the notebook after ``execute``'s (one waiting before is discarded)."""
    discard()
    if not execute.kernel_name or not sandbox.sandbox_wanted():
        return
    km = execute.kernel_manager_class(kernel_name=execute.kernel_name, config=execute.config)
    if not hasattr(km, "launch_ahead"):  # not the course's kernel manager
        return
    at = time.monotonic()
    try:
        run_sync(km.launch_ahead)(head_start=SPARE_SECONDS, extra_arguments=list(execute.extra_arguments))
    except Exception as error:  # the next notebook launches its own kernel, and meets the error there if any
        execute.log.debug("no kernel launched ahead: %s", error)
        _stop(km)
        return
    execute.log.info(LAUNCHED_LOG)
    _waiting.append(Spare(km, launch_of(execute), at))


def take(execute):
    """The kernel manager of a spare launched for ``execute``'s notebook, or None (then it launches its own)."""
    if not _waiting:
        return None
    spare = _waiting.pop()
    if (spare.launch == launch_of(execute) and time.monotonic() - spare.at < SPARE_SECONDS
            and spare.km.launched_ahead_and_alive()):
        return spare.km
    _stop(spare.km)
    return None


def discard() -> None:
    """Kill a spare not taken, and remove everything of it."""
    while _waiting:
        _stop(_waiting.pop().km)


def _stop(km) -> None:
    try:
        run_sync(km.discard_ahead)()
    except Exception:  # its launcher is killed first; what is left of it is what the process's exit removes
        pass


atexit.register(discard)
