"""Warm kernels: the grader's side of the zygote (``grading/zygote_process.py``), one per grading process.

A grading kernel started from cold spends about 0.3 CPU-seconds importing ipykernel, IPython, ZeroMQ
and NumPy, a fifth of what grading a notebook costs.  Here a *zygote* has imported them once (only third-party
modules: nothing of the course), and each notebook's kernel is forked from it into that notebook's
sandbox: the launcher (grading/sandbox.py) still makes the notebook's control group, limits and
bubblewrap sandbox exactly as before, under ``timeout``, but bubblewrap runs a small *holder*
(:data:`grading.sandbox.HOLDER`) in place of the kernel; the kernel manager finds the holder and asks
the zygote for a kernel in its image (:func:`spawn`).  The zygote's fork takes the holder's control
group, limits, namespaces, root, environment and unprivileged uid, so the kernel is bounded as a cold
one; the holder ends when the kernel does, and the sandbox with it.

Wherever the sandbox is on, the grader root (bubblewrap without a user namespace) or an ordinary user (the
zygote enters bubblewrap's user namespaces too); with ``MCT_WARM_KERNELS=off``, or when the zygote cannot start
or fails, kernels start from cold as before (the log says so once).
"""

from __future__ import annotations

import atexit
import json
import os
import select
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path

from . import cgroups, sandbox
from .meter import RESIDENT_TUNABLES
from .protocol import PRIVATE_DIR_ENV, WARM_KERNELS_ENV

SCRIPT = Path(__file__).resolve().parent / "zygote_process.py"
READY_SECONDS = 60.0
SPAWN_SECONDS = 30.0
HOLDER_MARK = "mct-holder"  # the holder's last argument (grading.sandbox.holder_command)
#: The zygote's whole environment: glibc reads GLIBC_TUNABLES at a process's start, so a forked kernel has the
#: zygote's malloc settings (grading/meter.py); no thread pool of BLAS (a fork copies only the calling thread).
ZYGOTE_ENV = {"GLIBC_TUNABLES": RESIDENT_TUNABLES, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
              "PATH": "/usr/bin:/bin"}


def zygote_env() -> dict[str, str]:
    """ZYGOTE_ENV and what a kernel is passed of the grader's environment (its locale, read at Python's start)."""
    return {**{name: os.environ[name] for name in sandbox.PASSED_ENV if name in os.environ}, **ZYGOTE_ENV}


def warm_wanted() -> bool:
    """Kernels forked from the zygote: the sandbox on, and warm kernels not turned off."""
    return (os.environ.get(WARM_KERNELS_ENV, "on").lower() not in ("off", "0", "no", "false")
            and sandbox.sandbox_wanted() and sandbox.bwrap_path() is not None)


def site_folders() -> list[str]:
    """The kernel's site-packages, with the folders their ``.pth`` files name (their ``import`` lines are not run:
    the editable install's finder of the checkout is one), never the checkout itself.  The zygote puts them after
    the standard library's folders (its own ``sys.path`` without ``site``), as ``site`` would."""
    checkout = sandbox.ROOT.resolve()
    found: list[str] = []
    for site in dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib")):
        found.append(site)
        for pth in sorted(Path(site).glob("*.pth")):
            for line in pth.read_text().splitlines():
                line = line.strip()
                if line and not line.startswith(("#", "import ", "import\t")):
                    folder = (Path(site) / line).resolve()
                    if folder.is_dir() and not folder.is_relative_to(checkout):
                        found.append(str(folder))
    return found


def command(source: str, arguments: list[str]) -> list[str]:
    """Python without ``site`` (the editable install's finder of the checkout is one of its ``.pth`` files) nor
    the user's folder, running ``source``: the zygote's whole command line."""
    return [sys.executable, "-s", "-S", "-c", source, *arguments]


class Refused(RuntimeError):
    """The zygote ran, and could not start a kernel in a sandbox: on this machine it will not (a namespace it may
    not enter, say), so this grading process starts its kernels from cold from now on (:func:`give_up`)."""


