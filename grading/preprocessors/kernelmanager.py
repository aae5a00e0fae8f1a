"""``SandboxKernelManager``: a kernel in the sandbox, and ``SandboxKernelClient``, the grader's side of its sockets."""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
import tempfile
from pathlib import Path

import zmq
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.connect import channel_socket_types
from jupyter_client.manager import AsyncKernelManager
from traitlets import DottedObjectName

from .. import cgroups, sandbox
from ..protocol import CGROUP_NAME_ENV, INSIDE_IP, PRIVATE_DIR_ENV

MAX_MESSAGE_BYTES = 32 * 2**20  # above any lesson's answers (the largest, lesson 040's, are about 12 MB)
QUEUED_MESSAGES = 32  # output messages waiting to be read: past that a flood is dropped by ZeroMQ, unread
KERNEL_NOT_STARTED = ("the grading sandbox did not start (bubblewrap failed: its message is in this log): the "
                      "notebook was not graded; this is the grading machine's set-up, not the student's work")


class SandboxKernelClient(AsyncKernelClient):
    """The grader's side of a kernel's sockets: no message larger than MAX_MESSAGE_BYTES is ever read.

    ZeroMQ checks a message's announced size before it reads it (``MAXMSGSIZE``) and drops a
    connection that sends a larger one (the socket connects again at once): a notebook that
    displays a gigabyte in one message never makes the grader hold it.  And no more than
    QUEUED_MESSAGES output messages wait to be read (the kernel's side drops the rest): a flood
    of many messages is not queued in the grader's memory either."""

    def _create_connected_socket(self, channel: str, identity: bytes | None = None):
        socket = self.context.socket(channel_socket_types[channel])
        socket.linger = 1000
        socket.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        if channel == "iopub":
            socket.setsockopt(zmq.RCVHWM, QUEUED_MESSAGES)
        if identity:
            socket.identity = identity
        socket.connect(self._make_url(channel))
        return socket


class SandboxKernelManager(AsyncKernelManager):
    """A kernel in the sandbox (:mod:`grading.sandbox`), and everything of it gone after it.

    Its sockets live in the sandbox's own ``/tmp`` (no host folder is writable by the kernel): the
    connection file names them as the kernel sees them, and once the sandbox runs, this side reaches
    them through ``/proc/<pid>/root``.  The connection file sits in a folder of the grader's own that
    the kernel never sees, and nothing the kernel made is ever followed, changed or removed from this
    side.  The kernel's control group (:mod:`grading.cgroups`) is emptied and removed with it.
    Without the sandbox (``MCT_SANDBOX=off``) the sockets are in that private folder."""

    client_class = DottedObjectName("grading.preprocessors.kernelmanager.SandboxKernelClient")

    async def _async_pre_start_kernel(self, **kwargs):
        base = Path(os.environ[PRIVATE_DIR_ENV]) / "runtime"
        base.mkdir(parents=True, exist_ok=True)
        self._mct_folder = Path(tempfile.mkdtemp(prefix="kernel-", dir=base))
        self._mct_sandboxed = sandbox.sandbox_wanted()
        self._mct_cgroup = f"{cgroups.PREFIX}{secrets.token_hex(6)}"
        self.connection_file = str(self._mct_folder / "kernel.json")
        self.ip = INSIDE_IP if self._mct_sandboxed else str(self._mct_folder / "kernel")
        return await super()._async_pre_start_kernel(**kwargs)

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        kw["env"] = {**(kw.get("env") or os.environ), CGROUP_NAME_ENV: self._mct_cgroup}
        await super()._async_launch_kernel(kernel_cmd, **kw)
        if self._mct_sandboxed:
            pid = await asyncio.get_running_loop().run_in_executor(
                None, sandbox.sandbox_pid, self.provisioner.process.pid)
            if pid is None:
                raise RuntimeError(KERNEL_NOT_STARTED)
            self.ip = f"/proc/{pid}/root{INSIDE_IP}"  # the kernel's sockets, from this side

    def cleanup_ipc_files(self) -> None:
        """A sandboxed kernel's sockets vanish with its /tmp: nothing to remove (and a path through /proc
        of a pid that may be another process's by now is never touched)."""
        if not getattr(self, "_mct_sandboxed", True):
            super().cleanup_ipc_files()

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if restart:
            return
        cgroups.remove(getattr(self, "_mct_cgroup", ""))
        folder = getattr(self, "_mct_folder", None)
        if folder is not None:  # the grader's own folder: the connection file (and unsandboxed, the sockets)
            shutil.rmtree(folder, ignore_errors=True)
