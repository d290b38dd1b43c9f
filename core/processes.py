"""Stopping what we started: child processes and the signals that end us."""

from __future__ import annotations

import signal
import subprocess
import threading


def stop_process(proc: subprocess.Popen, timeout: float = 15.0, sig: int = signal.SIGTERM) -> int:
    """`sig` (SIGTERM), wait up to `timeout`, then SIGKILL; the exit status."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def wait_for_signal() -> None:
    """Block until SIGINT or SIGTERM."""
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(1):
        pass
