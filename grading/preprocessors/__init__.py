"""The judge inside nbgrader: preprocessors around nbgrader's ``Execute``.

``PrepareCases`` (before execution) draws the cases of every lesson of the
notebook's part and writes their inputs where the grading kernel will find
them.  ``CheckRules`` (before execution) reads every cell the learner wrote or
changed against the rules for graded code (:mod:`grading.rules`); a cell that
breaks them is not run.  ``SandboxedExecute`` runs the notebook and takes each
lesson's answers as they arrive, from the message itself: only a plain
``display_data`` message of the lesson's own test cell, while that cell runs,
counts (an update of an earlier display, a message from another cell or a second
one are refused).  ``JudgeLessons`` (after execution) judges the answers
(:mod:`grading.judge`), applies the rules' verdicts, and replaces each test cell's
outputs with its verdict; it caps every other cell's output, so a flood of
printing cannot make a huge page.  ``SandboxKernelManager`` starts each kernel in the
sandbox (:mod:`grading.sandbox`), the next notebook's launched while a notebook runs
(:mod:`.spare`).  For the feedback page, ``SanitizeFeedback`` keeps
anything of the notebook from running in a browser, and ``LearnerFeedback`` puts the
grader's notes in the learner's words.  ``SanitizeSubmission`` (last of the autograde) does the same for
the autograded notebook, which the formgrader shows (one policy for both: :mod:`grading.inert`).

One module per preprocessor, as nbgrader's own ``nbgrader/preprocessors/`` has them, one for
the kernel manager and one for the kernel launched ahead; each class is imported here, so that a
configuration names it ``grading.preprocessors.<Name>`` (``autograde/nbgrader_config.py``).
"""

from .checkrules import CheckRules
from .judgelessons import JudgeLessons
from .kernelmanager import SandboxKernelClient, SandboxKernelManager
from .learnerfeedback import LearnerFeedback
from .preparecases import PrepareCases
from .sandboxedexecute import SandboxedExecute
from .sanitizefeedback import SanitizeFeedback
from .sanitizesubmission import SanitizeSubmission

__all__ = [
    "PrepareCases",
    "CheckRules",
    "SandboxedExecute",
    "JudgeLessons",
    "SanitizeFeedback",
    "SanitizeSubmission",
    "LearnerFeedback",
    "SandboxKernelManager",
    "SandboxKernelClient",
]
