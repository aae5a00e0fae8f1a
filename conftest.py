"""Session-wide set-up for `make test`: nothing a test does touches the learner's files.

Progress goes to a scratch file (the solved notebooks that nbval runs record
lessons as passed), plots render off-screen, and grading mode is off unless a
test turns it on for a kernel it starts.
"""

import os
import tempfile

_scratch = tempfile.mkdtemp(prefix="mct-test-")
os.environ["MCT_PROGRESS_FILE"] = os.path.join(_scratch, "progress.json")
os.environ.pop("MCT_GRADING", None)
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")


def pytest_configure(config):
    # Warm matplotlib's font cache so its first-run notice never lands in a cell's output.
    import matplotlib.pyplot  # noqa: F401
