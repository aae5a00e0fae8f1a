"""The grader's side of a sandboxed kernel holds: no link followed, every message counted, memory bounded.

Each test starts one grading kernel in the sandbox through the course's own kernel manager
(grading.preprocessors.SandboxKernelManager, as nbgrader does), lets a cell attack the grader, and checks
what the grader did.  This process is the grader here, so its own peak resident memory (VmHWM of
/proc/self/status, reset first through /proc/self/clear_refs) is what is measured: never the host's.
A few seconds a test.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from pathlib import Path

import pytest
from jupyter_client.session import Session
from sandboxed_kernels import in_a_thread, kernel_env, run_apart, started, stopped  # noqa: F401 (a fixture)

from grading import protocol, sandbox, zygote
from grading.preprocessors import kernelmanager
from grading.preprocessors.kernelmanager import SandboxKernelManager

pytestmark = pytest.mark.skipif(sandbox.bwrap_path() is None or not sandbox.sandbox_wanted(),
                                reason="the grading sandbox (bubblewrap) is not available or is off")
#: How much the grader's resident memory may grow above what it held when a flood began, at its peak: what it
#: held before is this test process's own (in make test, the many tests it ran before this one), not the flood's.
GRADER_GROWTH_BOUND = 320 * 2**20  # (the watch stops a kernel past 192 MiB of growth; it looks every 20 ms)


async def run_cell(kc, code: str, seconds: float = 30) -> list[dict]:
    """Execute ``code``; the iopub messages of it until the kernel is idle, stopped or ``seconds`` pass."""
    msg_id = kc.execute(code)
    messages, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            msg = await kc.get_iopub_msg(timeout=1)
        except Exception:  # queue.Empty: nothing this second
            if not await kc.is_alive():
                break
            continue
        if msg["parent_header"].get("msg_id") == msg_id:
            messages.append(msg)
            if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
                break
    return messages


def peak_reset() -> int:
    """Start this process's peak resident memory again from now; what it holds now, in bytes."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_bytes("VmRSS")


def peak_bytes() -> int:
    return _status_bytes("VmHWM")


def _status_bytes(key: str) -> int:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(status[key].split()[0]) * 1024


# -------------------------------------------------------------------------------------------- no link followed

def test_a_socket_found_through_a_link_is_refused(tmp_path):
    target = socket.socket(socket.AF_UNIX)
    target.bind(str(tmp_path / "real"))
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "kernel-1").symlink_to(tmp_path / "real")
    (tmp_path / "linked").symlink_to(tmp_path / "run")
    fd = kernelmanager.open_without_links(str(tmp_path), "real")
    os.close(fd)
    with pytest.raises(OSError, match="not a socket"):
        kernelmanager.open_without_links(str(tmp_path), "run/kernel-1")
    with pytest.raises(OSError):
        kernelmanager.open_without_links(str(tmp_path), "linked/kernel-1")  # a link among the folders too
    target.close()


LINK_CELL = """
import os
run = {run!r}
shell = sorted(name for name in os.listdir(run))[{index}]
os.unlink(os.path.join(run, shell))
os.symlink({host!r}, os.path.join(run, shell))  # resolved from the grader's side: a socket on the host
print("linked", shell)
"""


def test_a_kernel_that_puts_a_link_in_place_of_its_socket_is_never_followed(kernel_env, tmp_path):
    """A cell replaces its shell socket by a link to another Unix socket (one on the host, outside its sandbox);
    a new connection of the grader's (as a reconnection would be) still reaches the kernel's own socket."""
    host = tmp_path / "host.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(host))
    listener.listen(4)
    listener.settimeout(0.1)

    async def attack():
        km, kc = await started()
        try:
            names = sorted(f"kernel-{getattr(km, f'{c}_port')}" for c in ("shell", "iopub", "stdin", "control", "hb"))
            index = names.index(f"kernel-{km.shell_port}")
            said = await run_cell(kc, LINK_CELL.format(run=protocol.INSIDE_RUN, index=index, host=str(host)))
            assert any("linked" in m["content"].get("text", "") for m in said), said
            # connects anew, as ZeroMQ does after a lost connection (a session of its own: another identity)
            again = km.client(session=Session(key=km.session.key, signature_scheme=km.session.signature_scheme))
            again.start_channels()
            reply = await again.kernel_info(reply=True, timeout=20)
            again.stop_channels()
            return reply
        finally:
            await stopped(km, kc)

    reply = run_apart(attack())
    assert reply["content"]["status"] == "ok"  # the kernel's own socket, found through the descriptor
    with pytest.raises(TimeoutError):
        listener.accept()  # and nothing ever connected to the socket the link pointed at
    listener.close()


