"""The project's own promises: set-up files agree, the README leads with the two commands,
CI runs the test command, and the learner's JupyterLab hides nbgrader's instructor panels."""

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from course import BIN, ROOT


def test_readme_starts_with_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    first_block = readme.split("```")[1]
    assert "make lab" in first_block and "make test" in first_block
    for section in ("## For learners", "## For instructors", "## For maintainers"):
        assert section in readme


def test_ci_runs_the_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_makefile_has_every_documented_target():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("lab", "test", "build", "progress"):
        assert re.search(rf"^{target}:", makefile, re.MULTILINE), target


def _names(requirements):
    return {re.split(r"[<>=!\[ ]", r, maxsplit=1)[0].lower(): r.replace(" ", "") for r in requirements}


def test_environment_yml_lists_the_same_packages_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = _names(project["dependencies"] + project["optional-dependencies"]["dev"])
    dependencies = (ROOT / "environment.yml").read_text().split("dependencies:", 1)[1].splitlines()
    conda = _names(line.strip()[2:] for line in dependencies
                   if line.startswith("  - ") and not line.strip()[2:].startswith(("python", "pip")))
    assert conda == wanted


def test_readme_states_the_grading_time_limit_of_the_config():
    config = (ROOT / "autograde" / "nbgrader_config.py").read_text()
    seconds = re.search(r'CELL_TIMEOUT_ENV, "(\d+)"', config).group(1)
    assert f"per-cell time limit of {seconds} seconds" in (ROOT / "README.md").read_text()


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="checks the course's own .venv")
def test_learner_jupyterlab_hides_the_instructor_panels():
    listing = subprocess.run([str(BIN / "jupyter"), "labextension", "list"],
                             capture_output=True, text=True).stderr
    disabled = listing.split("Disabled extensions:", 1)[1]
    for panel in ("create-assignment", "formgrader", "course-list", "assignment-list", "menu"):
        assert f"@jupyter/nbgrader:{panel}" in disabled


def test_the_sandbox_shows_only_an_allow_list_of_the_host(tmp_path):
    """What the kernel sees of the host is bound in one by one: the system's folders, the Python it runs on,
    and the grader's files for it; nothing of the checkout but the virtual environment (its sources, its
    solutions, its history), no home folder, no course directory."""
    from grading import protocol, sandbox
    connection = tmp_path / "private" / "kernel.json"
    command = sandbox.bwrap_command(["python"], str(connection), None)
    assert command.index("--") > command.index("--remount-ro")
    pairs = [(command[i + 1], command[i + 2]) for i, word in enumerate(command) if word in ("--ro-bind", "--bind")]
    assert not [word for word in command if word == "--bind"], "nothing of the host is writable by the kernel"
    allowed = [Path(p) for p in sandbox.SYSTEM + sandbox.SYSTEM_FILES] + sandbox.python_folders()
    for source, target in pairs:
        if source == str(connection):
            assert target == protocol.INSIDE_CONNECTION
            continue
        assert any(Path(source) == a or a in Path(source).parents for a in allowed), source
        assert source == target, (source, target)
    venv = Path(sys.prefix).resolve()
    for source, _ in pairs:
        inside_checkout = Path(source) == ROOT or ROOT in Path(source).parents
        assert not inside_checkout or Path(source) == venv or venv in Path(source).parents, source
        assert Path(source) not in ROOT.parents, source
        assert not source.startswith(("/home", "/srv")) or Path(source) in sandbox.python_folders(), source


def test_make_lab_never_puts_its_token_on_a_command_line(tmp_path):
    """Any user of the machine can read a process's command line (/proc/<pid>/cmdline): the token goes
    to JupyterLab through its environment."""
    shown = subprocess.run(["make", "--no-print-directory", "-n", "-o", ".venv/.installed", "lab",
                            "LAB_TOKEN=mct-secret-token-42"], cwd=ROOT, capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "jupyter lab" in shown.stdout and "mct-secret-token-42" not in shown.stdout, shown.stdout
    (tmp_path / "jupyter").write_text("#!/bin/sh\nenv\n")  # a JupyterLab that shows its environment
    (tmp_path / "jupyter").chmod(0o755)
    exported = subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", "lab",
                               "LAB_TOKEN=mct-secret-token-42", f"BIN={tmp_path}"],
                              cwd=ROOT, capture_output=True, text=True)
    assert "\nJUPYTER_TOKEN=mct-secret-token-42\n" in exported.stdout, exported.stdout[-2000:]
