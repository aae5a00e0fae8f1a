"""Start a grading kernel in a sandbox (the kernelspec ``mct-grading`` runs this module).

    python -m grading.sandbox -f {connection_file}

The kernel runs under Debian's ``bubblewrap`` as an unprivileged user (started by
root: a uid of its own, no account, no capabilities):

- the whole file system is read-only, and these are not there at all (empty
  folders): the course's checkout (its reference solutions, sources, helper
  package, tests and history) apart from the Python environment the kernel runs
  on, the course directory (the gradebook, other students' work), the grader's
  private folders (but for the kernel's own socket folder), ``/tmp``, ``/home``
  and ``/root`` apart from what Python itself needs;
- what the kernel may import of the course is its own tree (``grading/kernel_tree.py``):
  the helper library with the graded part's answers redacted, inert stand-ins for
  what only the visible tests use, and the harness; first on ``PYTHONPATH``;
- no network, no other process visible (own PID namespace), no environment
  from the grader (only what a kernel needs);
- the only writable place is a private ``/tmp`` that vanishes with the kernel;
  the notebook runs in an empty folder there, so nothing submitted beside it
  (a ``shared/`` package, a ``.py`` file) can shadow the course's modules;
- limits: address space, processes, file size, CPU time, and wall-clock time
  for the whole notebook (the kernel is killed after it).

``MCT_SANDBOX=off`` runs the kernel without bubblewrap (a learner grading
their own notebooks, or an instructor who trusts the class); every report of
such a run says so.  Without bubblewrap and without that opt-out, the kernel
refuses to start.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SANDBOX_ENV = "MCT_SANDBOX"
NOBODY = 65534
KERNEL_UIDS = (200_000, 100_000)  # first uid, how many: each kernel its own, so that limits per user
                                  # (processes) of one notebook never reach another's
INSIDE_CASES = "/tmp/mct/cases.json"
INSIDE_REVEAL = "/tmp/mct/reveal"
INSIDE_TREE = "/tmp/mct/course"

LIMITS = {  # resource -> (soft, hard); generous for a course notebook, tight for a bomb
    resource.RLIMIT_AS: int(os.environ.get("MCT_KERNEL_MEMORY", 6 * 2**30)),
    resource.RLIMIT_NPROC: 256,
    resource.RLIMIT_FSIZE: 200 * 2**20,
    resource.RLIMIT_CPU: int(os.environ.get("MCT_NOTEBOOK_SECONDS", 600)) * 2,
    resource.RLIMIT_CORE: 0,
}
PASSED_ENV = ("LANG", "LC_ALL", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "PYDEVD_DISABLE_FILE_VALIDATION")


def sandbox_wanted() -> bool:
    return os.environ.get(SANDBOX_ENV, "on").lower() not in ("off", "0", "no", "false")


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def missing_sandbox_message() -> str:
    return ("grading needs Debian's bubblewrap to sandbox the notebooks: `sudo apt-get install bubblewrap` "
            "(or, for a trusted class only, MCT_SANDBOX=off)")


def kernel_env(cases_file: str | None, home: str, tree: str | None = None) -> dict[str, str]:
    env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
    if tree:
        env["PYTHONPATH"] = tree
    env.update({
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": home, "IPYTHONDIR": f"{home}/.ipython", "MPLCONFIGDIR": f"{home}/.matplotlib",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "JUPYTER_RUNTIME_DIR": os.environ.get("JUPYTER_RUNTIME_DIR", f"{home}/runtime"),
        "MCT_GRADING": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
        "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1",
    })
    if cases_file:
        env["MCT_CASES_FILE"] = cases_file
    return env


def _reveal_dir(inside: bool) -> str | None:
    host = os.environ.get("MCT_REVEAL_DIR_HOST")
    return (INSIDE_REVEAL if inside else host) if host else None


TOP_HIDDEN = ("/home", "/root", "/tmp", "/var/tmp", "/run")


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def kept_folders() -> list[Path]:
    """What the kernel needs of the host: the Python it runs on (perhaps inside a hidden folder)."""
    return sorted({Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve()}, key=lambda p: len(str(p)))


def git_paths() -> list[Path]:
    """The repository, whose history holds the solutions: ``ROOT/.git``, and in a git worktree
    (where ``.git`` is a file naming the repository) that file and the repository's own folder."""
    git = ROOT / ".git"
    if not git.is_file():
        return [git]
    text = git.read_text(errors="replace")
    if not text.startswith("gitdir:"):
        return [git]
    gitdir = (ROOT / text.split(":", 1)[1].strip()).resolve()
    common = gitdir
    if (gitdir / "commondir").is_file():
        common = (gitdir / (gitdir / "commondir").read_text().strip()).resolve()
    return [git, common]


def inner_hidden_folders() -> list[Path]:
    """Folders (and files) the kernel must not see: the whole checkout, and a worktree's repository."""
    folders = [ROOT, *git_paths()]
    folders += [Path(os.environ[name]) for name in ("MCT_COURSE_DIR", "MCT_PRIVATE_DIR") if os.environ.get(name)]
    return [f.resolve() for f in folders if f.exists()]


