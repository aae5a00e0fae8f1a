"""Kernels forked from the zygote (grading/zygote.py) are bounded exactly as kernels started from cold.

The zygote holds no course module; a warm kernel's uid, capabilities, limits, environment, ``sys.path``
and ``/tmp`` equal a cold kernel's on the same probe, and its namespaces and control group are its own
sandbox's; two warm kernels of one zygote see nothing of each other; with MCT_WARM_KERNELS=off, or a
zygote that died, kernels still start.  Each test starts a few kernels through the course's own kernel
manager, as nbgrader does: a few seconds each.
"""

from __future__ import annotations

import asyncio
import json
import re
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sandboxed_kernels import kernel_env, run_apart, started, stopped  # noqa: F401 (a fixture)

from grading import protocol, sandbox, zygote

pytestmark = pytest.mark.skipif(not zygote.warm_wanted(), reason="warm kernels need the sandbox (bubblewrap) on")
COURSE_PACKAGES = ("shared", "grading", "torch_extra")

#: What a kernel reports of itself (one line of JSON): everything that bounds it, seen from inside.
PROBE = r'''
import json, os, resource, sys
status = dict(line.split(":\t", 1) for line in open("/proc/self/status").read().splitlines() if ":\t" in line)
def links():
    found = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            found[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # (the listing's own, closed)
            pass
    return found
print(json.dumps({
    "ids": [os.getresuid(), os.getresgid(), os.getgroups()],
    "status": {key: value.strip() for key, value in status.items()
               if key.startswith(("Cap", "NoNewPrivs", "Seccomp"))},
    "limits": {name: resource.getrlimit(getattr(resource, name)) for name in dir(resource)
               if name.startswith("RLIMIT_")},
    "env": dict(os.environ), "cwd": os.getcwd(), "tmp": sorted(os.listdir("/tmp")),
    "path": [entry for entry in sys.path if not entry.startswith("__editable__")],
    "executable": sys.executable, "prefix": sys.prefix, "argv": sys.argv,
    "course": sorted(name for name in sys.modules if name.split(".")[0] in %r),
    "dumpable_status": os.stat("/proc/self/status").st_uid == os.getuid(),
    "cgroup_view": open("/proc/self/cgroup").read(),
    "fd_table": int(status["FDSize"]), "fds": links(),
}))
''' % (COURSE_PACKAGES,)


async def printed(kc, code: str, seconds: float = 30) -> str:
    """What ``code`` printed (its stdout), once the kernel is idle again."""
    reply = await kc.execute_interactive(code, timeout=seconds, output_hook=_collect(out := []))
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(out)


def _collect(into: list[str]):
    def hook(msg):
        if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
            into.append(msg["content"]["text"])
    return hook


async def _probe_one() -> tuple[dict, dict]:
    """Start a kernel, probe it from inside and from the grader's side, stop it."""
    km, kc = await started()
    try:
        inside = json.loads(await printed(kc, PROBE))
        sandbox_pid = int(km.ip.split("/")[2])  # /proc/<pid>/root/...: the sandbox the sockets are in
        outside = {"kernel": km._mct_kernel_pid, "sandbox": sandbox_pid, "cgroup": km._mct_cgroup,
                   "launcher": km.provisioner.process.pid}
        if km._mct_kernel_pid is not None:
            kernel = km._mct_kernel_pid
            outside["kernel_ns"] = {name: os.readlink(f"/proc/{kernel}/ns/{name}") for name in zygote_spaces()}
            outside["sandbox_ns"] = {name: os.readlink(f"/proc/{sandbox_pid}/ns/{name}") for name in zygote_spaces()}
            outside["kernel_cgroup"] = Path(f"/proc/{kernel}/cgroup").read_text()
            outside["kernel_user_ns"] = os.readlink(f"/proc/{kernel}/ns/user")
            outside["holder_user_ns"] = os.readlink(f"/proc/{zygote.holder_pid(sandbox_pid, timeout=1)}/ns/user")
            outside["sandbox_cgroup"] = Path(f"/proc/{sandbox_pid}/cgroup").read_text()
    finally:
        await stopped(km, kc)
    return inside, outside


GRADER_IS_ROOT = os.getuid() == 0


def assert_a_kernel_s_ids(ids: list) -> None:
    """A grading kernel's (uid, gid, groups): a uid of its own with no group where the grader is root, the
    grader's own uid and gid otherwise (bubblewrap's user namespace keeps them)."""
    (uid, gid, groups) = ids
    if GRADER_IS_ROOT:
        assert uid[0] >= sandbox.KERNEL_UIDS[0] and set(uid) == {uid[0]} and set(gid) == {uid[0]} and groups == []
    else:
        assert set(uid) == {os.getuid()} and set(gid) == {os.getgid()}


def zygote_spaces() -> tuple[str, ...]:
    return ("ipc", "uts", "net", "cgroup", "pid", "mnt")


def probe(monkeypatch, warm: bool) -> tuple[dict, dict]:
    if warm:
        monkeypatch.delenv(protocol.WARM_KERNELS_ENV, raising=False)
    else:
        monkeypatch.setenv(protocol.WARM_KERNELS_ENV, "off")
    return run_apart(_probe_one())


