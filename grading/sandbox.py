"""Start a grading kernel in a sandbox (the kernelspec ``mct-grading`` runs this module).

    python -m grading.sandbox -f {connection_file}

The kernel runs under Debian's ``bubblewrap``, an operating-system boundary built
as an allow-list: it sees only what it needs to run, and nothing else of the host.

- **What it sees**, read-only: the system's programs and libraries (``/usr``, the
  ``/lib`` and ``/bin`` links, the dynamic linker's cache and the time zone), the
  Python it runs on (its installation and the course's virtual environment, wherever
  they live: under ``/root``, a home folder, ``/opt``), its own tree of the course's
  modules (``grading/kernel_tree.py``: the helper library with the graded part's
  answers redacted, inert stand-ins for what only the visible tests use, the
  harness), its cases, and the connection file.  Not the course's checkout, not
  the course directory (other students' work, the gradebook), not another clone,
  not anyone's home, not ``/etc``, ``/var`` or ``/srv``.
- **Where it writes**: only its own ``/tmp``, a tmpfs of bounded size that vanishes
  with it.  Its sockets are there too: the grader reaches them through
  ``/proc/<pid>/root`` (:func:`sandbox_pid`), so no host folder is writable by the
  kernel, and nothing it creates is ever followed, changed or removed by the grader.
- **Who it is**: started by root, an unprivileged uid of its own (no account, no
  capabilities), so limits per user never reach another notebook; started by anyone
  else, that user in an unprivileged user namespace.  No network, its own process
  namespace, no environment from the grader but what a kernel needs.
- **Limits for everything it starts**: a control group of its own where the grader
  can make one (``grading/cgroups.py``: memory of every process and its tmpfs
  together, processes, a CPU quota), else limits per process (address space, file
  size, CPU time, processes of its own uid); and wall-clock time for the whole
  notebook (the kernel is killed after it).

``MCT_SANDBOX=off`` runs the kernel without bubblewrap (a learner grading their own
notebooks, or an instructor who trusts the class); every report of such a run says
so.  Without bubblewrap and without that opt-out, the kernel refuses to start.
"""

from __future__ import annotations

import os
import resource
import shutil
import sys
import time
from pathlib import Path

from . import cgroups
from .meter import RESIDENT_TUNABLES
from .protocol import (CASES_FILE_ENV, CASES_FILE_HOST_ENV, CGROUP_NAME_ENV, GRADING_ENV, INSIDE, INSIDE_CASES,
                       INSIDE_CONNECTION, INSIDE_REVEAL, INSIDE_RUN, INSIDE_TMP, INSIDE_TREE, INSIDE_WORK,
                       KERNEL_ADDRESS_SPACE_ENV, KERNEL_MEMORY_ENV, KERNEL_PROCESSES_ENV, KERNEL_TMP_ENV,
                       KERNEL_TREE_HOST_ENV, NOTEBOOK_SECONDS_ENV, PRIVATE_DIR_ENV, REVEAL_DIR_ENV, REVEAL_DIR_HOST_ENV,
                       SANDBOX_ENV, SANDBOX_HOLDER_ENV)

ROOT = Path(__file__).resolve().parent.parent
NOBODY = 65534
KERNEL_UIDS = (200_000, 100_000)  # first uid, how many: each kernel its own, so that limits per user
                                  # (processes) of one notebook never reach another's
TMP_BYTES = int(os.environ.get(KERNEL_TMP_ENV, 256 * 2**20))  # the sandbox's /tmp: its only writable place


def notebook_seconds() -> int:
    """A notebook's wall-clock seconds (MCT_NOTEBOOK_SECONDS, 600 unless set): its launcher kills the sandbox then."""
    return int(os.environ.get(NOTEBOOK_SECONDS_ENV, 600))