# ------------------------------------------------------------------------------------- every message counted

FLOOD_CELLS = {
    # widget (comm) messages: not output, counted all the same
    "comm flood": ("from ipykernel.comm import Comm\n"
                   "c = Comm(target_name='mct')\n"
                   "big = 'x' * (4 * 2**20)\n"
                   "for i in range(200):\n    c.send({'d': big})\n", "in all"),
    # one message split into many frames, each below ZeroMQ's limit of one frame
    "split message": ("k = get_ipython().kernel\n"
                      "k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'x'},\n"
                      "               buffers=[b'x' * (8 * 2**20)] * 8, parent=k.get_parent())\n", "one message"),
    # one message of more frames than the grader could hold (ZeroMQ keeps a message whole until its last frame)
    "frames without end": ("k = get_ipython().kernel\n"
                           "k.session.send(k.iopub_socket, 'stream', {'name': 'stdout', 'text': 'x'},\n"
                           "               buffers=[b'x' * (16 * 2**20)] * 64, parent=k.get_parent())\n",
                           "grader's memory grew"),
    # many output messages
    "output flood": ("import sys\nbig = 'y' * (2 * 2**20)\n"
                     "for i in range(400):\n    sys.stdout.write(big); sys.stdout.flush()\n", "in all"),
}


@pytest.mark.parametrize("kind", FLOOD_CELLS)
def test_a_flood_stops_the_kernel_and_the_grader_s_memory_stays_bounded(kind, kernel_env, monkeypatch):
    monkeypatch.setattr(kernelmanager, "NOTEBOOK_MESSAGE_BYTES", 64 * 2**20)
    code, reason = FLOOD_CELLS[kind]

    async def flood():
        km, kc = await started()
        try:
            held = peak_reset()
            await run_cell(kc, code, seconds=60)
            deadline = time.monotonic() + 10
            while await km.is_alive() and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            return km.mct_budget, await km.is_alive(), peak_bytes() - held
        finally:
            await stopped(km, kc)

    budget, alive, growth = run_apart(flood())
    assert budget.stopped and reason in budget.stopped and "needs a human look" in budget.stopped, budget.stopped
    assert not alive, "the kernel was stopped"
    assert growth < GRADER_GROWTH_BOUND, f"the grader's resident memory grew by {growth / 2**20:.0f} MiB at its peak"
    print(f"{kind}: {budget.received / 2**20:.0f} MiB received before the stop; the grader grew by "
          f"{growth / 2**20:.0f} MiB at its peak")


# ---------------------------------------------------------------------------------- refused before it is read

def test_a_notebook_too_large_or_nested_too_deeply_is_refused_unread(tmp_path, monkeypatch):
    from grading import nbgrader_cli, submission_limits
    from grading.submission_limits import BoundedNotebookExporter, NotebookRefusedError
    honest = Path(__file__).resolve().parent.parent / "solutions" / "01_mlp_core.ipynb"
    body, _ = BoundedNotebookExporter().from_filename(str(honest))
    assert json.loads(body)["cells"]
    large = tmp_path / "large.ipynb"
    large.write_text(json.dumps({"cells": [{"cell_type": "markdown", "source": "x" * (2 * 2**20)}]}))
    monkeypatch.setattr(submission_limits, "MAX_NOTEBOOK_BYTES", 2**20)
    with pytest.raises(NotebookRefusedError, match="refused unread") as refused:
        BoundedNotebookExporter().from_filename(str(large))
    log = (f"[AutogradeApp | ERROR] There was an error processing assignment: /c/submitted/s/p\n"
           f"Traceback (most recent call last):\n  ...\n"
           f"grading.submission_limits.NotebookRefusedError: {refused.value}\n")
    assert "1,048,576 a submission may have: refused unread" in nbgrader_cli.failure_reason(log, "s", "p")
    deep = tmp_path / "deep.ipynb"
    deep.write_text('{"cells": [], "metadata": {"a": "[[[[\\"", "b": ' + "[" * 65 + "]" * 65 + "}}")
    assert submission_limits.depth_of(str(deep), limit=1000) == 65 + 2  # the brackets in a string do not count
    with pytest.raises(NotebookRefusedError, match="nested more than 64"):
        BoundedNotebookExporter().from_filename(str(deep))