def test_the_zygote_holds_no_course_module_and_not_the_checkout(kernel_env):
    """The zygote's own start, as grading/zygote.py makes it, then what it imported and where it looks."""
    source = zygote.SCRIPT.read_text().replace('if __name__ == "__main__":', "if False:")
    source += ("\nprepare(json.loads(sys.argv[1]), sys.argv[2])\n"
               "print(json.dumps({'modules': sorted(sys.modules), 'path': sys.path}))\n")
    command = zygote.command(source, [json.dumps(zygote.site_folders()), sys.prefix])
    run = subprocess.run(command, env=zygote.zygote_env(), capture_output=True, text=True, timeout=120, cwd="/")
    assert run.returncode == 0, run.stderr
    seen = json.loads(run.stdout)
    assert "numpy" in seen["modules"] and "ipykernel.kernelapp" in seen["modules"]  # it is warm
    course = [name for name in seen["modules"]
              if name.split(".")[0] in COURSE_PACKAGES or name.startswith("__editable__")]
    assert course == []
    checkout, venv = sandbox.ROOT.resolve(), Path(sys.prefix).resolve()
    assert [entry for entry in seen["path"]
            if Path(entry).resolve().is_relative_to(checkout) and not Path(entry).resolve().is_relative_to(venv)] == []
    # and the zygote that runs is started so: nothing of the checkout on its command line but the venv's
    warm = zygote.current()
    assert warm is not None
    arguments = Path(f"/proc/{warm.process.pid}/cmdline").read_bytes().split(b"\0")
    assert json.loads(arguments[7]) == zygote.site_folders()
    environment = Path(f"/proc/{warm.process.pid}/environ").read_bytes().split(b"\0")
    assert not [entry for entry in environment if entry.startswith(b"PYTHON")]


def test_a_warm_kernel_is_bounded_as_a_cold_one(kernel_env, monkeypatch):
    monkeypatch.setitem(zygote.ZYGOTE_ENV, "ZYGOTE_ONLY", "a name of the zygote's environment, not a kernel's")
    cold_inside, cold_outside = probe(monkeypatch, warm=False)
    warm_inside, warm_outside = probe(monkeypatch, warm=True)
    assert cold_outside["kernel"] is None and warm_outside["kernel"] is not None  # each started as asked
    for key in ("status", "limits", "env", "cwd", "tmp", "path", "executable", "prefix", "argv", "course",
                "dumpable_status", "cgroup_view"):
        assert warm_inside[key] == cold_inside[key], key
    assert_a_kernel_s_ids(warm_inside["ids"])
    if not GRADER_IS_ROOT:  # the grader's own uid, both: the same ids and groups
        assert warm_inside["ids"] == cold_inside["ids"]
    assert warm_inside["status"]["CapEff"] == "0000000000000000" and warm_inside["status"]["NoNewPrivs"] == "1"
    assert warm_inside["course"] == []
    # born with a descriptor table large enough for its start (grading/zygote_process.py), and no file of the
    # zygote's left open in it: past its standard streams, only files a cold kernel has open too (its standard
    # input is the zygote's /dev/null, a cold kernel's its launcher's pipe: a kernel reads neither)
    table = re.search(r"^FD_TABLE_SIZE = (\d+)", zygote.SCRIPT.read_text(), re.M)
    assert table and warm_inside["fd_table"] >= int(table[1]) > cold_inside["fd_table"]
    assert open_files(warm_inside["fds"]) <= open_files(cold_inside["fds"])
    # its namespaces are its sandbox's, none the grader's (and, where the grader is not root, a user namespace of
    # the sandbox's: the holder's, made by bubblewrap)
    assert warm_outside["kernel_ns"] == warm_outside["sandbox_ns"]
    own = {name: os.readlink(f"/proc/self/ns/{name}") for name in zygote_spaces()}
    assert all(warm_outside["kernel_ns"][name] != own[name] for name in zygote_spaces())
    if not GRADER_IS_ROOT:
        assert warm_outside["kernel_user_ns"] == warm_outside["holder_user_ns"] != os.readlink("/proc/self/ns/user")
    # and its control group is its notebook's (where the grader may make one)
    assert warm_outside["kernel_cgroup"] == warm_outside["sandbox_cgroup"]
    if GRADER_IS_ROOT:
        assert warm_outside["cgroup"] in warm_outside["kernel_cgroup"]


def open_files(fds: dict[str, str]) -> set[str]:
    """The files open past the standard streams, but IPython's history (its database and journal come and go)."""
    return {target for fd, target in fds.items()
            if int(fd) > 2 and target.startswith("/") and not target.startswith("/tmp/.ipython/")}


