"""The timeout in force in words: where it was set, or that the code asks for another (rules and the report)."""

from __future__ import annotations

from ncclpm.analysis.timeout import TimeoutInForce
from ncclpm.util.durations import human_seconds


def timeout_origin(timeout: TimeoutInForce, observed_ms: int | None) -> str:
    """Where the timeout in force comes from, as a clause for a rule's text: "set by `init_process_group(timeout=)`
    = `timedelta(seconds=60)` at distributed.py:41"; or, when the code sets another value than the one the logs
    show, a clause saying so; "" when the code read does not set it."""
    conf = timeout.configured
    if conf is None:
        return ""
    where = f"`{conf.name}` = `{conf.value}` at {conf.file}:{conf.line}"
    if observed_ms is None or round(conf.seconds * 1000) == observed_ms:
        return f"set by {where}"
    return (
        f"the code sets {human_seconds(conf.seconds)} with {where}, but {human_seconds(observed_ms / 1000)} was "
        "in force: that setting never reached this process group"
    )
