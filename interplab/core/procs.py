"""Is a process still running? (for run folders being written and for jobs).

`os.kill(pid, 0)` alone says yes for a zombie (a child that exited and was not reaped yet) and for an unrelated
process that reused the pid; a job's worker can be either, so both are checked: the zombie state always, the start
time when the caller recorded one (`process_start_time`)."""
from __future__ import annotations

import os

__all__ = ["pid_alive", "process_start_time"]


def process_start_time(pid: int | None = None) -> float | None:
    """The process's start time (seconds since the epoch, psutil's `create_time`), None when unknown."""
    try:
        import psutil

        return float(psutil.Process(os.getpid() if pid is None else int(pid)).create_time())
    except Exception:  # noqa: BLE001 - psutil missing or the process is gone
        return None


def pid_alive(pid, start_time: float | None = None) -> bool:
    """True when process `pid` runs (not a zombie) and, if `start_time` is given, is the process that started then."""
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return False
    if pid <= 0:
        return False
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a dependency; keep a plain fallback anyway
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
                return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return True
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        return start_time is None or abs(p.create_time() - float(start_time)) < 1.0
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:  # another user's live process: alive, and never ours to clean up after
        return True
