"""nbgrader configuration of the course (the instructor's side, and `make grade`).

Grading is split in two (see grading/): the notebook runs in a sandboxed kernel
that only computes (grading.sandbox, grading.harness); the points are decided
here, in nbgrader's process, by the judge (grading.preprocessors), which draws
the hidden cases itself and compares the kernel's answers with the reference
solutions.  Grading depends neither on the current directory nor on anyone's
home folder.
"""

import atexit
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from grading.protocol import CELL_TIMEOUT_ENV, COURSE_DIR_ENV, PRIVATE_DIR_ENV, PRIVATE_DIR_PID_ENV

c = get_config()  # noqa: F821  (provided by traitlets when nbgrader loads this file)

# `nbgrader validate` typed in this folder or in another course directory (whose nbgrader_config.py loads this
# file) gives the grader's verdicts, as in the course's root folder (grading/validate.py), not nbgrader's own
# validator's, which runs only the visible tests.
from grading.validate import use_course_validator  # noqa: E402

use_course_validator()

HERE = Path(__file__).resolve().parent
# The course directory: the one the instructor's tools name, or whose own nbgrader_config.py names itself before
# it loads this file (grading/course.py), in MCT_COURSE_DIR; else this folder.
COURSE_DIR = os.environ.get(COURSE_DIR_ENV) or str(HERE)
c.CourseDirectory.root = COURSE_DIR
c.CourseDirectory.course_id = "memory-constrained-trainer"

# What the learner's copy shows in place of a solution.
c.ClearSolutions.code_stub = {
    "python": '# YOUR CODE HERE\nraise NotImplementedError("Not implemented yet: replace this line with your code.")'
}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"

# Per-cell time limit, in seconds: an endless loop at the top level of a cell is interrupted
# and the rest of the notebook still runs.  (Each lesson's hidden cases have their own limit,
# and the whole notebook MCT_NOTEBOOK_SECONDS, enforced by the sandbox.)
c.Execute.timeout = int(os.environ.get(CELL_TIMEOUT_ENV, "30"))  # MCT_CELL_TIMEOUT
c.Execute.interrupt_on_timeout = True
# A graded kernel is killed once the notebook has run (its sandbox and its /tmp go with it): waiting for it to
# shut down by itself would cost a second or more a notebook.
c.Execute.shutdown_kernel = "immediate"
# A flood of output is capped by the judge; it must not turn into a failed notebook.
c.Execute.raise_on_iopub_timeout = False

# A submission too large or nested too deeply is refused before it is read (grading/submission_limits.py).
c.Autograde.exporter_class = "grading.submission_limits.BoundedNotebookExporter"

# A deleted test cell is put back from the gradebook and graded, not scored None.
c.OverwriteCells.add_missing_cells = True
# Without nbgrader's checksum warning for every test cell of every notebook (hidden tests make the release's
# checksums differ from the gradebook's): `make autograde` names what a submission changed, against the release.
from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, DeduplicateIds, OverwriteKernelspec  # noqa: E402

c.Autograde.sanitize_preprocessors = ["grading.preprocessors.overwritecells.ReadableCellMetadata", ClearOutput,
                                      DeduplicateIds, OverwriteKernelspec,
                                      "grading.preprocessors.overwritecells.CourseOverwriteCells", CheckCellMetadata]

from nbconvert.preprocessors import ClearMetadataPreprocessor  # noqa: E402
from nbgrader.preprocessors import AssignLatePenalties, IgnorePattern, LimitOutput, SaveAutoGrades  # noqa: E402

from grading.preprocessors import (CheckRules, JudgeLessons, PrepareCases, SandboxedExecute,  # noqa: E402
                                   SanitizeSubmission)

c.Autograde.autograde_preprocessors = [
    PrepareCases, CheckRules, SandboxedExecute, JudgeLessons, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
    SaveAutoGrades, AssignLatePenalties, CheckCellMetadata,
    # Last: the autograded notebook, which the formgrader renders in the instructor's JupyterLab, runs nothing
    # there (the same policy as the feedback pages', grading/inert.py); nothing graded changes.
    SanitizeSubmission,
]

# Feedback shows no hidden test (nbgrader#917, #1363) and runs no script from a notebook.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "grading.preprocessors.SanitizeFeedback",
    # In the learner's words, with the gradebook's scores (an instructor's included) and the progress panel drawn
    # from them; after SanitizeFeedback, which would drop the panel's HTML (the grader's own, not the notebook's).
    "grading.preprocessors.LearnerFeedback",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]
