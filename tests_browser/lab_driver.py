"""Drive JupyterLab in Debian's headless Chromium (Playwright, sync API) and check what a learner sees.

The checks live here so that the real notebooks and the deliberately broken copy
in ``test_browser.py`` go through the very same functions:

- ``check_math`` / ``assert_math_renders``: every math expression of every markdown cell is typeset by
  MathJax (as many ``mjx-container`` elements as the cell's source has
  expressions), without TeX errors (``mjx-merror``), without undefined macros
  (red ``mtext``) and without leftover ``$`` delimiters in the rendered text.
- ``run_all``: "Run All Cells" as a learner runs it, waiting until the kernel is
  idle and the run has finished or stopped at an error.
- ``outputs``: what the run produced, read from JupyterLab's own cell models.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = Path("/usr/bin/chromium")
# Without the networking flags Chromium tries (and fails) to reach the internet.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 900}
SCREENSHOTS = ROOT / "build" / "browser-screenshots"
STUB_MESSAGE = "Not implemented yet: replace this line with your code."

# One row per notebook checked, printed at the end of the session by conftest.py.
RESULTS: list[dict] = []


# ---------------------------------------------------------------- JupyterLab servers

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_lab_settings(settings_dir: Path, *, autosave: bool = True) -> None:
    """User settings for a test server: render every cell, no news pop-up, optionally no autosave."""
    settings = {
        # JupyterLab virtualises off-screen cells: their math would never be typeset or checked.
        "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    }
    if not autosave:
        settings["@jupyterlab/docmanager-extension/plugin"] = {"autosave": False}
    for name, values in settings.items():
        path = settings_dir / f"{name}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values))


def isolated_env(scratch: Path, *, autosave: bool = True) -> dict[str, str]:
    """The environment of a test server: its own config, settings, workspaces and progress file.

    Nothing the learner keeps (``~/.jupyter``, ``.progress.json``) is read or written.
    """
    dirs = {name: scratch / name for name in ("config", "settings", "workspaces", "runtime")}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    write_lab_settings(dirs["settings"], autosave=autosave)
    env = dict(os.environ)
    for name in ("MCT_GRADING", "MAKEFLAGS", "MFLAGS", "MAKELEVEL"):
        env.pop(name, None)
    env.update({
        "JUPYTER_CONFIG_DIR": str(dirs["config"]),
        "JUPYTERLAB_SETTINGS_DIR": str(dirs["settings"]),
        "JUPYTERLAB_WORKSPACES_DIR": str(dirs["workspaces"]),
        "JUPYTER_RUNTIME_DIR": str(dirs["runtime"]),
        # The environment's own python3 kernel, whatever the user's home holds.
        "JUPYTER_PATH": str(Path(sys.prefix) / "share" / "jupyter"),
        "MCT_PROGRESS_FILE": str(scratch / "progress.json"),
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    })
    return env


def copy_course(target: Path) -> Path:
    """A scratch copy of what the notebooks need (autosave and runs write into it).

    The notebooks import the ``shared`` package, installed editable into .venv, so
    the notebooks and solutions folders are all a copy needs.
    """
    ignore = shutil.ignore_patterns(".backup", ".ipynb_checkpoints", "__pycache__")
    for folder in ("notebooks", "solutions"):
        shutil.copytree(ROOT / folder, target / folder, ignore=ignore)
    return target


class LabServer:
    """A JupyterLab process in its own process group, stopped by signalling the whole group."""

    def __init__(self, command: list[str], *, env: dict[str, str], cwd: Path, port: int,
                 token: str, log: Path):
        self.port, self.token, self.log = port, token, log
        self.base = f"http://127.0.0.1:{port}"
        self._log_handle = open(log, "wb")
        self.process = subprocess.Popen(command, env=env, cwd=cwd, stdout=self._log_handle,
                                        stderr=subprocess.STDOUT, start_new_session=True)

    def url(self, path: str, **query: str) -> str:
        params = dict(query, token=self.token) if self.token else query
        encoded = "&".join(f"{k}={v}" if v else k for k, v in params.items())
        return f"{self.base}/{path.lstrip('/')}" + (f"?{encoded}" if encoded else "")

    def status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(self.url(path), timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code
        except (urllib.error.URLError, OSError):
            return 0

    def first_answer(self, path: str, timeout: float = 90) -> int:
        """The status of ``path`` once the server answers at all (0 if it never does): jupyter_server prints its URL
        before it listens, since it binds its port in a callback of the event loop it starts after printing."""
        deadline = time.monotonic() + timeout
        while (status := self.status(path)) == 0 and time.monotonic() < deadline and self.process.poll() is None:
            time.sleep(0.2)
        return status

    def request(self, path: str, data: bytes | None = None, timeout: float = 300) -> tuple[int, str]:
        """GET ``path``, or POST ``data`` to it, with the token in the header as JupyterLab's pages send it
        (nbgrader's Validate button among them): the status and the body (none for an HTTP error)."""
        request = urllib.request.Request(f"{self.base}/{path}", data=data,
                                         headers={"Authorization": f"token {self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, ""

    def wait_until_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.process.returncode}:\n{self.log_tail()}")
            if self.status("api/status") == 200:
                return
            time.sleep(0.3)
        raise RuntimeError(f"JupyterLab did not answer /api/status within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        self._log_handle.flush()
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        """SIGTERM to the process group (make, jupyter; the server shuts its kernels down), then SIGKILL."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
            except ProcessLookupError:
                pass
        self._log_handle.close()


def start_test_lab(root: Path, scratch: Path) -> LabServer:
    """JupyterLab on ``root`` for tests: localhost, a free port, a token, the app exposed to scripts."""
    port, token = free_port(), "mct-browser-test"
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
               "--allow-root", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
               "--LabApp.news_url=None",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
               "--expose-app-in-browser"]
    server = LabServer(command, env=isolated_env(scratch), cwd=root, port=port, token=token,
                       log=scratch / "jupyterlab.log")
    try:
        server.wait_until_ready()
    except BaseException:
        server.stop()
        raise
    return server


def start_make_lab(scratch: Path, token: str = "") -> LabServer:
    """`make lab` as the learner starts it, on a free port, with scratch Jupyter settings and progress file
    (no autosave: a notebook of the course a test opens is never written); LAB_TOKEN=``token``, or without
    one the random token the server makes up. Returned at once: wait_until_ready (or serving) waits for it."""
    port = free_port()
    command = ["make", "--no-print-directory", "lab", f"LAB_ARGS=--no-browser --port={port}"]
    if token:
        command.append(f"LAB_TOKEN={token}")
    return LabServer(command, env=isolated_env(scratch, autosave=False), cwd=ROOT, port=port, token=token,
                     log=scratch / "make-lab.log")


@contextmanager
def serving(server: LabServer):
    """The server once it answers; stopped when the block ends, and at once when it never answers."""
    try:
        server.wait_until_ready()
        yield server
    finally:
        server.stop()


# ---------------------------------------------------------------- notebooks in the page
#
# Reading the page goes through the DOM only (the notebook shown, its cells in order:
# with windowingMode "none" every cell is in the DOM), so the same checks work on the
# learner's `make lab`, whose JupyterLab does not expose its app object. Acting on the
# notebook (run all, clear outputs) goes through JupyterLab's commands, on test servers.

_DOM = """
const notebook = () => document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook');
const cells = () => notebook() ? [...notebook().querySelectorAll(':scope .jp-Cell')] : [];
"""


def in_page(function: str) -> str:
    """A page function that sees the helpers ``notebook()`` and ``cells()``."""
    return f"(arg) => {{ {_DOM} return ({function})(arg); }}"


_OPENED = """(expected) => {
  const tab = document.querySelector('.lm-DockPanel-tabBar .lm-TabBar-tab.lm-mod-current');
  const statusbar = document.querySelector('#jp-main-statusbar');
  return !!tab && tab.innerText.trim() === expected.name && cells().length === expected.cells
         && cells().filter(c => c.classList.contains('jp-MarkdownCell'))
                   .every(c => c.querySelector('.jp-RenderedMarkdown'))
         && !!statusbar && statusbar.innerText.includes('| Idle');
}"""


def open_notebook(page, server: LabServer, path: str, notebook: dict, *, reset: bool = True,
                  timeout: float = 60) -> None:
    """Open ``path`` (relative to the server's root) in JupyterLab; wait for its cells and idle kernel."""
    page.goto(server.url(f"lab/tree/{path}", **({"reset": ""} if reset else {})))
    page.wait_for_function(in_page(_OPENED), arg={"name": Path(path).name, "cells": len(notebook["cells"])},
                           timeout=timeout * 1000, polling=250)


def hide_side_bar(page) -> None:
    """Collapse the side bar so that the notebook fills the window (for screenshots)."""
    page.evaluate("() => window.jupyterapp.shell.collapseLeft()")


def clear_outputs(page) -> None:
    """Start from a notebook without outputs, so that every output seen comes from this run."""
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:clear-all-cell-outputs')")
    page.wait_for_function("""() => window.jupyterapp.shell.currentWidget.content.widgets
        .every(w => w.model.type !== 'code' || (w.model.outputs.length === 0 && !w.model.executionCount))""")


_RUN_FINISHED = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
  if (!kernel || kernel.status !== 'idle') return false;
  const code = panel.content.widgets.filter(w => w.model.type === 'code');
  const prompt = w => (w.node.querySelector('.jp-InputPrompt') || {textContent: ''}).textContent;
  if (code.some(w => prompt(w).includes('*'))) return false;
  const failed = code.findIndex(w => { const o = w.model.outputs;
    for (let j = 0; j < o.length; j++) if (o.get(j).type === 'error') return true; return false; });
  const last = failed >= 0 ? failed : code.length - 1;
  return code.slice(0, last + 1).every(w => !!w.model.executionCount);
}"""


def run_all(page, *, timeout: float = 120) -> None:
    """Run > Run All Cells; wait until every cell ran, or the run stopped at the first error."""
    page.evaluate("() => { window.jupyterapp.commands.execute('notebook:run-all-cells'); }")
    page.wait_for_function(_RUN_FINISHED, timeout=timeout * 1000, polling=250)


@dataclass
class CellOutputs:
    index: int
    execution_count: int | None
    outputs: list[dict] = field(default_factory=list)

    def errors(self) -> list[dict]:
        return [o for o in self.outputs if o.get("output_type") == "error"]


def outputs(page) -> list[CellOutputs]:
    """Every code cell's execution count and outputs (nbformat JSON), from JupyterLab's models."""
    raw = page.evaluate("""() => window.jupyterapp.shell.currentWidget.content.widgets
        .map((w, i) => [i, w.model]).filter(([i, m]) => m.type === 'code')
        .map(([i, m]) => ({index: i, execution_count: m.executionCount,
                           outputs: Array.from({length: m.outputs.length}, (_, j) => m.outputs.get(j).toJSON())}))""")
    return [CellOutputs(**cell) for cell in raw]


def rendered_outputs(page) -> dict:
    """What the output areas show: images (loaded), stderr/error boxes, the progress panel."""
    return page.evaluate(in_page("""() => {
      const areas = [...notebook().querySelectorAll('.jp-OutputArea-output')];
      const images = [...notebook().querySelectorAll('.jp-OutputArea-output img')];
      return {
        images: images.length,
        images_loaded: images.filter(img => img.complete && img.naturalWidth > 0).length,
        stderr: areas.filter(a => a.dataset.mimeType === 'application/vnd.jupyter.stderr').map(a => a.innerText),
        progress_panels: notebook().querySelectorAll('.jp-OutputArea-output .mct-progress').length,
      };
    }"""))


def shut_down_kernel(page) -> None:
    page.evaluate("async () => { await window.jupyterapp.shell.currentWidget.sessionContext.shutdown(); }")


def scroll_to_cell(page, index: int, *, block: str = "start") -> None:
    page.evaluate(in_page("([i, block]) => cells()[i].scrollIntoView({block})"), [index, block])
    page.wait_for_timeout(300)


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path


# ---------------------------------------------------------------- math

_FENCED_CODE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"(`+)(?!`).+?(?<!`)\1(?!`)", re.DOTALL)
# $$...$$ first, then $...$; an escaped \$ is text; math does not run across a blank line.
_MATH = re.compile(r"(?<!\\)\$\$(?:(?!\n\s*\n).)+?(?<!\\)\$\$|(?<!\\)\$(?:(?!\n\s*\n)[^$])+?(?<!\\)\$", re.DOTALL)


def math_in_markdown(source: str) -> list[str]:
    """The TeX expressions of a markdown cell, as written (code spans and blocks excluded)."""
    text = _INLINE_CODE.sub(" ", _FENCED_CODE.sub(" ", source))
    return _MATH.findall(text)


def expected_math(notebook: dict) -> dict[int, int]:
    """Cell index -> number of math expressions, for every markdown cell that has some."""
    counts = {}
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] == "markdown":
            found = math_in_markdown("".join(cell["source"]))
            if found:
                counts[index] = len(found)
    return counts


_MATH_IN_PAGE = """() => {
  const found = [];
  cells().forEach((cell, index) => {
    if (!cell.classList.contains('jp-MarkdownCell')) return;
    const node = cell.querySelector('.jp-RenderedMarkdown');
    if (!node) { found.push({index, rendered: false}); return; }
    const text = node.cloneNode(true);
    text.querySelectorAll('mjx-container, code, pre').forEach(e => e.remove());
    found.push({
      index, rendered: true,
      typeset: node.querySelectorAll('mjx-container').length,
      errors: [...node.querySelectorAll('mjx-merror')].map(e => e.getAttribute('data-mjx-error') || e.textContent),
      undefined: [...node.querySelectorAll('mjx-assistive-mml [mathcolor="red"]')].map(e => e.textContent),
      leftover: text.textContent.includes('$') ? text.textContent : null,
    });
  });
  return found;
}"""


@dataclass
class MathReport:
    expressions: int  # typeset in the page
    expected: int     # written in the notebook's markdown
    problems: list[str]


def check_math(page, notebook: dict, *, settle: float = 1.5, timeout: float = 30) -> MathReport:
    """Typeset math of the open notebook against its source; every problem named with its cell.

    MathJax typesets asynchronously (and is loaded on first use), so the page is read
    until every expression of the source is typeset, or, once MathJax has typeset
    something, until nothing has changed for ``settle`` seconds.
    """
    expected = expected_math(notebook)
    total = sum(expected.values())
    deadline, last, stable_since = time.monotonic() + timeout, None, time.monotonic()
    while True:
        cells = page.evaluate(in_page(_MATH_IN_PAGE))
        typeset = sum(c.get("typeset", 0) for c in cells)
        snapshot = json.dumps(cells, sort_keys=True)
        if snapshot != last:
            last, stable_since = snapshot, time.monotonic()
        settled = (typeset > 0 or total == 0) and time.monotonic() - stable_since >= settle
        if (typeset == total and all(c["rendered"] for c in cells)) or settled or time.monotonic() > deadline:
            break
        time.sleep(0.2)

    problems = []
    for cell in cells:
        where = f"markdown cell {cell['index']}"
        if not cell["rendered"]:
            problems.append(f"{where}: not rendered")
            continue
        wanted = expected.get(cell["index"], 0)
        if cell["typeset"] != wanted:
            problems.append(f"{where}: {wanted} math expressions in the source, {cell['typeset']} typeset")
        problems += [f"{where}: TeX error: {message}" for message in cell["errors"]]
        problems += [f"{where}: undefined macro {macro}" for macro in cell["undefined"]]
        if cell["leftover"] is not None:
            at = cell["leftover"].index("$")
            excerpt = " ".join(cell["leftover"][max(0, at - 40):at + 40].split())
            problems.append(f"{where}: '$' left in the rendered text (math not typeset): …{excerpt}…")
    return MathReport(expressions=typeset, expected=total, problems=problems)


def assert_math_renders(page, notebook: dict) -> MathReport:
    """The one math assertion, for the real notebooks and for the broken copy alike."""
    report = check_math(page, notebook)
    assert not report.problems, "math that does not render:\n" + "\n".join(report.problems)
    return report


# ---------------------------------------------------------------- expectations from the .ipynb file

def load(path: Path) -> dict:
    return json.loads(path.read_text())


def count_images(notebook: dict) -> int:
    """The figures a solved notebook shows: its image/png outputs."""
    return sum("image/png" in output.get("data", {})
               for cell in notebook["cells"] if cell["cell_type"] == "code"
               for output in cell.get("outputs", []))
