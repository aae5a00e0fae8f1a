"""``SandboxKernelManager``: a kernel in the sandbox, and ``SandboxKernelClient``, the grader's side of its sockets."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import secrets
import shutil
import stat
import sys
import tempfile
import threading
import time
from pathlib import Path
from queue import Empty

import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.connect import channel_socket_types
from jupyter_client.manager import AsyncKernelManager
from traitlets import DottedObjectName, Type

from .. import cgroups, sandbox, zygote
from ..meter import status_bytes
from ..protocol import (CGROUP_NAME_ENV, GRADER_GROWTH_BYTES_ENV, INSIDE_IP, NOTEBOOK_MESSAGE_BYTES_ENV,
                        NOTEBOOK_SECONDS_ENV, PRIVATE_DIR_ENV, SANDBOX_HOLDER_ENV)

# Everything a kernel sends is counted as it arrives, frame by frame, before any of it is decoded: one message
# (all its frames together) may not pass MAX_MESSAGE_BYTES, and all of a notebook's messages on every channel
# (output, answers, comm and widget messages, replies) may not pass NOTEBOOK_MESSAGE_BYTES.  Past either, the
# kernel is stopped at once and the notebook is listed with the reason (SandboxedExecute says it).
MAX_MESSAGE_BYTES = 32 * 2**20  # above any lesson's answers (the largest, lesson 040's, are about 12 MB)
NOTEBOOK_MESSAGE_BYTES = int(os.environ.get(NOTEBOOK_MESSAGE_BYTES_ENV, 256 * 2**20))
QUEUED_MESSAGES = 32  # messages waiting to be read on a socket: past that ZeroMQ drops a flood, unread
KERNEL_NOT_STARTED = ("the grading sandbox did not start (bubblewrap failed: its message is in this log): the "
                      "notebook was not graded; this is the grading machine's set-up, not the student's work")
# A last wall for what ZeroMQ holds before any of it can be counted (it hands over a message only once all its
# frames have arrived, and no option of its limits their number): while a kernel runs, the grader's own resident
# memory may not grow by more than GRADER_GROWTH_BYTES over what it was when the kernel started.
GRADER_GROWTH_BYTES = int(os.environ.get(GRADER_GROWTH_BYTES_ENV, 192 * 2**20))
WATCH_SECONDS = 0.02
SOCKETS_NOT_FOUND = "the grading kernel did not make its sockets in time (or made something else in their place)"
SOCKET_WAIT_SECONDS = 60.0
END_POLL_SECONDS = 0.005  # how often a killed kernel's end is looked for (see SandboxKernelManager._async_wait)
# How long a channel whose connection was dropped waits to see whether the kernel ended (then it says nothing)
# before it stops the kernel for a message past MAX_MESSAGE_BYTES (see CountedChannel).
CUT_GRACE_SECONDS = 1.0
IOPUB_CONNECT_SECONDS = 0.2  # silence on the output channel that means it is not connected yet (jupyter_client's)


class MessageBudget:
    """What one kernel has sent so far, and why it was stopped (None while it keeps within its budget)."""

    def __init__(self, stop, alive=lambda: True) -> None:
        self.received = 0
        self.stopped: str | None = None
        self.reason: str | None = None  # why it was stopped, in a few words (stopped says what that cost)
        self._stop = stop
        self.alive = alive  # whether the kernel still runs (its launcher has not ended)

    def admit(self, message_bytes: int, frame_bytes: int) -> bool:
        """Count a frame just received (``message_bytes``: its message's so far); False once past a limit."""
        self.received += frame_bytes
        if self.stopped is None and message_bytes > MAX_MESSAGE_BYTES:
            self._refuse(f"the grading kernel sent a message of more than {MAX_MESSAGE_BYTES:,} bytes "
                         f"(the limit of one message)")
        elif self.stopped is None and self.received > NOTEBOOK_MESSAGE_BYTES:
            self._refuse(f"the grading kernel sent more than {NOTEBOOK_MESSAGE_BYTES:,} bytes in all "
                         f"(the limit of one notebook's messages)")
        return self.stopped is None

    def refuse(self, why: str) -> None:
        if self.stopped is None:
            self._refuse(why)

    def _refuse(self, why: str) -> None:
        self.reason = why
        self.stopped = (f"{why}: the kernel was stopped, the cells below did not run and their lessons get no "
                        f"points; this notebook needs a human look")
        self._stop()


GRADER_PEAK_LOG = "the grader's peak resident memory so far"  # logged after each notebook (tests read it)


def peak_resident_bytes() -> int:
    """This process's peak resident memory (VmHWM of its own /proc/self/status; 0 where there is none)."""
    return status_bytes("VmHWM") or 0


def resident_bytes() -> int:
    """This process's resident memory (VmRSS of its own /proc/self/status; 0 where there is none)."""
    return status_bytes("VmRSS") or 0


class GrowthWatch:
    """A thread that stops the kernel (through its budget) once this process has grown by GRADER_GROWTH_BYTES
    since the kernel started: what ZeroMQ buffers of a message not yet complete is counted there."""

    def __init__(self, budget: MessageBudget) -> None:
        self.budget, self.start = budget, resident_bytes()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="mct-growth-watch", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._done.wait(WATCH_SECONDS):
            grown = resident_bytes() - self.start
            if grown > GRADER_GROWTH_BYTES:
                self.budget.refuse(f"the grader's memory grew by {grown:,} bytes while this kernel ran, more than "
                                   f"{GRADER_GROWTH_BYTES:,} (messages held before they could be counted)")
                return

    def stop(self) -> None:
        """Stop watching, and wait for the thread's end: the judge measures reference solutions' memory with
        tracemalloc in this process next, and tracemalloc counts every thread's allocations (each look at
        /proc adds about 10 KB to a peak measured meanwhile: lesson 039's reference was once off by that much
        when the thread had not ended yet)."""
        self._done.set()
        if self._thread is not threading.current_thread():
            self._thread.join()


#: What a channel hands on in place of a message it refused (nbclient waits for its own messages' replies and
#: passes over one that answers nothing).
REFUSED = {"header": {"msg_type": "mct_refused", "msg_id": ""}, "parent_header": {}, "metadata": {},
           "content": {}, "msg_type": "mct_refused", "msg_id": "", "buffers": []}


class CountedChannel(AsyncZMQSocketChannel):
    """A channel that reads a message frame by frame and counts each against the kernel's budget before
    anything of it is decoded; a message past a limit is read to its end and dropped, never kept.

    A frame larger than MAX_MESSAGE_BYTES is not read at all: ZeroMQ drops the connection that sends it, and
    nothing the kernel sends on that channel arrives after it (a scratch cell's ``print`` of 40 MB left every
    lesson below it waiting for its answers, each until its cell's time limit).  So the channel watches its
    connection (:meth:`watch_connection`): once it is cut while the kernel still runs, the kernel is stopped
    for what it sent, as for any message past the budget, and the notebook runs again without that cell
    (SandboxedExecute)."""

    budget: MessageBudget | None = None
    _monitor = None  # the socket's connection events (ZeroMQ's monitor), once watched

    async def _recv(self, **kwargs):
        frames, size, kept = [], 0, True
        while True:
            frame = await self.socket.recv(copy=False)
            size += len(frame)
            if kept and self.budget is not None and not self.budget.admit(size, len(frame)):
                kept, frames = False, []
            elif self.budget is not None and not kept:
                self.budget.received += len(frame)
            if kept:
                frames.append(frame.bytes)
            if not frame.more:
                break
        if not kept or (self.budget is not None and self.budget.stopped):
            return dict(REFUSED)
        _, message = self.session.feed_identities(frames)
        return self.session.deserialize(message)

    def watch_connection(self) -> None:
        """Be told when ZeroMQ drops this channel's connection (see the class's docstring)."""
        self._monitor = self.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)

    async def get_msg(self, timeout: float | None = None):
        if self._monitor is None:
            return await super().get_msg(timeout)
        poller = zmq.asyncio.Poller()
        poller.register(self.socket, zmq.POLLIN)
        poller.register(self._monitor, zmq.POLLIN)
        ready = dict(await poller.poll(None if timeout is None else int(timeout * 1000)))
        if self._monitor in ready:
            await self._monitor.recv_multipart()  # (the only event watched: a connection dropped)
            await self._connection_cut()
        if self.socket in ready:
            return await self._recv()
        if self._monitor in ready:
            return dict(REFUSED)  # (a message that answers nothing: nbclient passes over it)
        raise Empty

    async def _connection_cut(self) -> None:
        """The connection was dropped: by a kernel that ended (it closes its sockets as it goes), or by ZeroMQ for
        a frame past MAX_MESSAGE_BYTES while the kernel runs on; the latter stops the kernel."""
        budget = self.budget
        if budget is None or budget.stopped:
            return
        deadline = time.monotonic() + CUT_GRACE_SECONDS
        while time.monotonic() < deadline:  # a kernel that ended: its launcher ends within milliseconds
            if not budget.alive():
                return
            await asyncio.sleep(END_POLL_SECONDS * 4)
        budget.refuse(f"the grading kernel sent a message of more than {MAX_MESSAGE_BYTES:,} bytes (the limit of "
                      f"one message), which cut its connection to the grader")

    def close(self) -> None:
        monitor, self._monitor = self._monitor, None
        if monitor is not None:
            try:
                self.socket.disable_monitor()
            except zmq.ZMQError:
                pass
            monitor.close(linger=0)
        super().close()

    stop = close


