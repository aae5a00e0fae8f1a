"""The zygote: a warm Python that has imported a kernel's third-party modules, and forks each grading kernel.

Its text is run, never imported (``grading/zygote.py`` starts it)::

    python -s -S -c "<this file's text>" SOCKET PARENT_PID SITE_FOLDERS_JSON PREFIX

with an environment of a few names (no ``PYTHON*``).  ``-s -S``: no ``site``, no user folder, so the editable
install's finder of the course's checkout is never active here and nothing of ``shared``, ``grading`` or
``torch_extra`` is ever in this process's memory (the unredacted library holds answers); ``SITE_FOLDERS_JSON``
is the virtual environment's site-packages (and the folders its ``.pth`` files name), without the checkout.
This file imports the standard library and third-party modules only.

Used wherever the sandbox is on (grading.zygote.warm_wanted), the grader root or an ordinary user (the child then
enters bubblewrap's user namespaces as well: :func:`_user_namespaces`).  Measured on 2 cores: a kernel's
start, from its launch to its first answer, costs about 0.19 CPU-seconds warm against 0.40 cold, and the set-up
cell's ``import numpy`` 0.004 s against 0.07: about 0.3 s of a notebook's 1.5 (tests/test_warm_kernels.py holds
the isolation, and that the zygote's own memory stays flat over many kernels).

For each request on its Unix socket (in the grader's private 0700 folder, from its own user only) it forks a
child that makes itself a copy of the *holder*, the small process the sandbox's launcher started in the
notebook's bubblewrap sandbox in place of the kernel (grading/sandbox.py): the child joins the holder's control
group, takes its resource limits, enters its namespaces (ipc, uts, net, cgroup, pid, mount: the sandbox's root,
its own ``/tmp``; where the grader is not root, bubblewrap's user namespaces too), and forks the kernel, which is
born inside the sandbox's process namespace.  The kernel then takes the holder's environment (exactly
bubblewrap's), drops to the holder's unprivileged uid (with no groups where the grader is root) and no
capabilities (``no_new_privs``, as bubblewrap sets it), reseeds its random generators, and runs
``ipykernel_launcher`` as ``python -m`` would.  So everything that bounds a kernel (its namespaces, control
group, limits, uid, environment, ``/tmp``, the wall-clock ``timeout`` and the launcher's death) is the
sandbox's, as for a kernel started from cold; only the imports are done already.
"""

import ctypes
import fcntl
import json
import os
import random
import resource
import runpy
import select
import signal
import socket
import struct
import sys

WORK = "/tmp/work"  # grading.protocol.INSIDE_WORK (this script imports nothing of the course)
NAMESPACES = ("ipc", "uts", "net", "cgroup", "pid", "mnt")  # the mount namespace last: it changes what paths mean
PR_CAPBSET_DROP, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 4, 38, 47, 4
NS_GET_USERNS = 0xB701  # ioctl: the user namespace that owns a namespace
CAPABILITY_VERSION_3 = 0x20080522
LAST_CAPABILITY = 63  # dropping a capability the kernel does not know fails (EINVAL): passed over
THIRD_PARTY = ("numpy", "zmq", "tornado", "jupyter_client", "IPython", "ipykernel.kernelapp", "ipykernel.ipkernel",
               "ipykernel.zmqshell")
REQUEST_BYTES = 1 << 16
FD_TABLE_SIZE = 256  # the descriptor table every kernel is born with (see size_the_descriptor_table)
TABLE_KEEPER = FD_TABLE_SIZE - 1  # the descriptor that holds the table that large until the kernel is forked

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def warm_up() -> None:
    """Import what every kernel imports (no thread, no ZeroMQ context: a fork copies only the calling thread)."""
    import importlib
    for name in THIRD_PARTY:
        importlib.import_module(name)
    if len(os.listdir("/proc/self/task")) != 1:
        raise SystemExit("zygote: a thread started while importing; a fork of it would be unsafe")


def size_the_descriptor_table() -> None:
    """Hold a descriptor (``/dev/null``) at ``TABLE_KEEPER``, so that every kernel is forked with a table of
    ``FD_TABLE_SIZE`` entries: a fork copies the table as far as its highest open descriptor, so the zygote's child
    keeps this one open until it has forked the kernel, and the kernel closes it but keeps the table.

    Why: a kernel opens about 70 descriptors as it starts (its sockets, ZeroMQ's eventfds), its threads running
    already; Linux grows a table shared by threads only after an RCU grace period (``expand_fdtable``), which
    ``perf`` showed as about 13 ms of every kernel's start spent waiting, in a 64-entry table."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, TABLE_KEEPER, inheritable=False)
    os.close(null)


def serve(path: str, parent: int) -> None:
    """Fork a kernel for each request; end when the grader (our parent) is gone."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    os.chmod(path, 0o600)
    server.listen(16)
    print("ready", flush=True)
    while os.getppid() == parent:
        readable, _, _ = select.select([server], [], [], 1.0)
        if not readable:
            continue
        connection, _ = server.accept()
        child = os.fork()
        if child == 0:
            server.close()
            _child(connection)  # never returns
        connection.close()
        os.waitpid(child, 0)  # short: the child enters the sandbox, forks the kernel and ends


