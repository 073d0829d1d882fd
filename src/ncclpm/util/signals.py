"""Signals as logs report them: names by Linux number, and which ones mean a process's own crash."""

from __future__ import annotations

NATIVE_CRASHES = ("SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT")  # the process's own code or memory failed
# Linux numbers (the logs come from Linux whatever machine reads them; `signal.Signals` would be the reader's).
LINUX_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL"}
LINUX_SIGNALS |= {11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}


def exit_signal(code: int | None) -> str | None:
    """The signal an exit code stands for: -N from Python's subprocess (torchrun, DeepSpeed), 128 + N from a shell
    or a container runtime (137 = SIGKILL)."""
    if code is None:
        return None
    number = -code if code < 0 else code - 128 if 128 < code < 160 else 0
    return LINUX_SIGNALS.get(number)


# Every exit code `exit_signal` names, for a vectorised lookup (`replace_strict`) instead of a Python call per row.
EXIT_SIGNALS = {code: name for code in range(-64, 192) if (name := exit_signal(code))}
