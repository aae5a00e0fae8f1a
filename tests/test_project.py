"""The project's own promises: set-up files agree, the README leads with the two commands,
CI runs the test command, and the learner's JupyterLab hides nbgrader's instructor panels."""

import re
import subprocess
import sys
import tomllib

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
    seconds = re.search(r'MCT_CELL_TIMEOUT", "(\d+)"', config).group(1)
    assert f"per-cell time limit of {seconds} seconds" in (ROOT / "README.md").read_text()


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="checks the course's own .venv")
def test_learner_jupyterlab_hides_the_instructor_panels():
    listing = subprocess.run([str(BIN / "jupyter"), "labextension", "list"],
                             capture_output=True, text=True).stderr
    disabled = listing.split("Disabled extensions:", 1)[1]
    for panel in ("create-assignment", "formgrader", "course-list", "assignment-list", "menu"):
        assert f"@jupyter/nbgrader:{panel}" in disabled


def test_the_sandbox_hides_the_repository_also_from_a_git_worktree(tmp_path, monkeypatch):
    """In a worktree ``.git`` is a file naming the repository: the checkout (and its ``.git``) and the
    repository are hidden, and nothing binds them back (the history holds the solutions)."""
    from grading import sandbox
    repository = tmp_path / "repo" / ".git"
    (repository / "worktrees" / "part").mkdir(parents=True)
    (repository / "worktrees" / "part" / "commondir").write_text("../..\n")
    checkout = tmp_path / "part"
    checkout.mkdir()
    (checkout / ".git").write_text(f"gitdir: {repository / 'worktrees' / 'part'}\n")
    monkeypatch.setattr(sandbox, "ROOT", checkout)
    assert sandbox.git_paths() == [checkout / ".git", repository.resolve()]
    assert {checkout.resolve(), repository.resolve()} <= set(sandbox.inner_hidden_folders())
    command = sandbox.bwrap_command(["python"], str(tmp_path / "runtime" / "kernel.json"), None)
    for hidden in (checkout.resolve(), repository.resolve()):
        under_top = any(str(hidden).startswith(top + "/") for top in sandbox.TOP_HIDDEN)
        assert under_top or command[command.index(str(hidden)) - 1] == "--tmpfs", hidden
        bound_back = [command[i + 1] for i, word in enumerate(command[:-1]) if word in ("--ro-bind", "--bind")]
        assert not any(str(b) == str(hidden) or str(b).startswith(str(hidden) + "/") for b in bound_back
                       if not str(b).startswith(str(tmp_path / "runtime"))), (hidden, bound_back)
    monkeypatch.setattr(sandbox, "ROOT", tmp_path / "repo")
    assert sandbox.git_paths() == [tmp_path / "repo" / ".git"]