# ------------------------------------------------------------------------------------ nothing left of a dead kernel

def test_a_kernel_that_died_leaves_nothing_when_its_resources_are_cleaned_up_as_nbclient_does(kernel_env):
    """nbclient does not shut a dead kernel down: it calls ``km.cleanup_resources()`` (the public name, which
    AsyncKernelManager binds to jupyter_client's own coroutine). The course's clean-up must run there too."""
    from grading import cgroups

    async def scenario():
        km, kc = await started()
        watch, folder = km._mct_watch, km._mct_folder
        km._mct_stop()  # killed, as a limit or the message budget kills it
        while await km.is_alive():
            await asyncio.sleep(0.01)
        kc.stop_channels()
        await km.cleanup_resources()
        return km, watch, folder

    km, watch, folder = run_apart(scenario())
    assert cgroups.groups(km._mct_cgroup) == [], "the kernel's control group is left behind"
    assert not watch._thread.is_alive(), "the watch's thread is still looking at /proc"
    assert not folder.exists(), "the kernel's private folder is left behind"
    assert km._mct_socket_fds is None, "the kernel's socket descriptors are still open"


# ----------------------------------------------------------------------------- a kernel launched ahead (spare)

def grading_execute():
    """nbgrader's Execute as the course's configuration makes it (autograde/nbgrader_config.py)."""
    from traitlets.config import Config

    from grading.preprocessors import SandboxedExecute
    return SandboxedExecute(config=Config({"KernelManager": {"transport": "ipc"}}), kernel_name="mct-grading",
                            kernel_manager_class=SandboxKernelManager)


def traces(km) -> dict:
    """What of a kernel is on this machine: its launcher's pid, its control group's name, its private folder."""
    return {"pid": km.provisioner.process.pid, "group": km._mct_cgroup, "folder": km._mct_folder}


def left_of(trace: dict) -> list[str]:
    """What is still there of a kernel's ``traces``."""
    from grading import cgroups
    left = []
    if Path(f"/proc/{trace['pid']}").exists():
        left.append(f"its launcher (pid {trace['pid']}) runs or is unreaped")
    if cgroups.groups(trace["group"]):
        left.append("its control group")
    if trace["folder"].exists():
        left.append("its private folder")
    return left