def test_two_warm_kernels_of_one_zygote_see_nothing_of_each_other(kernel_env):
    async def both():
        first, second = await started(), await started()
        try:
            assert first[0]._mct_kernel_pid and second[0]._mct_kernel_pid
            await printed(first[1], "open('/tmp/mine', 'w').write('first'); import os; os.getpid()")
            seen = json.loads(await printed(second[1], "import json, os\nprint(json.dumps({"
                                            "'tmp': sorted(os.listdir('/tmp')), 'pids': sorted(int(p) for p in "
                                            "os.listdir('/proc') if p.isdigit())}))"))
            spaces = [{name: os.readlink(f"/proc/{km._mct_kernel_pid}/ns/{name}") for name in zygote_spaces()}
                      for km, _ in (first, second)]
        finally:
            for km, kc in (first, second):
                await stopped(km, kc)
        return seen, spaces, zygote.current().process.pid
    seen, spaces, _ = run_apart(both())
    assert "mine" not in seen["tmp"]
    assert len(seen["pids"]) == 3  # bubblewrap's init, the holder, the kernel: its own only
    assert all(spaces[0][name] != spaces[1][name] for name in zygote_spaces())


def resident_bytes(pid: int) -> int:
    return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_the_zygote_s_memory_stays_flat_over_many_kernels(kernel_env):
    """Each kernel is the fork of a child, never of the zygote's own state: serving kernels leaves nothing."""
    async def kernels(count: int) -> None:
        for _ in range(count):
            km, kc = await started()
            assert km._mct_kernel_pid
            await stopped(km, kc)
    run_apart(kernels(2))
    before = resident_bytes(zygote.current().process.pid)
    run_apart(kernels(10))
    assert resident_bytes(zygote.current().process.pid) - before < 2 * 2**20


def test_the_kernel_ending_ends_its_sandbox(kernel_env):
    """A kernel that exits ends its sandbox and its launcher by itself, as a kernel started from cold does."""
    async def ended():
        km, kc = await started()
        launcher = km.provisioner.process
        kc.execute("import os; os._exit(0)")
        deadline = time.monotonic() + 3
        while launcher.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        status = launcher.poll()
        await stopped(km, kc)
        return status
    assert run_apart(ended()) is not None


def test_kernels_start_when_warm_kernels_are_off_or_the_zygote_died(kernel_env, monkeypatch):
    monkeypatch.setenv(protocol.WARM_KERNELS_ENV, "off")
    assert zygote.current() is None
    inside, outside = run_apart(_probe_one())
    assert outside["kernel"] is None and inside["course"] == []
    monkeypatch.delenv(protocol.WARM_KERNELS_ENV)
    first = zygote.current()
    first.process.kill()
    first.process.wait()
    inside, outside = run_apart(_probe_one())  # a new zygote starts in its place
    assert outside["kernel"] is not None and zygote.current() is not first


def test_a_kernel_starts_from_cold_when_the_zygote_fails_it(kernel_env, monkeypatch):
    """The zygote ends between the check that it runs and the request: this kernel starts from cold (the
    next one from a new zygote)."""
    real_spawn = zygote.Zygote.spawn

    def spawn_after_its_end(self, *args):
        self.process.kill()
        self.process.wait()
        return real_spawn(self, *args)

    monkeypatch.setattr(zygote.Zygote, "spawn", spawn_after_its_end)
    inside, outside = run_apart(_probe_one())
    assert outside["kernel"] is None  # started from cold, in a sandbox of its own
    assert_a_kernel_s_ids(inside["ids"])
    assert inside["course"] == []
    assert inside["status"]["CapEff"] == "0000000000000000"


def test_a_zygote_that_refuses_a_kernel_is_not_asked_again(kernel_env, monkeypatch):
    """A zygote that runs but cannot start a kernel (here it is pointed at pid 1 as the holder, which it refuses:
    root's, and no sandbox) would refuse the next ones too: that kernel starts from cold, and so does every later
    kernel of the grading process, without asking the zygote (which is stopped) or launching a holder first."""
    asked, real_spawn = [], zygote.Zygote.spawn

    def counted(self, *args):
        asked.append(args)
        return real_spawn(self, *args)

    monkeypatch.setattr(zygote.Zygote, "spawn", counted)
    monkeypatch.setattr(zygote, "holder_pid", lambda sandbox_pid, timeout=20.0: 1)
    first = zygote.current()
    for _ in range(2):
        inside, outside = run_apart(_probe_one())
        assert outside["kernel"] is None and inside["course"] == []
    assert len(asked) == 1 and zygote.current() is None and not first.alive()


def test_the_zygote_ends_when_its_grader_is_killed(kernel_env):
    """nbgrader's process killed outright (no atexit): its zygote sees its parent gone and ends by itself."""
    script = ("import sys, time\n"
              "from grading import zygote\n"
              "print(zygote.current().process.pid, flush=True)\n"
              "time.sleep(120)\n")
    out = kernel_env / "out"  # a file, not a pipe: a zygote left behind would hold a pipe open
    with out.open("w") as stdout:
        grader = subprocess.Popen([sys.executable, "-c", script], stdout=stdout, stderr=subprocess.DEVNULL,
                                  env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)})
        deadline = time.monotonic() + 60
        while not out.read_text().strip() and time.monotonic() < deadline and grader.poll() is None:
            time.sleep(0.05)
        pid = int(out.read_text())
        assert Path(f"/proc/{pid}").exists()
        grader.kill()
        grader.wait()
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists()
