"""The names that cross the sandbox's wall, each defined once.

The grader (nbgrader's process: :mod:`grading.preprocessors`, :mod:`grading.judge`, and the tools
that start it), the sandbox's launcher (:mod:`grading.sandbox`) and the kernel (:mod:`grading.harness`)
agree on a few names: the environment variables they set for one another, the paths at which the
sandbox shows the kernel what it may read, the MIME type of the answers' message and how much of a
crash's message it carries, and the reasons a verdict gives.  Each is spelled here and nowhere else
in ``grading/`` and ``tools/`` (``tests/test_protocol.py`` fails on an ``MCT_`` name written out there).

This module is copied into the kernel's tree beside the harness (:data:`grading.kernel_tree.KERNEL_SIDE`):
it imports nothing but the standard library and holds names only, nothing that decides a point.

The helper package ``shared/`` never imports from ``grading/`` (it is what the learner's kernel
imports): :mod:`shared.progress` keeps its own copy of the two names it reads
(``GRADING_ENV``, ``PROGRESS_FILE_ENV``), and ``tests/test_protocol.py`` holds them equal to these.
"""

from __future__ import annotations

from enum import StrEnum

#: Every environment variable of the course begins so (a tool that passes its own environment on
#: leaves them out).
ENV_PREFIX = "MCT_"

# --------------------------------------------------------------------------
# Environment variables
# --------------------------------------------------------------------------

# Set by the instructor's tools, `make grade` and the tests for the nbgrader process that grades.
COURSE_DIR_ENV = "MCT_COURSE_DIR"          # the nbgrader course directory (autograde/nbgrader_config.py reads it)
PRIVATE_DIR_ENV = "MCT_PRIVATE_DIR"        # the grading process's private folder: kernelspec, kernels' runtime
PRIVATE_DIR_PID_ENV = "MCT_PRIVATE_DIR_PID"  # the process that made it (a child's nbgrader makes its own)
RUN_SEED_ENV = "MCT_RUN_SEED"              # the seed a grading run draws its hidden cases from (grading.judge)
SANDBOX_ENV = "MCT_SANDBOX"                # "off": kernels run without bubblewrap (a trusted class)
WARM_KERNELS_ENV = "MCT_WARM_KERNELS"      # "off": each kernel starts from cold, not forked from the zygote
CELL_TIMEOUT_ENV = "MCT_CELL_TIMEOUT"      # seconds a cell may run (nbgrader's Execute.timeout)
NOTEBOOK_SECONDS_ENV = "MCT_NOTEBOOK_SECONDS"            # wall-clock seconds of a whole notebook's kernel
CELL_OUTPUT_BYTES_ENV = "MCT_CELL_OUTPUT_BYTES"          # output kept per cell, counted as it arrives
NOTEBOOK_OUTPUT_BYTES_ENV = "MCT_NOTEBOOK_OUTPUT_BYTES"  # output kept per notebook
NOTEBOOK_MESSAGE_BYTES_ENV = "MCT_NOTEBOOK_MESSAGE_BYTES"  # bytes of all a notebook's kernel sends, every channel
MAX_NOTEBOOK_BYTES_ENV = "MCT_MAX_NOTEBOOK_BYTES"        # a submitted notebook's size (larger: refused unread)
GRADER_GROWTH_BYTES_ENV = "MCT_GRADER_GROWTH_BYTES"      # the grader's own memory growth allowed while a kernel runs
KERNEL_MEMORY_ENV = "MCT_KERNEL_MEMORY"    # bytes of everything a kernel holds (its control group)
KERNEL_ADDRESS_SPACE_ENV = "MCT_KERNEL_ADDRESS_SPACE"    # bytes of address space per process (the fallback)
KERNEL_PROCESSES_ENV = "MCT_KERNEL_PROCESSES"            # tasks of a kernel's control group
KERNEL_TMP_ENV = "MCT_KERNEL_TMP"          # bytes of the sandbox's /tmp, its only writable place
RUN_BROKEN_CELLS_ENV = "MCT_RUN_BROKEN_CELLS"  # "1", for the sandbox's own tests: cells that break the rules run
RUN_DEMOS_ENV = "MCT_RUN_DEMOS"            # "1": the course's demonstration cells run while grading