def launcher_seconds(pid: int) -> int:
    """The wall-clock seconds the launcher ``pid`` runs its sandbox for (``timeout --signal=KILL N bwrap ...``,
    once grading.sandbox has turned into it)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if Path(argv[0].decode()).name == "timeout":
            return int(argv[2])
        time.sleep(0.01)
    raise AssertionError(f"the launcher never became timeout: {argv}")


def test_a_kernel_launched_ahead_is_taken_by_the_next_notebook_and_is_a_new_kernel_of_its_own(kernel_env):
    from jupyter_core.utils import run_sync

    from grading.preprocessors import spare
    execute = grading_execute()

    def scenario():
        spare.launch_for_next(execute)
        km = spare.take(execute)
        assert km is not None, "the kernel launched ahead was not taken"
        assert not km.has_kernel, "a kernel launched ahead counts as started before start_kernel has connected"
        assert spare.take(execute) is None, "a kernel launched ahead can be taken twice"
        seconds = launcher_seconds(km.provisioner.process.pid)
        trace = traces(km)
        forked_ahead = None
        if zygote.warm_wanted():  # the kernel itself is forked into its sandbox before its notebook takes it
            assert km._mct_found_ahead is not None, "a warm kernel launched ahead is not forked ahead"
            _, forked_ahead = km._mct_found_ahead.result(timeout=60)
            assert isinstance(forked_ahead, int) and Path(f"/proc/{forked_ahead}").exists(), forked_ahead
        run_sync(km.start_kernel)(extra_arguments=list(execute.extra_arguments))
        assert km._mct_kernel_pid == forked_ahead, "the kernel started is not the one forked ahead"
        kc = km.client()
        kc.start_channels()
        run_sync(kc.wait_for_ready)(timeout=60)
        messages = run_sync(run_cell)(kc, "print(len(globals()), 'names', flush=True)")
        watched = km._mct_watch._thread.is_alive()
        run_sync(stopped)(km, kc)
        return seconds, trace, messages, watched

    seconds, trace, messages, watched = in_a_thread(scenario)
    assert seconds == sandbox.notebook_seconds() + spare.SPARE_SECONDS, "the wall clock's head start is not given"
    printed = "".join(m["content"].get("text", "") for m in messages if m["msg_type"] == "stream")
    assert printed.endswith(" names\n") and int(printed.split()[0]) < 30, f"not a fresh kernel: {printed!r}"
    assert watched, "the grader's memory watch did not start with the notebook"
    assert left_of(trace) == []


@pytest.mark.parametrize("change", ["environment", "age", "death"])
def test_a_kernel_launched_ahead_is_not_taken_once_it_differs_aged_or_died_and_nothing_of_it_is_left(
        kernel_env, monkeypatch, change):
    """Taken only if a launch now would be the same (here: another part's cases file), while young, and alive;
    otherwise killed and removed: launcher, control group, private folder."""
    from grading import cgroups
    from grading.preprocessors import spare
    execute = grading_execute()

    def scenario():
        spare.launch_for_next(execute)
        waiting = spare._waiting[0]
        trace = traces(waiting.km)
        launcher_seconds(trace["pid"])  # its sandbox launched, in its control group
        assert not cgroups.probe() or cgroups.groups(trace["group"]), "the kernel's control group was not made"
        if change == "environment":
            monkeypatch.setenv(protocol.CASES_FILE_HOST_ENV, str(kernel_env / "another-part.json"))
        elif change == "age":
            waiting.at -= spare.SPARE_SECONDS
        else:
            waiting.km._mct_stop()
            waiting.km.provisioner.process.wait()
        return spare.take(execute), trace

    taken, trace = in_a_thread(scenario)
    assert taken is None, f"a kernel launched ahead was taken after its {change} changed"
    assert spare._waiting == []
    assert left_of(trace) == []


def test_a_sandbox_that_ends_while_its_kernel_is_forked_ahead_leaves_warm_kernels_on(kernel_env, monkeypatch):
    """The zygote cannot fork a kernel into a sandbox that has ended (here: its holder killed, its launcher ended,
    just before the fork); that refusal is the sandbox's doing, not the zygote's, so the next kernels stay warm.
    The spare is not taken, and nothing of it is left."""
    from grading import zygote
    from grading.preprocessors import spare
    if not zygote.warm_wanted():
        pytest.skip("warm kernels are off here")
    found = zygote.holder_pid

    def ended_first(sandbox_pid: int, timeout: float = 20.0) -> int | None:
        holder = found(sandbox_pid, timeout)
        launcher = sandbox_pid
        while not Path(f"/proc/{launcher}/exe").resolve().name == "timeout":  # up from bubblewrap to the launcher
            launcher = int(Path(f"/proc/{launcher}/stat").read_text().rsplit(")", 1)[1].split()[1])
        os.kill(holder, 9)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{launcher}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":  # ended, unreaped
            assert time.monotonic() < deadline, "the launcher did not end with its sandbox"
            time.sleep(0.01)
        return holder

    monkeypatch.setattr(zygote, "holder_pid", ended_first)
    execute = grading_execute()

    def scenario():
        spare.launch_for_next(execute)
        km = spare._waiting[0].km
        trace = traces(km)
        _, kernel = km._mct_found_ahead.result(timeout=60)
        return kernel, spare.take(execute), trace

    kernel, taken, trace = in_a_thread(scenario)
    assert isinstance(kernel, RuntimeError) and "could not start a kernel" in str(kernel), kernel
    assert zygote._given_up is None, "warm kernels were turned off for a sandbox that had ended"
    assert taken is None and spare._waiting == []
    assert left_of(trace) == []


def test_no_kernel_launched_ahead_is_left_when_the_grader_ends(kernel_env):
    """nbgrader's process ends after its last notebook, whose first cell launched a kernel for a next one."""
    import subprocess
    script = ("import json\n"
              "from test_grader_bounds import grading_execute, launcher_seconds, traces\n"
              "from grading.preprocessors import spare\n"
              "spare.launch_for_next(grading_execute())\n"
              "trace = traces(spare._waiting[0].km)\n"
              "launcher_seconds(trace['pid'])\n"
              "print(json.dumps({**trace, 'folder': str(trace['folder'])}))\n")
    out, err = kernel_env / "out", kernel_env / "err"  # files, not pipes: a kernel left behind would hold a pipe
    with out.open("w") as stdout, err.open("w") as stderr:
        run = subprocess.run([sys.executable, "-c", script], stdout=stdout, stderr=stderr, timeout=120,
                             cwd=Path(__file__).parent,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent.parent),
                                                                               str(Path(__file__).parent)])})
    assert run.returncode == 0, err.read_text()
    trace = json.loads(out.read_text().splitlines()[-1])
    assert left_of({**trace, "folder": Path(trace["folder"])}) == []


