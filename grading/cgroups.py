"""Limits for everything one grading kernel starts: a control group of its own, where the grader can make one.

A notebook can start processes (a fork, a memory bomb across children), so limits per
process (``setrlimit``) do not bound what one notebook takes.  A control group does:
memory (every process of the sandbox together, its tmpfs included), the number of
processes, and CPU time (a quota of one core, for as long as the kernel lives).

:func:`enter` puts the calling process (the kernel's launcher, before it starts the
sandbox) into a new group with those limits: cgroup v2 where the grader may create a
group with the memory and pids controllers, else cgroup v1 (memory, pids and cpu
hierarchies, as on hosts that still mount them), else nothing.  :func:`remove` kills
what is left in the group and deletes it.  Without a group, the sandbox falls back to
limits per process (``grading.sandbox.LIMITS``: address space, processes of the
kernel's own uid when the grader is root, CPU time): a weaker guarantee, which every
report of such a run states (:func:`describe`).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

ROOT_V2 = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"))
ROOT_V1 = Path("/sys/fs/cgroup")
PREFIX = "mct-kernel-"  # a kernel's group (its name reaches the launcher in grading.protocol.CGROUP_NAME_ENV)


@dataclass(frozen=True)
class Limits:
    memory_bytes: int
    processes: int
    cpus: float = 1.0


def _own_path(controller: str | None) -> str | None:
    """This process's group in a hierarchy: the v2 one (``controller`` None) or a v1 controller's."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if controller is None and number == "0" and controllers == "":
            return path
        if controller is not None and controller in controllers.split(","):
            return path
    return None


def _v2_base() -> Path | None:
    own = _own_path(None)
    if own is None:
        return None
    for root in ROOT_V2:
        base = root / own.lstrip("/")
        controllers = base / "cgroup.controllers"
        if controllers.is_file() and {"memory", "pids"} <= set(controllers.read_text().split()):
            return base
    return None


def _v1_bases() -> dict[str, Path] | None:
    bases = {}
    for controller in ("memory", "pids", "cpu"):
        own = _own_path(controller)
        base = ROOT_V1 / controller / (own or "/").lstrip("/")
        if own is None or not (base / "cgroup.procs").is_file():
            if controller == "cpu":
                continue  # CPU is also bounded by the wall-clock limit: memory and pids are what matter
            return None
        bases[controller] = base
    return bases


def kernel_group_name(token: str) -> str:
    """A new kernel's group: named after this (the grading) process, so that one left by a grader that was
    killed can be told from a live grader's (:func:`sweep_orphans`)."""
    return f"{PREFIX}{os.getpid()}-{token}"


def _owner(name: str) -> int | None:
    """The grading process that made kernel group ``name`` (None: not named by kernel_group_name)."""
    owner = name[len(PREFIX):].split("-", 1)[0]
    return int(owner) if name.startswith(PREFIX) and owner.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def sweep_orphans() -> list[str]:
    """Remove the kernel groups whose grading process has ended (killed outright, it could not remove them):
    what is left in them is killed first.  A live grader's groups are never touched, even empty (its launcher
    may be between making its group and entering it).  The names removed."""
    bases = [base for base in [_v2_base(), *(_v1_bases() or {}).values()] if base is not None]
    names = set()
    for base in bases:
        try:
            names.update(entry.name for entry in base.iterdir() if entry.name.startswith(PREFIX))
        except OSError:
            continue
    orphans = sorted(name for name in names if (owner := _owner(name)) is not None and not _alive(owner))
    for name in orphans:
        remove(name)
    return orphans


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:  # a file of the cgroup filesystem, never a link
        handle.write(value)


def groups(name: str) -> list[Path]:
    """The directories of group ``name`` that exist (one in v2, one per controller in v1): a process written
    to their ``cgroup.procs`` joins it."""
    found = []
    base = _v2_base()
    if base is not None and (base / name).is_dir():
        found.append(base / name)
    for base in (_v1_bases() or {}).values():
        if (base / name).is_dir():
            found.append(base / name)
    return found


def enter(name: str, limits: Limits) -> str | None:
    """Create group ``name`` with ``limits`` and move this process into it; say how (None: no group)."""
    base = _v2_base()
    if base is not None:
        group = base / name
        try:
            group.mkdir()
            _write(group / "memory.max", str(limits.memory_bytes))
            if (group / "memory.swap.max").is_file():
                _write(group / "memory.swap.max", "0")
            _write(group / "pids.max", str(limits.processes))
            if (group / "cpu.max").is_file():
                _write(group / "cpu.max", f"{int(limits.cpus * 100_000)} 100000")
            _write(group / "cgroup.procs", str(os.getpid()))
            return "cgroup v2 (memory, processes and CPU of the whole sandbox)"
        except OSError:
            _remove_dirs([group])
    bases = _v1_bases()
    if bases is None:
        return None
    made = []
    try:
        for controller, base in bases.items():
            group = base / name
            group.mkdir()
            made.append(group)
            if controller == "memory":
                _write(group / "memory.limit_in_bytes", str(limits.memory_bytes))
                if (group / "memory.memsw.limit_in_bytes").is_file():
                    _write(group / "memory.memsw.limit_in_bytes", str(limits.memory_bytes))
            elif controller == "pids":
                _write(group / "pids.max", str(limits.processes))
            else:
                _write(group / "cpu.cfs_period_us", "100000")
                _write(group / "cpu.cfs_quota_us", str(int(limits.cpus * 100_000)))
        for group in made:
            _write(group / "cgroup.procs", str(os.getpid()))
    except OSError:
        _remove_dirs(made)
        return None
    return f"cgroup v1 ({', '.join(sorted(bases))} of the whole sandbox)"


def _pids(group: Path) -> list[int]:
    try:
        return [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def remove(name: str, patience: float = 5.0) -> None:
    """Kill every process left in group ``name`` and delete it."""
    made = groups(name)
    deadline = time.monotonic() + patience
    pause = 0.001  # killed processes are gone within a few milliseconds: look again soon, then less often
    while made and time.monotonic() < deadline:
        pids = {pid for group in made for pid in _pids(group)}
        if not pids:
            break
        for group in made:
            if (group / "cgroup.kill").is_file():
                try:
                    _write(group / "cgroup.kill", "1")
                except OSError:
                    pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(pause)
        pause = min(2 * pause, 0.02)
    _remove_dirs(made)


def _remove_dirs(groups: list[Path]) -> None:
    for group in groups:
        try:
            group.rmdir()
        except OSError:
            pass


def peak_memory(name: str) -> int | None:
    """The most memory group ``name`` has used (bytes), where the hierarchy records it."""
    for group in groups(name):
        for file in ("memory.peak", "memory.max_usage_in_bytes"):
            if (group / file).is_file():
                try:
                    return int((group / file).read_text())
                except (OSError, ValueError):
                    pass
    return None


def probe() -> str | None:
    """How this grader would bound a sandbox, found by making (and removing) a group in a child."""
    name = f"{PREFIX}probe-{os.getpid()}"
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        how = enter(name, Limits(2**30, 64)) or ""
        os.write(write, how.encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as handle:
        how = handle.read()
    remove(name)
    return how or None


def describe(how: str | None) -> str:
    """One line for a grading report: the limits that held for each notebook."""
    if how:
        return f"limits per notebook: {how}"
    return ("NOTE: no control group could be made, so the limits are per process (address space, processes of "
            "the kernel's own user, CPU time): a notebook that starts many processes can use more memory in all")
