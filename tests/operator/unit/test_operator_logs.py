"""The operator's default log output: kopf's routine success lines demoted to DEBUG, the rest unchanged."""

from __future__ import annotations

import logging

import pytest

from kubepool.controller.logs import DemoteRoutine


def record(msg: str, name: str = "kopf.objects", level: int = logging.INFO) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


@pytest.mark.parametrize(("msg", "name", "level", "shown"), [
    ("Handler 'pod_event' succeeded.", "kopf.objects", logging.INFO, False),
    ("Handler 'reconcile_mljob/spec' succeeded.", "kopf.objects", logging.INFO, False),
    ("Creation is processed: 1 succeeded; 0 failed.", "kopf.objects", logging.INFO, False),
    ("Creation is processed: 0 succeeded; 1 failed.", "kopf.objects", logging.INFO, True),
    ("Handler 'pod_event' failed with an exception. Will retry.", "kopf.objects", logging.ERROR, True),
    ("MLJob ns/a: ttlSecondsAfterFinished passed; deleting it", "kubepool.controller.reconcile", logging.INFO, True),
    ("Handler 'x' succeeded.", "someone.else", logging.INFO, True),
])
def test_routine_lines_are_demoted(msg: str, name: str, level: int, shown: bool) -> None:
    r = record(msg, name, level)
    root = logging.getLogger()
    old = root.level
    root.setLevel(logging.INFO)
    try:
        assert DemoteRoutine().filter(r) is shown
    finally:
        root.setLevel(old)
    assert (r.levelno == logging.DEBUG) is (not shown)