def test_no_kernel_is_launched_ahead_without_the_sandbox(kernel_env, monkeypatch):
    """Unsandboxed, a kernel works in its notebook's folder: one launched for the next notebook would not."""
    from grading.preprocessors import spare
    monkeypatch.setenv(protocol.SANDBOX_ENV, "off")
    in_a_thread(lambda: spare.launch_for_next(grading_execute()))
    assert spare._waiting == []


def test_the_kernels_of_a_grader_killed_outright_are_removed_when_the_next_grader_starts_one(kernel_env):
    """A grader killed (SIGKILL: no clean-up) leaves its kernel running under its launcher's clock, in its
    control group; the next grading process's first kernel removes both. A live grader's group, even empty
    (a launcher between making it and entering it), is left alone."""
    import signal
    import subprocess
    from grading import cgroups
    if cgroups.probe() is None:
        pytest.skip("no control groups on this machine")
    script = ("import asyncio, json\n"
              "from sandboxed_kernels import started\n"
              "async def main():\n"
              "    km, kc = await started()\n"
              "    print(json.dumps({'group': km._mct_cgroup, 'launcher': km.provisioner.process.pid}), flush=True)\n"
              "    await asyncio.sleep(120)\n"
              "asyncio.run(main())\n")
    out = kernel_env / "out"  # a file, not a pipe: the kernel left behind holds what it inherited
    with out.open("w") as stdout:
        grader = subprocess.Popen([sys.executable, "-c", script], stdout=stdout, stderr=subprocess.DEVNULL,
                                  cwd=Path(__file__).parent, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                      [str(Path(__file__).parent.parent), str(Path(__file__).parent)])})
        deadline = time.monotonic() + 60
        while "group" not in out.read_text() and time.monotonic() < deadline and grader.poll() is None:
            time.sleep(0.05)
        left = json.loads(out.read_text().splitlines()[-1])
        grader.send_signal(signal.SIGKILL)
        grader.wait()
    orphan = cgroups.groups(left["group"])
    assert orphan and any(cgroups._pids(group) for group in orphan)  # the kernel outlived its grader
    live = [group.parent / cgroups.kernel_group_name("made-by-hand") for group in orphan]
    for group in live:
        group.mkdir()
    try:
        kernelmanager._swept = False  # as in a new grading process
        run_apart(_start_and_stop())
        assert cgroups.groups(left["group"]) == []
        deadline = time.monotonic() + 5
        while Path(f"/proc/{left['launcher']}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not Path(f"/proc/{left['launcher']}").exists()
        assert all(group.is_dir() for group in live)
    finally:
        for group in live:
            group.rmdir()


async def _start_and_stop() -> None:
    km, kc = await started()
    await stopped(km, kc)