def _bounded(socket):
    """A socket of the grader's side: ZeroMQ refuses, unread, any frame larger than MAX_MESSAGE_BYTES (it drops
    the connection that sends it) and queues at most QUEUED_MESSAGES messages."""
    socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
    socket.setsockopt(zmq.RCVHWM, QUEUED_MESSAGES)
    return socket


def open_without_links(root: str, inside: str) -> int:
    """An O_PATH descriptor of the Unix socket at ``inside`` under ``root`` (the sandbox's own root), reached
    one folder at a time without following any symbolic link (a link the kernel made is refused, not followed).

    ``root`` itself (``/proc/<pid>/root``) is the kernel's mount namespace: followed on purpose."""
    folder = os.open(root, os.O_PATH | os.O_DIRECTORY)
    try:
        *parents, name = [part for part in inside.split("/") if part]
        for part in parents:
            child = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder)
            os.close(folder)
            folder = child
        found = os.open(name, os.O_PATH | os.O_NOFOLLOW, dir_fd=folder)
    finally:
        os.close(folder)
    if not stat.S_ISSOCK(os.fstat(found).st_mode):
        os.close(found)
        raise OSError(f"{inside} is not a socket (a link or a file in its place): not followed")
    return found


class SandboxKernelClient(AsyncKernelClient):
    """The grader's side of a kernel's sockets: every message counted before it is decoded, none too large.

    ZeroMQ checks each frame's announced size before it reads it (``MAXMSGSIZE``) and drops a
    connection that sends a larger one; :class:`CountedChannel` counts every frame of every message,
    on every channel, against the kernel's :class:`MessageBudget`; no more than QUEUED_MESSAGES
    messages wait to be read.  No heartbeat channel (the manager watches the kernel's process): one
    socket fewer that a kernel could write to.  A sandboxed kernel's sockets are reached through the
    descriptors its manager opened without following links (``/proc/self/fd/N``)."""

    shell_channel_class = Type(CountedChannel)
    iopub_channel_class = Type(CountedChannel)
    stdin_channel_class = Type(CountedChannel)
    control_channel_class = Type(CountedChannel)

    def start_channels(self, shell=True, iopub=True, stdin=True, hb=True, control=True):
        super().start_channels(shell=shell, iopub=iopub, stdin=stdin, hb=False, control=control)
        budget = getattr(self.parent, "mct_budget", None)
        for channel in (self._shell_channel, self._iopub_channel, self._stdin_channel, self._control_channel):
            if channel is not None:
                channel.budget = budget
                if budget is not None:
                    channel.watch_connection()

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        """Return once the kernel answers on its shell channel and its output channel is connected, with every
        message it sent so far read and dropped, as jupyter_client's ``wait_for_ready`` does, but without its
        last step: a fifth of a second of silence waited for on the output channel, idle, for every kernel.

        The kernel's own ``idle`` status for the ``kernel_info`` request it answered is the last message it
        sends before it waits for work: once that arrived, everything before it has been read.  A request
        whose reply comes but whose ``idle`` does not within IOPUB_CONNECT_SECONDS (the output channel not yet
        connected: ZeroMQ drops what a subscriber missed) is asked again, as jupyter_client asks again."""
        deadline = time.monotonic() + (float("inf") if timeout is None else timeout)
        while True:
            self.kernel_info()
            try:
                reply = await self.shell_channel.get_msg(timeout=1)
            except Empty:
                reply = None
            if reply is not None and reply.get("msg_type") == "kernel_info_reply" \
                    and await self._idle_after(reply["parent_header"].get("msg_id")):
                self._handle_kernel_info_reply(reply)
                return
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")

    async def _idle_after(self, request: str | None) -> bool:
        """Read (and drop) the output channel's messages up to the kernel's ``idle`` for ``request``; False
        when the channel stays silent for IOPUB_CONNECT_SECONDS before it."""
        while True:
            try:
                message = await self.iopub_channel.get_msg(timeout=IOPUB_CONNECT_SECONDS)
            except Empty:
                return False
            if message.get("msg_type") == "status" and message["content"].get("execution_state") == "idle" \
                    and message["parent_header"].get("msg_id") == request:
                return True

    def stop_channels(self) -> None:
        super().stop_channels()
        if isinstance(self.parent, SandboxKernelManager):
            self.parent._mct_client_stopped = True
            self.parent._mct_release_sockets()

    def _make_url(self, channel: str) -> str:
        fds = getattr(self.parent, "_mct_socket_fds", None)
        return f"ipc:///proc/self/fd/{fds[channel]}" if fds else super()._make_url(channel)

    def _create_connected_socket(self, channel: str, identity: bytes | None = None):
        socket = _bounded(self.context.socket(channel_socket_types[channel]))
        socket.linger = 1000
        if identity:
            socket.identity = identity
        socket.connect(self._make_url(channel))
        return socket