def _child(connection: socket.socket) -> None:
    code = 1
    try:
        pid = _enter_and_fork(connection)
        connection.sendall(json.dumps({"kernel": pid}).encode())
        code = 0
    except BaseException as error:  # the grader reads why, and starts this kernel from cold
        try:
            import traceback
            where = traceback.extract_tb(error.__traceback__)[-1]
            connection.sendall(json.dumps({"error": f"{type(error).__name__}: {error} "
                                                    f"(zygote_process.py line {where.lineno})"}).encode())
        except OSError:
            pass
    os._exit(code)


def _enter_and_fork(connection: socket.socket) -> int:
    uid = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
    if uid != os.getuid():
        raise PermissionError("a request from another user")
    message, fds, _, _ = socket.recv_fds(connection, REQUEST_BYTES, 2)
    request = json.loads(message)
    if len(fds) != 2:
        raise ValueError("a request without the launcher's stdout and stderr")
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    _close_all_but({0, 1, 2, connection.fileno(), TABLE_KEEPER})  # (the kernel closes the keeper: it is forked below)
    holder = int(request["holder"])
    state = _holder_state(holder)
    for procs in request["cgroup_procs"]:  # the notebook's control group (the launcher made it and is in it)
        with open(procs, "w") as handle:
            handle.write(str(os.getpid()))
    for limit, value in state["limits"].items():
        resource.setrlimit(limit, value)
    root = os.open(f"/proc/{holder}/root", os.O_RDONLY | os.O_DIRECTORY)
    spaces = {name: os.open(f"/proc/{holder}/ns/{name}", os.O_RDONLY) for name in NAMESPACES}
    owner, inner = _user_namespaces(holder, spaces["ipc"])
    for name, space in [("user (the sandbox's)", owner), *((name, spaces[name]) for name in NAMESPACES),
                        ("user (the kernel's)", inner)]:
        if space is not None:
            _check(_libc.setns(space, 0), f"setns {name}")
            os.close(space)
    os.fchdir(root)  # the sandbox's root, whatever the namespace's own root mount is (bubblewrap pivots)
    os.chroot(".")
    os.close(root)
    os.chdir(WORK)
    kernel = os.fork()  # born in the sandbox's process namespace: killed with it
    if kernel == 0:
        connection.close()
        os.close(TABLE_KEEPER)  # its table stays as large (see size_the_descriptor_table)
        _become_kernel(state, request["argv"])
    return kernel


def _user_namespaces(holder: int, ipc: int) -> tuple[int | None, int | None]:
    """Where the grader is not root, bubblewrap made the sandbox in a user namespace of its own (which owns the
    sandbox's other namespaces) and ran the holder in one more inside it: the zygote enters the first before the
    others (it then has the capabilities it needs there, as their owner's user) and the holder's last.  The two
    as open files, each None where the zygote is in it already (a root grader: no user namespace at all)."""
    mine = os.stat("/proc/self/ns/user")
    owner = fcntl.ioctl(ipc, NS_GET_USERNS)
    inner = os.open(f"/proc/{holder}/ns/user", os.O_RDONLY)
    seen = [(os.fstat(space).st_dev, os.fstat(space).st_ino) for space in (owner, inner)]
    if seen[0] == (mine.st_dev, mine.st_ino):
        os.close(owner)
        owner = None
    if seen[1] == (mine.st_dev, mine.st_ino) or (owner is not None and seen[1] == seen[0]):
        os.close(inner)
        inner = None
    return owner, inner


def _close_all_but(keep: set[int]) -> None:
    for fd in sorted(int(name) for name in os.listdir("/proc/self/fd")):
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _holder_state(holder: int) -> dict:
    """What the kernel takes of the holder: its uid and gid, environment and resource limits."""
    status = dict(line.split(":", 1) for line in open(f"/proc/{holder}/status").read().splitlines() if ":" in line)
    uid, gid = int(status["Uid"].split()[0]), int(status["Gid"].split()[0])
    if uid == 0 or gid == 0:
        raise PermissionError("the holder runs as root: no kernel is started from it")
    uid, gid = _inside(holder, "uid_map", uid), _inside(holder, "gid_map", gid)
    with open(f"/proc/{holder}/environ", "rb") as handle:
        pairs = [entry.split(b"=", 1) for entry in handle.read().split(b"\0") if b"=" in entry]
    with open(f"/proc/{holder}/limits") as handle:
        limits = _parse_limits(handle.read())
    return {"uid": uid, "gid": gid, "limits": limits,
            "env": {os.fsdecode(key): os.fsdecode(value) for key, value in pairs}}


