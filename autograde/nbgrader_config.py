"""nbgrader configuration of the course (the instructor's side).

Grading depends neither on the current directory nor on anyone's home folder:
the course directory is this folder (or $MCT_COURSE_DIR), the reference
solutions are found through this file's location (or $MCT_SOLUTIONS_DIR), and
the kernels that grade get a private IPython profile, matplotlib and Jupyter
folders of their own (nothing from ~/.ipython, ~/.jupyter, ~/.config/matplotlib,
~/.local/share/jupyter or $PYTHONPATH reaches them).

Grading cannot be gamed from inside a notebook: every grading kernel starts the
grading guard (shared/guard.py) before the first cell, and a test cell earns its
points only with the guard's keyed proof that it really ran to its last line
(``VerifyGradingProofs`` below).
"""

import atexit
import os
import secrets
import shutil
import sys
import tempfile
from pathlib import Path

c = get_config()  # noqa: F821  (provided by traitlets when nbgrader loads this file)

HERE = Path(__file__).resolve().parent
COURSE_ROOT = Path(__file__).resolve().parent.parent

COURSE_DIR = os.environ.get("MCT_COURSE_DIR", str(HERE))
c.CourseDirectory.root = COURSE_DIR
c.CourseDirectory.course_id = "memory-constrained-trainer"

# What the learner's copy shows in place of a solution.
c.ClearSolutions.code_stub = {
    "python": '# YOUR CODE HERE\nraise NotImplementedError("Not implemented yet: replace this line with your code.")'
}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Per-cell time limit while autograding, in seconds.  A cell that runs longer
# (an endless loop) is interrupted and fails; the rest of the notebook still runs.
c.Execute.timeout = int(os.environ.get("MCT_CELL_TIMEOUT", "30"))
c.Execute.interrupt_on_timeout = True
# (nbgrader's Execute always goes on after an error: allow_errors is True and not configurable.)

# A deleted test cell is put back from the gradebook and graded, not scored None.
c.OverwriteCells.add_missing_cells = True

# Each test cell needs the grading guard's proof that it ran to its end (see VerifyGradingProofs).
from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbformat import NotebookNode  # noqa: E402
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, Execute,  # noqa: E402
                                    IgnorePattern, LimitOutput, NbGraderPreprocessor, SaveAutoGrades)

sys.path.insert(0, str(COURSE_ROOT))  # shared/, when nbgrader runs outside the course's environment
from shared.guard import PROOF_PREFIX, proof_line  # noqa: E402

import shared.guard as _guard_module  # noqa: E402

# One secret and one set of private folders per nbgrader process (nbgrader reads this file
# several times): kernels get the secret, notebooks cannot read it.
if not hasattr(_guard_module, "run_state"):
    _guard_module.run_state = {"secret": secrets.token_hex(32),
                               "private": Path(tempfile.mkdtemp(prefix="mct-grading-"))}
    atexit.register(shutil.rmtree, _guard_module.run_state["private"], True)
GRADING_SECRET = _guard_module.run_state["secret"]


class VerifyGradingProofs(NbGraderPreprocessor):
    """Points only for test cells that the grading guard saw run to their last line.

    Runs right after execution: a lesson's test cell that shows no error but has
    no valid proof line (a notebook that skipped, silenced or faked it) gets an
    error instead, so it scores 0.  Proof lines are then removed from every cell,
    so neither the autograded notebook nor the feedback shows them.
    """

    def preprocess(self, nb, resources):
        key = GRADING_SECRET.encode()
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            proofs, outputs = set(), []
            for output in cell.get("outputs", []):
                if output.get("output_type") == "stream" and PROOF_PREFIX in output.get("text", ""):
                    lines = output.text.splitlines(keepends=True)
                    proofs.update(line.strip() for line in lines if line.startswith(PROOF_PREFIX))
                    output.text = "".join(line for line in lines if not line.startswith(PROOF_PREFIX))
                    if not output.text:
                        continue
                outputs.append(output)
            cell.outputs = outputs
            meta = cell.metadata.get("nbgrader", {})
            grade_id = str(meta.get("grade_id", ""))
            if not (meta.get("grade") and grade_id.startswith("lesson_")):
                continue
            if any(o.get("output_type") == "error" for o in outputs):
                continue
            if proof_line(key, grade_id.split("_")[1]) not in proofs:
                message = ("Grading could not confirm that this cell's tests ran to the end (no proof "
                           "from the grading guard): no points. Was the notebook changing how cells run?")
                outputs.append(NotebookNode(output_type="error", ename="GradingError", evalue=message,
                                            traceback=[f"GradingError: {message}"]))
        return nb, resources


c.Autograde.autograde_preprocessors = [
    Execute, VerifyGradingProofs, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
    SaveAutoGrades, AssignLatePenalties, CheckCellMetadata,
]

# Feedback must not show hidden tests (nbgrader#917, #1363).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]

# Kernels started by nbgrader inherit these: progress is not written while
# grading, failures print only their message, and hidden tests find the
# reference solutions outside the course directory.
os.environ["MCT_GRADING"] = "1"
os.environ.setdefault("MCT_SOLUTIONS_DIR", str(COURSE_ROOT / "solutions"))
# The "python3" kernel is this environment's own, not one a user's home may define.
os.environ["JUPYTER_PATH"] = os.pathsep.join(
    p for p in (str(Path(sys.prefix) / "share" / "jupyter"), os.environ.get("JUPYTER_PATH", "")) if p)

# Private folders for this run: an IPython profile that starts the grading guard before any cell
# (and runs no startup script from anyone's ~/.ipython), matplotlib's configuration and cache, and
# Jupyter's runtime files (kernel connection keys).  Removed when nbgrader exits.
_PRIVATE = _guard_module.run_state["private"]
for _name in ("ipython/profile_default", "matplotlib", "runtime", "jupyter-config"):
    (_PRIVATE / _name).mkdir(parents=True, exist_ok=True)
(_PRIVATE / "ipython" / "profile_default" / "ipython_kernel_config.py").write_text(
    "c = get_config()\n"
    "c.InteractiveShell.ast_node_interactivity = 'last_expr'\n"
    "c.InteractiveShellApp.exec_lines = ["
    "'import shared.guard as _mct_guard; _mct_guard.install(); del _mct_guard']\n")
os.environ["IPYTHONDIR"] = str(_PRIVATE / "ipython")
os.environ["MPLCONFIGDIR"] = str(_PRIVATE / "matplotlib")
os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
os.environ["JUPYTER_RUNTIME_DIR"] = str(_PRIVATE / "runtime")
# Kernels talk over Unix sockets in that private folder (an absolute path: kernels run in the
# submission's folder): no TCP port that two parallel grading runs could both pick, and none
# that another notebook could connect to.
c.KernelManager.transport = "ipc"
c.KernelManager.ip = str(_PRIVATE / "runtime" / "kernel")
os.environ["JUPYTER_CONFIG_DIR"] = str(_PRIVATE / "jupyter-config")
for _name in ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONUSERBASE"):
    os.environ.pop(_name, None)
# What the grading guard needs to know, and what it keeps the notebook away from.
os.environ["MCT_GRADING_SECRET"] = GRADING_SECRET
os.environ["MCT_GRADING_SOURCE_DIR"] = str(Path(COURSE_DIR) / "source")
os.environ["MCT_GRADING_PROTECTED"] = os.pathsep.join([COURSE_DIR, str(_PRIVATE)])
os.environ["MCT_GRADING_SECRET_DIRS"] = os.pathsep.join([COURSE_DIR, str(_PRIVATE / "runtime")])