MEMORY = int(os.environ.get(KERNEL_MEMORY_ENV, 6 * 2**30))  # everything the sandbox holds (its control group)
ADDRESS_SPACE = int(os.environ.get(KERNEL_ADDRESS_SPACE_ENV, 6 * 2**30))  # each process (the fallback)
PROCESSES = int(os.environ.get(KERNEL_PROCESSES_ENV, 128))  # tasks: the kernel's threads count too
LIMITS = {  # resource -> (soft, hard); per process: the fallback, and a second wall
    resource.RLIMIT_AS: ADDRESS_SPACE,
    resource.RLIMIT_NPROC: 256,
    resource.RLIMIT_FSIZE: 200 * 2**20,
    resource.RLIMIT_CPU: notebook_seconds() * 2,
    resource.RLIMIT_CORE: 0,
}
PASSED_ENV = ("LANG", "LC_ALL", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "PYDEVD_DISABLE_FILE_VALIDATION")
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")


def sandbox_wanted() -> bool:
    return os.environ.get(SANDBOX_ENV, "on").lower() not in ("off", "0", "no", "false")


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def missing_sandbox_message() -> str:
    return ("grading needs Debian's bubblewrap to sandbox the notebooks: `sudo apt-get install bubblewrap` "
            f"(or, for a trusted class only, {SANDBOX_ENV}=off)")


def kernel_env(cases_file: str | None, home: str, tree: str | None = None,
               runtime: str | None = None) -> dict[str, str]:
    env = {name: os.environ[name] for name in PASSED_ENV if name in os.environ}
    if tree:
        env["PYTHONPATH"] = tree
    env.update({
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
        "HOME": home, "IPYTHONDIR": f"{home}/.ipython", "MPLCONFIGDIR": f"{home}/.matplotlib",
        "MPLBACKEND": "module://matplotlib_inline.backend_inline",
        "JUPYTER_RUNTIME_DIR": runtime or f"{home}/runtime",
        GRADING_ENV: "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
        "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1", "GLIBC_TUNABLES": RESIDENT_TUNABLES,
    })
    if cases_file:
        env[CASES_FILE_ENV] = cases_file
    return env


def python_folders() -> list[Path]:
    """What the kernel needs of the host besides the system: the Python it runs on (an installation and
    a virtual environment, wherever they are, and any folder of packages a ``.pth`` file adds), outermost
    first.  Never the course's checkout itself (an editable install may put it on ``sys.path``), only the
    virtual environment inside it."""
    found = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parent}
    checkout = ROOT.resolve()
    for entry in sys.path[1:]:
        folder = Path(entry).resolve() if entry else None
        if folder is not None and folder.is_dir() and not _under(folder, checkout) and not _under(checkout, folder):
            found.add(folder)
    found = {folder for folder in found if not any(_under(folder, Path(system)) for system in SYSTEM)}
    outermost = [f for f in found if not any(f != other and _under(f, other) for other in found)]
    return sorted(outermost, key=lambda p: (len(p.parts), str(p)))