def _inside(holder: int, map_name: str, outside: int) -> int:
    """The id that ``outside`` (as this process sees it) is in the holder's user namespace (the same, where the
    grader is root: then there is none)."""
    with open(f"/proc/{holder}/{map_name}") as mapping:
        for line in mapping:
            first_inside, first_outside, count = (int(field) for field in line.split())
            if first_outside <= outside < first_outside + count:
                return first_inside + outside - first_outside
    raise PermissionError(f"the holder's {map_name} does not map {outside}")


#: The lines of /proc/<pid>/limits (prlimit on another process needs CAP_SYS_RESOURCE, which a container may lack).
LIMIT_LINES = {"Max cpu time": "RLIMIT_CPU", "Max file size": "RLIMIT_FSIZE", "Max data size": "RLIMIT_DATA",
               "Max stack size": "RLIMIT_STACK", "Max core file size": "RLIMIT_CORE", "Max resident set": "RLIMIT_RSS",
               "Max processes": "RLIMIT_NPROC", "Max open files": "RLIMIT_NOFILE",
               "Max locked memory": "RLIMIT_MEMLOCK", "Max address space": "RLIMIT_AS",
               "Max pending signals": "RLIMIT_SIGPENDING", "Max msgqueue size": "RLIMIT_MSGQUEUE",
               "Max nice priority": "RLIMIT_NICE", "Max realtime priority": "RLIMIT_RTPRIO",
               "Max realtime timeout": "RLIMIT_RTTIME"}


def _parse_limits(text: str) -> dict[int, tuple[int, int]]:
    limits = {}
    for line in text.splitlines()[1:]:
        for label, name in LIMIT_LINES.items():
            if line.startswith(label + " ") and hasattr(resource, name):
                soft, hard = line[len(label):].split()[:2]
                limits[getattr(resource, name)] = tuple(resource.RLIM_INFINITY if value == "unlimited"
                                                        else int(value) for value in (soft, hard))
    if len(limits) < 10:
        raise ValueError("the holder's resource limits could not be read")
    return limits


def _become_kernel(state: dict, argv: list[str]) -> None:
    code = 1
    try:
        os.setsid()
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()  # unsetenv each: the C environment too
        os.environ.update(state["env"])
        sys.dont_write_bytecode = bool(os.environ.get("PYTHONDONTWRITEBYTECODE"))
        _drop_privileges(state["uid"], state["gid"])
        random.seed()
        import numpy
        numpy.random.seed()
        tree = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
        sys.path[:] = [os.getcwd(), *tree, *BASE_PATH]  # as `python -m` makes it (the launcher removes the first)
        sys.path_importer_cache.clear()
        import importlib
        importlib.invalidate_caches()
        sys.argv = ["-m", *argv]
        runpy.run_module("ipykernel_launcher", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _drop_privileges(uid: int, gid: int) -> None:
    """As setpriv --clear-groups --bounding-set=-all --inh-caps=-all under bubblewrap (a root grader's), or as
    bubblewrap leaves its command in a user namespace (an ordinary user's: groups kept): no capability
    left or gainable, ``no_new_privs``; then dumpable again (a credential change clears it, which would make
    the kernel's own /proc/self files root's: the meter reads and writes them)."""
    if _may_set_groups():
        os.setgroups([])
    for capability in range(LAST_CAPABILITY + 1):
        if _libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
            _check(-1, f"drop capability {capability}")
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    _clear_capabilities()  # (a change from root clears them; in a user namespace the uid does not change)
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(_libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0), "dumpable")


def _may_set_groups() -> bool:
    """Whether this process may set its groups: not in a user namespace whose ``setgroups`` is denied (bubblewrap
    denies it; the kernel then keeps the grader's groups, unmapped, as a kernel started from cold does)."""
    try:
        with open("/proc/self/setgroups") as setgroups:
            return setgroups.read().strip() != "deny"
    except OSError:
        return True


def _clear_capabilities() -> None:
    """No capability left: effective, permitted, inheritable and ambient, as bubblewrap leaves a kernel."""
    header = (ctypes.c_uint32 * 2)(CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(_libc.capset(header, data), "clear capabilities")
    _check(_libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clear ambient capabilities")


BASE_PATH: list[str] = []  # the kernel's sys.path after its tree: the standard library's folders, then the sites


def prepare(sites: list[str], prefix: str) -> None:
    """Look for modules where a kernel would (without the checkout), then import what a kernel imports."""
    BASE_PATH[:] = [entry for entry in sys.path if entry] + sites  # sys.path[0] is "" (-c): the folder "/"
    sys.path[:] = BASE_PATH
    sys.prefix = sys.exec_prefix = prefix  # a virtual environment's, as site would have set it
    warm_up()


def main(argv: list[str]) -> None:
    path, parent, sites, prefix = argv[0], int(argv[1]), json.loads(argv[2]), argv[3]
    prepare(sites, prefix)
    size_the_descriptor_table()
    serve(path, parent)


if __name__ == "__main__":
    main(sys.argv[1:])