c.HTMLExporter.sanitize_html = True
# Math in feedback is MathML written here (grading/feedback_math.py), not MathJax from a CDN: a learner reads
# the page offline, and nothing in it runs.  The same filter draws the formgrader's view of a submission, where
# MathJax from a CDN would be a script from outside in the instructor's logged-in session.  The course's template
# folder comes first, so its feedback/mathjax.html.j2 and formgrade/mathjax.html.j2 replace the loader in
# nbgrader's two templates.
import nbgrader  # noqa: E402

from grading import feedback_math  # noqa: E402

c.HTMLExporter.extra_template_basedirs = [
    str(feedback_math.TEMPLATES),
    str(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates")]
c.HTMLExporter.filters = {"markdown2html": "grading.feedback_math.markdown2html",
                          # the grader's notes in the words of the feedback page, for the formgrader's view too
                          "plain_words": "grading.feedback_text.plain_words"}
# The page is the template's output, without nbconvert's second pass over it (grading/feedback_page.py).
c.GenerateFeedback.exporter_class = "grading.feedback_page.FeedbackExporter"
# nbgrader's feedback template made for a learner: lessons named, long lines wrapped (feedback/course.html.j2).
c.FeedbackExporter.template_file = "course.html.j2"
# The formgrader's view of a submission: nbgrader's formgrade template with the verdicts whole, line by line and in
# the feedback page's words (formgrade/course.html.j2; the formgrader's exporter is a plain HTMLExporter).
c.HTMLExporter.template_file = "course.html.j2"
# Its template writes the student's id and names raw: they are made text first (grading/preprocessors/escapepeople.py).
c.HTMLExporter.preprocessors = ["grading.preprocessors.escapepeople.EscapePeople"]

# Private folders of this nbgrader process (nbgrader reads this file several times: once is
# enough): the kernelspec that starts kernels in the sandbox, and the kernels' socket folder.
# Never another process's: a folder named in an inherited environment (two grading runs side by
# side, started by one process that had read this file) is shared no more; its kernelspec was
# rewritten by one run while the other read it, and a notebook failed on an empty kernel.json.
if (os.environ.get(PRIVATE_DIR_PID_ENV) != str(os.getpid()) or PRIVATE_DIR_ENV not in os.environ
        or not Path(os.environ[PRIVATE_DIR_ENV]).is_dir()):
    _private = Path(tempfile.mkdtemp(prefix="mct-grading-"))
    atexit.register(shutil.rmtree, _private, True)
    os.environ[PRIVATE_DIR_ENV], os.environ[PRIVATE_DIR_PID_ENV] = str(_private), str(os.getpid())
PRIVATE = Path(os.environ[PRIVATE_DIR_ENV])
_spec_dir = PRIVATE / "share" / "jupyter" / "kernels" / "mct-grading"
_spec_dir.mkdir(parents=True, exist_ok=True)
_spec = json.dumps({
    "argv": [sys.executable, "-m", "grading.sandbox", "-f", "{connection_file}"],
    "display_name": "Python 3 (sandboxed grading)", "language": "python",
    # An interrupt (a cell past its time limit) is a message the kernel turns into SIGINT for itself:
    # a signal to the launcher's process group would reach bubblewrap, not the sandboxed kernel.
    "interrupt_mode": "message"})
_written = _spec_dir / f".kernel.json.{os.getpid()}"  # whole or not at all: a reader never sees it half written
_written.write_text(_spec)
os.replace(_written, _spec_dir / "kernel.json")
(PRIVATE / "runtime").mkdir(exist_ok=True)
os.environ["JUPYTER_PATH"] = os.pathsep.join([str(PRIVATE / "share" / "jupyter"),
                                              str(Path(sys.prefix) / "share" / "jupyter")])
os.environ["JUPYTER_RUNTIME_DIR"] = str(PRIVATE / "runtime")
os.environ[COURSE_DIR_ENV] = COURSE_DIR
c.Execute.kernel_name = "mct-grading"
# Kernels talk over Unix sockets inside their own sandbox's /tmp (the grader reaches them through
# /proc/<pid>/root; grading.preprocessors.SandboxKernelManager): no TCP port that two parallel grading
# runs could both pick, none reachable from a sandbox without a network, and no host folder the kernel
# can write to.
c.Execute.kernel_manager_class = "grading.preprocessors.SandboxKernelManager"
c.KernelManager.transport = "ipc"

# The instructor's own settings for this course directory (autograde/) and no other: a late penalty, say, in
# autograde/instructor_config.py, which git does not track.  Another course directory keeps its own below the
# block of its nbgrader_config.py; neither reaches the other, nor `make grade` and the Validate button.
OWN_SETTINGS = HERE / "instructor_config.py"
if Path(COURSE_DIR).resolve() == HERE and OWN_SETTINGS.is_file():
    load_subconfig(str(OWN_SETTINGS))  # noqa: F821  (provided by traitlets when nbgrader loads this file)