def _under(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


class _Mounts:
    """A bwrap command line under construction: every folder made on the way is 0755 (bwrap would make a
    missing parent 0700 and root's, and a kernel of another uid could not pass it)."""

    def __init__(self) -> None:
        self.args: list[str] = []
        self.made: set[str] = {"/"}

    def folder(self, path: str, perms: str = "0755") -> None:
        for parent in [*reversed(Path(path).parents), Path(path)]:
            if str(parent) not in self.made:
                self.args += ["--perms", perms if parent == Path(path) else "0755", "--dir", str(parent)]
                self.made.add(str(parent))

    def bind(self, host: str, inside: str) -> None:
        """``host`` at ``inside``, read-only (nothing of the host is ever writable by the kernel)."""
        self.folder(str(Path(inside).parent))
        self.args += ["--ro-bind", host, inside]
        self.made.add(inside)

    def system(self) -> None:
        for path in SYSTEM:
            if os.path.islink(path):  # merged /usr: /bin -> usr/bin
                self.args += ["--symlink", os.readlink(path), path]
                self.made.add(path)
            elif os.path.isdir(path):
                self.bind(path, path)
        for path in SYSTEM_FILES:
            if os.path.exists(path):
                self.bind(path, path)


def bwrap_command(kernel: list[str], connection_file: str, cases_file: str | None, uid: int = NOBODY) -> list[str]:
    """The bwrap command line (see the module docstring for what it shows and allows).

    Run by root, bwrap itself stays root so that it can mount what the kernel needs from folders
    nobody may enter (a Python under /root, a home folder of mode 0700), and hands the kernel to an
    unprivileged uid with ``setpriv`` (no capabilities left).  Run by anyone else, bwrap creates a
    user namespace and the kernel keeps that (unprivileged) user.
    """
    as_root = os.getuid() == 0
    namespaces = (["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
                  if as_root else ["--unshare-all"])
    mounts = _Mounts()
    mounts.system()
    mounts.args += ["--proc", "/proc", "--dev", "/dev"]
    mounts.args += ["--perms", "1777", "--size", str(TMP_BYTES), "--tmpfs", INSIDE_TMP]
    mounts.made.add(INSIDE_TMP)
    for folder in python_folders():
        mounts.bind(str(folder), str(folder))
    mounts.folder(INSIDE)
    mounts.folder(INSIDE_RUN, perms="1777")
    mounts.folder(INSIDE_WORK, perms="1777")
    mounts.bind(connection_file, INSIDE_CONNECTION)
    if cases_file:
        mounts.bind(cases_file, INSIDE_CASES)
    tree = os.environ.get(KERNEL_TREE_HOST_ENV)
    if tree:  # the modules the kernel may import: the redacted library, stand-ins, the harness
        mounts.bind(tree, INSIDE_TREE)
    reveal = os.environ.get(REVEAL_DIR_HOST_ENV)
    if reveal:
        mounts.bind(reveal, INSIDE_REVEAL)
    command = [bwrap_path(), *namespaces, "--die-with-parent", "--new-session", *mounts.args,
               "--remount-ro", "/", "--clearenv"]
    env = {**kernel_env(INSIDE_CASES if cases_file else None, INSIDE_TMP, INSIDE_TREE if tree else None,
                        INSIDE_RUN),
           **({REVEAL_DIR_ENV: INSIDE_REVEAL} if reveal else {})}
    for name, value in env.items():
        command += ["--setenv", name, value]
    command += ["--chdir", INSIDE_WORK]
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


def _readable_by(connection_file: str, uid: int) -> None:
    """As root, the kernel (an unprivileged uid of its own) must read its connection file: the grader's own
    file, in the grader's private folder, which the kernel never sees (nothing there can be a link of its)."""
    os.chown(connection_file, uid, uid, follow_symlinks=False)


def sandbox_pid(launcher: int, timeout: float = 20.0) -> int | None:
    """The first process below ``launcher`` that lives in the sandbox's mount namespace (bwrap's child),
    waited for up to ``timeout`` seconds: ``/proc/<it>/root`` is the sandbox's file system."""
    own = os.readlink("/proc/self/ns/mnt")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        queue = [launcher]
        while queue:
            pid = queue.pop(0)
            try:
                if pid != launcher and os.readlink(f"/proc/{pid}/ns/mnt") != own:
                    return pid
                children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
            except OSError:
                continue
            queue += [int(child) for child in children]
        if not Path(f"/proc/{launcher}").exists():
            return None
        time.sleep(0.01)
    return None


#: What the sandbox runs in place of the kernel when the kernel is forked in from the zygote (grading/zygote.py):
#: it waits for the kernel (the first process of the sandbox after bubblewrap's init and itself) and ends when
#: the kernel ends, so that the sandbox ends with the kernel as it does with a kernel started from cold.  A
#: kernel that never comes ends it too (the grader then stops the launcher anyway).
HOLDER = """
import os, select, sys, time
def others():
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, os.getpid())]
deadline = time.monotonic() + 60
while not others():
    if time.monotonic() > deadline:
        sys.exit(3)
    time.sleep(0.01)
try:
    select.select([os.pidfd_open(min(others()))], [], [])
except OSError:  # the kernel has ended already
    pass
"""


def holder_command(mark: str) -> list[str]:
    """The holder's command line (``mark``, its last argument, is how the grader knows it)."""
    return [sys.executable, "-I", "-S", "-c", HOLDER, mark]


PREFLIGHT = "import ipykernel_launcher, numpy, zmq; print('the sandbox runs Python')"


def preflight(timeout: float = 60.0) -> str | None:
    """Start Python in the sandbox exactly as a grading kernel starts (the same mounts, user and limits)
    and import what a kernel needs; None when it works, else why not, for the instructor.

    Grading tools call this before they grade anyone, so that a machine where the sandbox cannot run
    (bubblewrap refused, Python out of its reach) is an error on the grader's side, never a 0 for a
    student."""
    if not sandbox_wanted():
        return None
    if bwrap_path() is None:
        return missing_sandbox_message()
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory(prefix="mct-preflight-") as folder:
        connection = Path(folder) / "kernel.json"
        connection.write_text("{}")
        uid = kernel_uid() if os.getuid() == 0 else os.getuid()
        if os.getuid() == 0:
            _readable_by(str(connection), uid)
        command = bwrap_command([sys.executable, "-c", PREFLIGHT], str(connection), None, uid)
        try:
            run = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                                 preexec_fn=_apply_limits)
        except subprocess.TimeoutExpired:
            return f"Python did not start in the grading sandbox within {timeout:g} s"
    if run.returncode == 0 and "the sandbox runs Python" in run.stdout:
        return None
    said = (run.stderr.strip().splitlines() or [f"exit status {run.returncode}"])[-1][:300]
    return (f"Python does not start in the grading sandbox on this machine ({said}); the sandbox shows the "
            f"kernel {', '.join(str(p) for p in python_folders())} and the system's /usr: is the Python "
            f"the course runs on readable there by an unprivileged user, and is "
            f"{KERNEL_ADDRESS_SPACE_ENV} enough to start it?")


# A grading kernel has no terminal and no parent to watch: without a parent handle ipykernel prints, into every
# grading log, that Ctrl-C will not work.  Handle 1 (init) says "no parent" and starts no poller, as now.
NO_PARENT = "--IPKernelApp.parent_handle=1"


def kernel_arguments(argv: list[str]) -> list[str]:
    """``ipykernel_launcher``'s arguments for a grading kernel: the kernel spec's, and no parent handle."""
    return [*argv, NO_PARENT]


def inside_arguments(argv: list[str], connection_file: str) -> list[str]:
    """The kernel's arguments as the sandbox sees them: its connection file at INSIDE_CONNECTION."""
    return kernel_arguments([arg if arg != connection_file else INSIDE_CONNECTION for arg in argv])


def main(argv: list[str]) -> None:
    if "-f" not in argv:
        raise SystemExit("usage: python -m grading.sandbox -f CONNECTION_FILE")
    connection_file = argv[argv.index("-f") + 1]
    cases_file = os.environ.get(CASES_FILE_HOST_ENV)
    seconds = str(notebook_seconds())
    if not sandbox_wanted():
        home = os.environ.get(PRIVATE_DIR_ENV) or "/tmp"
        reveal = os.environ.get(REVEAL_DIR_HOST_ENV)
        kernel = [sys.executable, "-m", "ipykernel_launcher", *kernel_arguments(argv)]
        os.execve(sys.executable, kernel, {**kernel_env(cases_file, home, os.environ.get(KERNEL_TREE_HOST_ENV),
                                                        str(Path(connection_file).parent)),
                                           **({REVEAL_DIR_ENV: reveal} if reveal else {})})
    if bwrap_path() is None:
        print(missing_sandbox_message(), file=sys.stderr)
        raise SystemExit(3)
    inside = inside_arguments(argv, connection_file)
    kernel = [sys.executable, "-m", "ipykernel_launcher", *inside]
    if os.environ.get(SANDBOX_HOLDER_ENV):  # the kernel is forked in from the zygote
        kernel = holder_command(os.environ[SANDBOX_HOLDER_ENV])
    uid = kernel_uid() if os.getuid() == 0 else os.getuid()
    if os.getuid() == 0:
        _readable_by(connection_file, uid)
    group = os.environ.get(CGROUP_NAME_ENV)
    if group and cgroups.enter(group, cgroups.Limits(MEMORY, PROCESSES)) is None:
        print(f"grading.sandbox: {cgroups.describe(None)}", file=sys.stderr)
    command = bwrap_command(kernel, connection_file, cases_file, uid)
    _apply_limits()
    timeout = shutil.which("timeout")
    if timeout:  # outside the sandbox, so the notebook cannot kill it
        command = [timeout, "--signal=KILL", seconds, *command]
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
