"""The operator's own log output: kopf logs every handler run and httpx every request at INFO (~50 lines per
job). Routine lines go to DEBUG; transitions, warnings and errors stay. kopf's Event posting is a handler of
its own logger, run before the root handlers filtered here, so the Events it posts do not change."""

from __future__ import annotations

import logging
import re

# kopf's per-handler and per-cause success lines (kopf/_core/actions/execution.py, reactor/processing.py).
_ROUTINE = re.compile(r"Handler '[^']*' succeeded\.|\w+ is processed: \d+ succeeded; 0 failed\.")
_CHATTY = ("httpx", "httpx2")  # one INFO line per HTTP request (lightkube uses httpx2, kopf aiohttp)


class DemoteRoutine(logging.Filter):
    """Marks kopf's routine success lines as DEBUG and lets them through only when DEBUG is on."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno == logging.INFO and record.name.startswith("kopf") and _ROUTINE.fullmatch(record.getMessage()):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            return logging.getLogger().isEnabledFor(logging.DEBUG)
        return True


def quiet_routine_logs() -> None:
    """After kopf.configure(): demote routine lines on the root handlers, request lines below WARNING."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(DemoteRoutine())
    for name in _CHATTY:
        if not logging.getLogger(name).isEnabledFor(logging.DEBUG):
            logging.getLogger(name).setLevel(logging.WARNING)