def bwrap_command(kernel: list[str], connection_file: str, cases_file: str | None, uid: int = NOBODY) -> list[str]:
    """The bwrap command line (see the module docstring for what it hides and allows).

    Run by root, bwrap itself stays root so that it can put back what the kernel needs from
    folders nobody may enter (a Python under /root), and hands the kernel to ``nobody`` with
    ``setpriv`` (no capabilities left).  Run by anyone else, bwrap creates a user namespace and
    the kernel keeps that (unprivileged) user.
    """
    as_root = os.getuid() == 0
    runtime = Path(connection_file).resolve().parent
    namespaces = (["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
                  if as_root else ["--unshare-all"])
    command = [bwrap_path(), *namespaces, "--die-with-parent", "--new-session",
               "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    tops = [Path(top) for top in TOP_HIDDEN if Path(top).exists()]
    for top in tops:
        command += ["--perms", "1777", "--size", str(256 * 2**20), "--tmpfs", str(top)]
    kept, hidden = kept_folders(), inner_hidden_folders()

    def hide(folder: Path) -> list[str]:  # a file (a worktree's .git) behind an empty one, a folder behind a tmpfs
        return ["--ro-bind", "/dev/null", str(folder)] if folder.is_file() else ["--tmpfs", str(folder)]

    for folder in hidden:  # the checkout, the course directory, the grader's private folder
        if not any(_under(folder, top) for top in tops):
            command += hide(folder)
    for folder in kept:  # put back the Python the kernel runs on, from inside whatever hid it
        if any(_under(folder, other) for other in [*tops, *hidden]):
            command += ["--ro-bind", str(folder), str(folder)]
    for folder in hidden:  # and hide again what lies inside it
        if any(_under(folder, k) and folder != k for k in kept):
            command += hide(folder)
    for top in tops:  # the runtime folder keeps its path (the connection file names it): make its parents
        if _under(runtime, top):
            for parent in reversed([p for p in runtime.parents if _under(p, top) and p != top]):
                command += ["--perms", "0755", "--dir", str(parent)]
    command += ["--bind", str(runtime), str(runtime), "--perms", "1777", "--dir", "/tmp/work"]
    if cases_file:
        command += ["--perms", "0755", "--dir", str(Path(INSIDE_CASES).parent), "--ro-bind", cases_file, INSIDE_CASES]
    tree = os.environ.get("MCT_KERNEL_TREE_HOST")
    if tree:  # the modules the kernel may import: the redacted library, stand-ins, the harness
        command += ["--ro-bind", tree, INSIDE_TREE]
    reveal = os.environ.get("MCT_REVEAL_DIR_HOST")
    if reveal:
        command += ["--ro-bind", reveal, INSIDE_REVEAL]
    command += ["--clearenv"]
    for name, value in {**kernel_env(INSIDE_CASES if cases_file else None, "/tmp", INSIDE_TREE if tree else None),
                        **({"MCT_REVEAL_DIR": INSIDE_REVEAL} if reveal else {})}.items():
        command += ["--setenv", name, value]
    command += ["--chdir", "/tmp/work"]
    if as_root:
        command += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--",
                    shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}",
                    "--clear-groups", "--bounding-set=-all", "--inh-caps=-all"]
    else:
        command += ["--"]
    return command + kernel


def _apply_limits() -> None:
    for limit, value in LIMITS.items():
        soft, hard = resource.getrlimit(limit)
        cap = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(limit, (cap, cap))


def kernel_uid() -> int:
    """An unprivileged uid of this kernel's own (no account has it; nothing on disk is its)."""
    first, count = KERNEL_UIDS
    return first + int.from_bytes(os.urandom(4), "little") % count


def _hand_to_nobody(connection_file: str, uid: int) -> None:
    """As root, the kernel runs as an unprivileged uid of its own: it needs its connection file and
    socket folder, which must be the grader's private runtime folder (never a shared one such as /tmp)."""
    runtime = Path(connection_file).resolve().parent
    private = Path(os.environ.get("MCT_PRIVATE_DIR", "/nonexistent")).resolve()
    if runtime.parent != private / "runtime":
        raise SystemExit(f"grading.sandbox: the connection file must be in a folder of its own in "
                         f"{private / 'runtime'}, not in {runtime}")
    os.chown(connection_file, uid, uid)
    os.chown(runtime, uid, uid)


def main(argv: list[str]) -> None:
    if "-f" not in argv:
        raise SystemExit("usage: python -m grading.sandbox -f CONNECTION_FILE")
    connection_file = argv[argv.index("-f") + 1]
    kernel = [sys.executable, "-m", "ipykernel_launcher", *argv]
    cases_file = os.environ.get("MCT_CASES_FILE_HOST")
    seconds = os.environ.get("MCT_NOTEBOOK_SECONDS", "600")
    if not sandbox_wanted():
        home = os.environ.get("MCT_PRIVATE_DIR") or "/tmp"
        reveal = _reveal_dir(inside=False)
        os.execve(sys.executable, kernel, {**kernel_env(cases_file, home, os.environ.get("MCT_KERNEL_TREE_HOST")),
                                           **({"MCT_REVEAL_DIR": reveal} if reveal else {}),
                                           "JUPYTER_RUNTIME_DIR": str(Path(connection_file).parent)})
    if bwrap_path() is None:
        print(missing_sandbox_message(), file=sys.stderr)
        raise SystemExit(3)
    uid = kernel_uid() if os.getuid() == 0 else os.getuid()
    if os.getuid() == 0:
        _hand_to_nobody(connection_file, uid)
    command = bwrap_command(kernel, connection_file, cases_file, uid)
    _apply_limits()
    timeout = shutil.which("timeout")
    if timeout:  # outside the sandbox, so the notebook cannot kill it
        command = [timeout, "--signal=KILL", seconds, *command]
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
