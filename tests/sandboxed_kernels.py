"""What the tests that start sandboxed kernels themselves share (test_grader_bounds, test_warm_kernels).

They start kernels through the course's own kernel manager, as nbgrader does, from a kernelspec written as
the course's nbgrader configuration writes it, in a private folder of the test.
"""

from __future__ import annotations

import asyncio
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from grading import protocol, zygote
from grading.preprocessors.kernelmanager import SandboxKernelManager


def in_a_thread(function):
    """``function()`` in a thread of its own: a test run earlier in this process (a browser's, say) may have left
    an event loop running in this thread, and asyncio.run refuses to start inside one."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(function).result()


def run_apart(coroutine):
    """``asyncio.run(coroutine)`` in a thread of its own (see in_a_thread)."""
    return in_a_thread(lambda: asyncio.run(coroutine))


@pytest.fixture
def kernel_env(tmp_path, monkeypatch):
    """The kernelspec the course's nbgrader configuration writes, in a private folder of this test; warm kernels
    as the grader has them (on where it is root), from a zygote of this test's own, stopped after it."""
    spec = tmp_path / "share" / "jupyter" / "kernels" / "mct-grading"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "grading.sandbox", "-f", "{connection_file}"],
        "display_name": "sandboxed", "language": "python", "interrupt_mode": "message"}))
    (tmp_path / "runtime").mkdir()
    monkeypatch.setenv(protocol.PRIVATE_DIR_ENV, str(tmp_path))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "share" / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.delenv(protocol.WARM_KERNELS_ENV, raising=False)
    yield tmp_path
    if zygote._zygote is not None:  # this test's zygote: its socket is in this test's folder
        zygote._zygote.stop()
        zygote._zygote = None
    zygote._given_up = None  # (a test's zygote that refused a kernel: warm kernels again for the next test)


async def started() -> tuple[SandboxKernelManager, object]:
    """A sandboxed kernel, started and ready, and its client."""
    km = SandboxKernelManager(kernel_name="mct-grading", transport="ipc")
    await km.start_kernel()
    kc = km.client()
    kc.start_channels()
    await kc.wait_for_ready(timeout=60)
    return km, kc


async def stopped(km, kc) -> None:
    await km.shutdown_kernel(now=True)
    kc.stop_channels()
