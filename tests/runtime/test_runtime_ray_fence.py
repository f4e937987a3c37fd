"""kubepool.runtime.ray_fence against the installed Ray: each patch still fits what it patches, and does what it says."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kubepool.runtime import ray_fence
from kubepool.runtime.ray_node import ray_command


class HeadNotYetRegistered:
    """A GCS client whose head node registers after `empty` asks (the real one is asked the same way)."""

    def __init__(self, empty: int) -> None:
        self.empty, self.asks = empty, []

    def get_all_node_info(self, timeout: Any = None, node_selectors: Any = None, state_filter: Any = None) -> dict[str, str]:
        self.asks.append((timeout, node_selectors, state_filter))
        return {} if len(self.asks) <= self.empty else {"head": "info"}


def test_rays_own_head_lookup_sleeps_two_seconds_between_asks(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the fence is for; if Ray stops doing this, the patch can go."""
    from ray._private import utils

    slept: list[float] = []
    monkeypatch.setattr(utils.time, "sleep", slept.append)
    assert list(utils.get_all_node_info_until_retrieved(HeadNotYetRegistered(2), ["sel"], None, 20, 5)) == ["info"]
    assert slept == [2, 2]


def test_the_fenced_lookup_asks_again_within_a_tenth_of_a_second() -> None:
    slept: list[float] = []
    client = HeadNotYetRegistered(2)
    lookup = ray_fence.fast_head_lookup(lambda *a: pytest.fail("Ray's own lookup was not needed"), slept.append)
    assert list(lookup(client, ["sel"], None, 20, 5)) == ["info"]
    assert slept == [ray_fence.HEAD_POLL_SECONDS] * 2
    assert client.asks == [(5, ["sel"], None)] * 3  # Ray's question, unchanged


def test_the_fenced_lookup_ends_as_ray_does_once_rays_time_is_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from ray._private import utils

    monkeypatch.setattr(utils.time, "sleep", lambda s: None)
    lookup = ray_fence.fast_head_lookup(utils.get_all_node_info_until_retrieved)
    with pytest.raises(Exception, match="No node info found for head node"):
        lookup(HeadNotYetRegistered(10**6), None, None, 0, None)  # no time left: Ray's last ask, Ray's error


def test_install_patches_what_a_workers_ray_start_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray
    import ray._private.node as ray_node
    from ray._private import utils

    assert ray.__version__ == ray_fence.RAY_VERSION, "Ray was upgraded: check each patch in ray_fence, then the pin"
    assert ray_node.get_all_node_info_until_retrieved is utils.get_all_node_info_until_retrieved
    assert "get_all_node_info_until_retrieved(" in inspect.getsource(ray_node.Node.__init__)
    ours = list(inspect.signature(ray_fence.fast_head_lookup(lambda: None)).parameters)
    assert list(inspect.signature(utils.get_all_node_info_until_retrieved).parameters) == ours
    monkeypatch.setattr(ray_node, "get_all_node_info_until_retrieved", ray_node.get_all_node_info_until_retrieved)
    ray_fence.install()
    assert ray_node.get_all_node_info_until_retrieved.__qualname__ == "fast_head_lookup.<locals>.lookup"


def test_every_ray_start_of_this_interpreter_goes_through_the_fence() -> None:
    assert Path(sys.executable).with_name("ray").exists()  # the dev venv, like the runtime image
    assert ray_command() == [sys.executable, "-P", "-m", "kubepool.runtime.ray_fence"]


def test_a_held_start_let_go_of_without_the_word_starts_nothing(tmp_path: Path) -> None:
    """Its supervisor gone (stdin closed, no word), a held `ray start` exits 0 without starting Ray; without the
    hold the same command would try to join a head that is not there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")} | {ray_fence.ENV_HELD: "1"}
    argv = ["start", "--block", "--address=127.0.5.41:9", f"--temp-dir={tmp_path}", "--disable-usage-stats"]
    done = subprocess.run([*ray_command(), *argv], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not any(tmp_path.iterdir())  # Ray never started: nothing in its temp dir