class Zygote:
    """A zygote: its process and socket.  Made, it is starting (its imports take about 0.3 CPU-seconds, on another
    core while the grader does its own work); :meth:`wait_ready` waits for it to serve."""

    def __init__(self) -> None:
        private = Path(os.environ[PRIVATE_DIR_ENV])
        self.socket_path = str(private / f"zygote-{os.getpid()}.sock")
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        arguments = [self.socket_path, str(os.getpid()), json.dumps(site_folders()), sys.prefix]
        self.process = subprocess.Popen(
            command(SCRIPT.read_text(), arguments), env=zygote_env(), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, close_fds=True, cwd="/", start_new_session=True)
        self.ready = False
        atexit.register(self.stop)

    def wait_ready(self) -> None:
        """Return once the zygote serves (at once after the first time); RuntimeError, and the zygote stopped,
        when it says nothing within READY_SECONDS or ends."""
        if self.ready:
            return
        ready, _, _ = select.select([self.process.stdout], [], [], READY_SECONDS)
        said = self.process.stdout.readline() if ready else b""
        self.process.stdout.close()
        if said.strip() != b"ready":
            self.stop()
            raise RuntimeError(f"the zygote did not start (exit status {self.process.poll()})")
        self.ready = True

    def alive(self) -> bool:
        return self.process.poll() is None

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        try:
            os.unlink(self.socket_path)
        except OSError:
            pass

    def spawn(self, holder: int, cgroup: str, argv: list[str]) -> int:
        """Fork a kernel into the sandbox of ``holder`` (in control group ``cgroup``); the kernel's pid."""
        request = {"holder": holder, "cgroup_procs": [str(group / "cgroup.procs") for group in cgroups.groups(cgroup)],
                   "argv": argv}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.settimeout(SPAWN_SECONDS)
            connection.connect(self.socket_path)
            socket.send_fds(connection, [json.dumps(request).encode()], [1, 2])  # the launcher's (nbgrader's own)
            answer = b""
            while chunk := connection.recv(4096):
                answer += chunk
        if not answer:  # it ended (or was ended) meanwhile: the next kernel gets a new one
            raise RuntimeError("the zygote ended without an answer")
        reply = json.loads(answer)
        if "kernel" not in reply:
            raise Refused(f"the zygote could not start a kernel: {reply['error']}")
        return int(reply["kernel"])


_zygote: Zygote | None = None
_said = False
_given_up: str | None = None  # why this process starts its kernels from cold for good (None: it does not)


def current() -> Zygote | None:
    """This process's zygote, ready to serve: started on first use (or by :func:`start_soon`, and again if it
    ended); None: kernels start from cold."""
    global _zygote
    if not warm_wanted() or _given_up is not None:
        _say_once(f"kernels start from cold ({_given_up or f'{WARM_KERNELS_ENV}=off, or the sandbox is off'})")
        return None
    try:
        start_soon()
        _zygote.wait_ready()
    except (OSError, RuntimeError, KeyError) as error:
        _zygote = None
        _say_once(f"kernels start from cold: {error}")
    return _zygote


def give_up(why: str) -> None:
    """Start this process's kernels from cold from now on (the zygote refused one: :class:`Refused`), and stop the
    zygote.  A zygote that merely ended is started again instead (:func:`current`)."""
    global _zygote, _given_up
    _given_up = f"warm kernels are off in this grading process: {why}"
    if _zygote is not None:
        _zygote.stop()
        _zygote = None


def start_soon() -> None:
    """Start this process's zygote, if it wants one and has none running, without waiting for it: a grading
    process calls this when it begins a part, so that the zygote imports while the part's cases are drawn."""
    global _zygote
    if warm_wanted() and _given_up is None and (_zygote is None or not _zygote.alive()):
        _zygote = Zygote()


def _say_once(what: str) -> None:
    global _said
    if not _said:
        print(f"grading.zygote: {what}", file=sys.stderr)
        _said = True


def holder_pid(sandbox_pid: int, timeout: float = 20.0) -> int | None:
    """The holder below the sandbox's first process (bubblewrap's init), once it runs as the kernel's uid."""
    import time
    expected = b"".join(os.fsencode(argument) + b"\0" for argument in sandbox.holder_command(HOLDER_MARK))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            children = Path(f"/proc/{sandbox_pid}/task/{sandbox_pid}/children").read_text().split()
        except OSError:
            return None
        for child in children:
            try:  # the holder itself, once exec'd (bubblewrap's own command line ends with the holder's)
                if Path(f"/proc/{child}/cmdline").read_bytes() == expected:
                    return int(child)
            except OSError:
                continue
        time.sleep(0.005)
    return None