_swept = False


def _sweep_once() -> None:
    """Once a grading process: remove the kernel groups of graders that were killed (grading.cgroups)."""
    global _swept
    if not _swept:
        _swept = True
        cgroups.sweep_orphans()


# The thread that finds the sandbox of a kernel launched ahead and has the zygote fork the kernel into it, while
# the notebook before runs (one kernel is launched ahead at a time: grading.preprocessors.spare).
_FORKS_AHEAD = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="mct-fork-ahead")


class SandboxKernelManager(AsyncKernelManager):
    """A kernel in the sandbox (:mod:`grading.sandbox`), and everything of it gone after it.

    Its sockets live in the sandbox's own ``/tmp`` (no host folder is writable by the kernel): the
    connection file names them as the kernel sees them, and once the sandbox runs, this side reaches
    them through ``/proc/<pid>/root``.  The connection file sits in a folder of the grader's own that
    the kernel never sees, and nothing the kernel made is ever followed, changed or removed from this
    side.  The kernel's control group (:mod:`grading.cgroups`) is emptied and removed with it.
    Without the sandbox (``MCT_SANDBOX=off``) the sockets are in that private folder."""

    client_class = DottedObjectName("grading.preprocessors.kernelmanager.SandboxKernelClient")
    # What km.client() builds: AsyncKernelManager names its client class here, and a client_class alone was
    # never read (the limits of SandboxKernelClient were not in effect before this line).
    client_factory = Type(SandboxKernelClient, klass=AsyncKernelClient)
    mct_budget: MessageBudget | None = None
    # The kernel's wall clock in seconds when not a whole notebook's (MCT_NOTEBOOK_SECONDS): a notebook run again
    # without a cell where its kernel died gets what is left of its time (SandboxedExecute).
    mct_notebook_seconds: int | None = None
    _mct_socket_fds: dict[str, int] | None = None

    # A kernel launched ahead (launch_ahead): the command and arguments it was launched with, until start_kernel
    # finishes its start.  Until then it is no started kernel of this manager's (has_kernel is False).
    _mct_ahead: tuple | None = None
    # Its sandbox found and, with a zygote, its kernel forked into it, in a thread meanwhile (_mct_sandbox_and_kernel)
    _mct_found_ahead: concurrent.futures.Future | None = None

    @property
    def has_kernel(self) -> bool:
        return super().has_kernel and self._mct_ahead is None

    async def launch_ahead(self, head_start: int, **kwargs) -> None:
        """Launch the kernel's process now; ``start_kernel`` finishes its start later (grading.preprocessors.spare).

        Everything of a start that does not wait for the kernel happens here: the private folder, the control
        group's name, the connection file, the launcher's process.  What waits for the kernel (its sandbox's pid,
        its sockets) and the grader's watch happen in ``start_kernel``.  The launcher's wall clock starts now,
        not then: it is given ``head_start`` seconds more than a notebook's (MCT_NOTEBOOK_SECONDS).  With warm
        kernels (grading.zygote) the kernel itself is forked into its sandbox now too, in a thread, so that it has
        started by the time its notebook takes it: about 65 ms a notebook less to wait for, measured on 2 cores."""
        kernel_cmd, kw = await self._async_pre_start_kernel(**kwargs)
        kw["env"] = {**(kw.get("env") or os.environ),
                     NOTEBOOK_SECONDS_ENV: str(sandbox.notebook_seconds() + head_start)}
        await self._mct_popen(kernel_cmd, kw)
        self._mct_ahead = (kernel_cmd, kw)
        if self._mct_sandboxed and self._mct_warm is not None:
            self._mct_found_ahead = _FORKS_AHEAD.submit(self._mct_sandbox_and_kernel, kernel_cmd)

    def launched_ahead_and_alive(self) -> bool:
        """Launched ahead, not started yet, and its launcher still running."""
        process = getattr(self.provisioner, "process", None)
        return self._mct_ahead is not None and process is not None and process.poll() is None

    async def discard_ahead(self) -> None:
        """Kill a kernel launched ahead and never started, and remove everything of it (control group, folder)."""
        self._mct_ahead = None
        found, self._mct_found_ahead = self._mct_found_ahead, None
        if found is not None:  # the zygote done with its sandbox first (a fork cut short is no zygote's failure)
            await asyncio.wait([asyncio.wrap_future(found)])  # (whatever it ended with: the kernel is stopped below)
        self._mct_stop()
        await self._async_wait()
        await self._async_cleanup_resources()

    async def _async_pre_start_kernel(self, **kwargs):
        if self._mct_ahead is not None:  # launched ahead: done then (nothing in kwargs changes a sandboxed launch)
            return self._mct_ahead
        base = Path(os.environ[PRIVATE_DIR_ENV]) / "runtime"
        base.mkdir(parents=True, exist_ok=True)
        self._mct_folder = Path(tempfile.mkdtemp(prefix="kernel-", dir=base))
        self._mct_sandboxed = sandbox.sandbox_wanted()
        self._mct_cgroup = cgroups.kernel_group_name(secrets.token_hex(6))
        _sweep_once()
        self.mct_budget = MessageBudget(self._mct_stop, self._mct_launcher_runs)
        self.connection_file = str(self._mct_folder / "kernel.json")
        self.ip = INSIDE_IP if self._mct_sandboxed else str(self._mct_folder / "kernel")
        return await super()._async_pre_start_kernel(**kwargs)

    async def _mct_popen(self, kernel_cmd, kw) -> None:
        """The launcher's process (grading.sandbox), told the name of its control group and, with a zygote
        (grading.zygote), that its sandbox runs a holder the kernel is forked into, not the kernel itself."""
        env = {**(kw.get("env") or os.environ), CGROUP_NAME_ENV: self._mct_cgroup}
        env.pop(SANDBOX_HOLDER_ENV, None)
        if self.mct_notebook_seconds is not None:
            env[NOTEBOOK_SECONDS_ENV] = str(self.mct_notebook_seconds)
        self._mct_warm = zygote.current() if self._mct_sandboxed else None
        if self._mct_warm is not None:
            env[SANDBOX_HOLDER_ENV] = zygote.HOLDER_MARK
        kw["env"] = env
        await super()._async_launch_kernel(kernel_cmd, **kw)

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        if self._mct_ahead is None:
            await self._mct_popen(kernel_cmd, kw)
        self._mct_ahead = None
        found, self._mct_found_ahead = self._mct_found_ahead, None
        if self._mct_sandboxed:
            pid, kernel = await (asyncio.wrap_future(found) if found is not None else asyncio.get_running_loop()
                                 .run_in_executor(None, self._mct_sandbox_and_kernel, kernel_cmd))
            if pid is None:
                raise RuntimeError(KERNEL_NOT_STARTED)
            self._mct_kernel_pid = None  # (the kernel's own pid where the zygote forked it: tests read it)
            if isinstance(kernel, RuntimeError):  # the zygote failed: this kernel starts from cold, in a new sandbox
                pid = await self._mct_relaunch_cold(kernel_cmd, kw, kernel)
            else:
                self._mct_kernel_pid = kernel
            self.ip = f"/proc/{pid}/root{INSIDE_IP}"  # the kernel's sockets, from this side (never by this path)
            self._mct_socket_fds = await self._mct_open_sockets(pid)
        self._mct_watch = GrowthWatch(self.mct_budget)

    async def _mct_relaunch_cold(self, kernel_cmd, kw: dict, why: Exception) -> int:
        """Start this kernel from cold after the zygote failed: the launcher (and its sandbox) stopped, its control
        group removed, and a launcher started as without a zygote; the new sandbox's pid."""
        print(f"grading.zygote: {why.__cause__ or why}; this kernel starts from cold", file=sys.stderr)
        await asyncio.get_running_loop().run_in_executor(None, self.provisioner.process.wait)
        cgroups.remove(self._mct_cgroup)
        env = {name: value for name, value in kw["env"].items() if name != SANDBOX_HOLDER_ENV}
        await super()._async_launch_kernel(kernel_cmd, **{**kw, "env": env})
        return await self._mct_sandbox_pid()

    def _mct_sandbox_and_kernel(self, kernel_cmd: list[str]) -> tuple[int | None, int | RuntimeError | None]:
        """(the pid of the sandbox the launcher started, once it runs; with a zygote, the pid of the kernel it forked
        into it, or the RuntimeError that says why it could not): None for a sandbox that never ran.  Blocking: run
        in a thread, ahead (launch_ahead) or by start_kernel."""
        pid = sandbox.sandbox_pid(self.provisioner.process.pid)
        if pid is None or self._mct_warm is None:
            return pid, None
        try:
            return pid, self._mct_fork_kernel(self._mct_warm, pid, kernel_cmd)
        except RuntimeError as error:
            return pid, error

    async def _mct_sandbox_pid(self) -> int:
        """The pid of the sandbox the launcher started (bubblewrap's, seen from here), once it runs."""
        pid = await asyncio.get_running_loop().run_in_executor(
            None, sandbox.sandbox_pid, self.provisioner.process.pid)
        if pid is None:
            raise RuntimeError(KERNEL_NOT_STARTED)
        return pid

    def _mct_fork_kernel(self, warm: zygote.Zygote, pid: int, kernel_cmd: list[str]) -> int:
        """Have the zygote fork the kernel into the sandbox whose holder runs below ``pid``; the kernel's pid.
        Any failure stops the launcher (and its sandbox): the kernel did not start."""
        holder = zygote.holder_pid(pid)
        try:
            if holder is None:
                raise RuntimeError("the sandbox's holder did not start")
            module = kernel_cmd.index("grading.sandbox") if "grading.sandbox" in kernel_cmd else 0
            return warm.spawn(holder, self._mct_cgroup,
                              sandbox.inside_arguments(kernel_cmd[module + 1:], self.connection_file))
        except (OSError, RuntimeError, ValueError) as error:
            sandbox_ran = self.provisioner.process.poll() is None
            self._mct_stop()
            if isinstance(error, zygote.Refused) and sandbox_ran:  # it will refuse the next kernels too: never ask
                zygote.give_up(str(error))  # again (a sandbox that ended meanwhile explains a refusal by itself)
            raise RuntimeError(f"{KERNEL_NOT_STARTED} ({error})") from error

    async def _mct_open_sockets(self, pid: int) -> dict[str, int]:
        """Wait for the kernel's five sockets, then open each without following links (see open_without_links).

        The kernel binds them as it starts, before it runs any cell; from then on this side connects through
        ``/proc/self/fd/N``, the very socket found here: a kernel that later puts a link (or another socket) in
        its place is never reached through it, reconnections included."""
        deadline = time.monotonic() + SOCKET_WAIT_SECONDS
        channels = ("shell", "iopub", "stdin", "control", "hb")
        fds: dict[str, int] = {}
        try:
            for channel in channels:
                inside = f"{INSIDE_IP}-{getattr(self, f'{channel}_port')}"
                while channel not in fds:
                    try:
                        fds[channel] = open_without_links(f"/proc/{pid}/root", inside)
                    except FileNotFoundError:
                        if time.monotonic() > deadline or self.provisioner.process.poll() is not None:
                            raise RuntimeError(SOCKETS_NOT_FOUND) from None
                        await asyncio.sleep(0.02)
        except BaseException:
            for fd in fds.values():
                os.close(fd)
            raise
        return fds

    def _make_url(self, channel: str) -> str:
        fds = self._mct_socket_fds
        return f"ipc:///proc/self/fd/{fds[channel]}" if fds else super()._make_url(channel)

    def _create_connected_socket(self, channel: str, identity: bytes | None = None):
        return _bounded(super()._create_connected_socket(channel, identity))

    _mct_client_stopped = False

    def _mct_release_sockets(self) -> None:
        """Close the socket descriptors once nothing connects through them: this manager's control socket closed
        and the client's channels stopped (a number closed earlier could be the next kernel's by the time a
        socket still open reconnects through it)."""
        fds = self._mct_socket_fds
        if fds and self._control_socket is None and self._mct_client_stopped:
            self._mct_socket_fds = None
            for fd in fds.values():
                os.close(fd)

    async def _async_wait(self, pollinterval: float = 0.1) -> None:
        """Wait for the kernel's end, looking every ``END_POLL_SECONDS`` (jupyter_client looks every 100 ms).

        A kernel is killed at the end of every notebook (``shutdown_kernel = "immediate"``), and its launcher
        ends a few milliseconds later: jupyter_client's first look comes too early, so each notebook waited
        100 ms more for nothing (112 ms measured for a shutdown, each time)."""
        await super()._async_wait(pollinterval=min(pollinterval, END_POLL_SECONDS))

    def _mct_launcher_runs(self) -> bool:
        """Whether the kernel's launcher still runs (it ends within milliseconds of the kernel: grading.sandbox)."""
        process = getattr(self.provisioner, "process", None)
        return process is not None and process.poll() is None

    def _mct_stop(self) -> None:
        """Stop the kernel at once (its launcher killed: bubblewrap dies with it, and the kernel with bubblewrap)."""
        process = getattr(self.provisioner, "process", None)
        if process is not None and process.poll() is None:
            process.kill()

    def cleanup_ipc_files(self) -> None:
        """A sandboxed kernel's sockets vanish with its /tmp: nothing to remove (and a path through /proc
        of a pid that may be another process's by now is never touched)."""
        if not getattr(self, "_mct_sandboxed", True):
            super().cleanup_ipc_files()

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if restart:
            return
        watch = getattr(self, "_mct_watch", None)
        if watch is not None:
            watch.stop()
        cgroups.remove(getattr(self, "_mct_cgroup", ""))
        self._mct_release_sockets()
        folder = getattr(self, "_mct_folder", None)
        if folder is not None:  # the grader's own folder: the connection file (and unsandboxed, the sockets)
            shutil.rmtree(folder, ignore_errors=True)

    # nbclient calls cleanup_resources itself when the kernel is already dead (a notebook stopped at a limit,
    # killed for what it sent or timed out), and AsyncKernelManager binds that name to jupyter_client's own
    # coroutine, not to the override above: the control group, the watch's thread, the socket descriptors and
    # the folder were left behind for exactly those notebooks.
    cleanup_resources = _async_cleanup_resources
