"""The instructor's JupyterLab (``make formgrader``): its Launcher offers the course's kernel only.

The formgrader loads the course's nbgrader configuration into the server's process, and with it the private
kernelspec of the sandboxed grading kernel (``mct-grading``, autograde/nbgrader_config.py), which nbgrader's
own grading needs in that process.  JupyterLab would list every kernelspec it finds in its Launcher, that one
too, as "Python 3 (sandboxed grading)": a kernel no one should open a notebook with.  The server's kernelspec
manager is this one, which admits the course's kernel alone (an allow-list); nbgrader's grading finds its
kernel through a kernelspec manager of its own and is not affected.
"""

from __future__ import annotations

from jupyter_client.kernelspec import KernelSpecManager
from traitlets import default

#: The kernels the instructor's Launcher offers: the course's (``make venv``: "Python 3 (course)").
LAUNCHER_KERNELS = frozenset({"python3"})


class LauncherKernelSpecManager(KernelSpecManager):
    """The server's kernelspecs: those of :data:`LAUNCHER_KERNELS` only."""

    @default("allowed_kernelspecs")
    def _allowed_kernelspecs_default(self):
        return set(LAUNCHER_KERNELS)