# Set by the grader (its preprocessors and kernel manager) for the sandbox's launcher: paths on the host.
CASES_FILE_HOST_ENV = "MCT_CASES_FILE_HOST"  # the kernel's input: the cases of the part being graded
KERNEL_TREE_HOST_ENV = "MCT_KERNEL_TREE_HOST"  # the modules the kernel may import (grading.kernel_tree)
REVEAL_DIR_HOST_ENV = "MCT_REVEAL_DIR_HOST"  # where a composite lesson's building blocks appear for its cell
CGROUP_NAME_ENV = "MCT_CGROUP_NAME"          # the control group the launcher makes and enters (grading.cgroups)
SANDBOX_HOLDER_ENV = "MCT_SANDBOX_HOLDER"    # set: the sandbox runs a holder, the kernel is forked in (grading.zygote)

# Set by the launcher for the kernel (grading.sandbox.kernel_env): what the kernel reads.
CASES_FILE_ENV = "MCT_CASES_FILE"          # the cases file, as the kernel sees it (INSIDE_CASES in the sandbox)
REVEAL_DIR_ENV = "MCT_REVEAL_DIR"          # the building blocks' folder, as the kernel sees it (INSIDE_REVEAL)
GRADING_ENV = "MCT_GRADING"                # "1" in a grading kernel (shared.progress.GRADING_ENV is the same name)

# The learner's side: where shared.progress keeps the XP (shared.progress.PROGRESS_FILE_ENV is the same name).
PROGRESS_FILE_ENV = "MCT_PROGRESS_FILE"

# --------------------------------------------------------------------------
# Paths inside the sandbox
# --------------------------------------------------------------------------

INSIDE_TMP = "/tmp"                        # the sandbox's own tmpfs (its only writable place) and the kernel's HOME
INSIDE_WORK = f"{INSIDE_TMP}/work"         # the notebook's working folder (empty: nothing beside it)
INSIDE = f"{INSIDE_TMP}/mct"               # the grader's things, inside the sandbox's own /tmp
INSIDE_CASES = f"{INSIDE}/cases.json"
INSIDE_REVEAL = f"{INSIDE}/reveal"
INSIDE_TREE = f"{INSIDE}/course"
INSIDE_RUN = f"{INSIDE}/run"               # the kernel's sockets
INSIDE_CONNECTION = f"{INSIDE}/kernel.json"
INSIDE_IP = f"{INSIDE_RUN}/kernel"         # the ipc address prefix in the connection file

# --------------------------------------------------------------------------
# The answers' message
# --------------------------------------------------------------------------

#: The MIME type of the one message a test cell displays with its lesson's answers (grading.wire's JSON).
ANSWERS_MIME = "application/vnd.mct.answers+json"

#: Characters of a crash's message that the kernel sends (grading.harness); the judge compares a mistake's
#: crash on as many (shared.checking.recognise_crashing_mistake), so that a long message still matches.
MESSAGE_CUT = 2000


def printable(text: str) -> str:
    """``text`` with every character that a terminal or a page would act on rather than show (an ANSI escape
    that moves the cursor or rewrites a line, a carriage return, a bidirectional override, a zero-width
    character) written as its Python escape (``\\x1b``, ``\\r``, ``\\u202e``); lines and tabs are kept.

    A message quotes what the learner's code raised or returned: it must show that text, never let it
    draw over the grader's own lines ("✓ 018: 5/5")."""
    return "".join(c if c.isprintable() or c in "\n\t" else c.encode("unicode_escape").decode("ascii") for c in text)

# --------------------------------------------------------------------------
# Why a lesson got its points, or not
# --------------------------------------------------------------------------


class Reason(StrEnum):
    """Why a lesson lost its points (or ``PASSED``), as :class:`grading.judge.Verdict` states it.

    Only ``VALUE`` means the answer had the right form (types, dtypes, shapes, keys), kept the
    contract (errors, no mutation, fresh arrays, memory) and differed in numbers alone; the contract
    tests allow no other reason to be hidden from the visible tests.  A member is its string
    (``Reason.NOT_STARTED == "not started"``, and so in a message or in JSON)."""

    PASSED = "passed"
    VALUE = "value"
    FORM = "form"
    REFUSAL = "refusal"          # a case that must raise did not raise the right error
    CRASH = "crash"              # the function raised, timed out or ended its process
    MUTATION = "mutation"
    ALIAS = "alias"
    MEMORY = "memory"
    TRAFFIC = "traffic"
    NOT_STARTED = "not started"
    NO_ANSWERS = "no answers"
    RULES = "rules"
    GRADING = "grading"          # anything else: malformed or refused answers, a moved test cell
