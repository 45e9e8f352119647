"""A multi-node Ray cluster on this one machine, made of real ``ray start`` nodes on 127.0.0.1.

What it is for: exercising the multi-node path (``coa train rl --address``, placement by
resources and labels, losing a node mid-run) without a second machine — the slow
multi-node test and the scaling benchmark use it, and a user can try a cluster config with
it. It is not a way to run a real cluster: there, ``ray start`` runs on every machine.

Each node is one ``ray start --block`` process started in its own session, so every process
of that node (raylet, agents, the worker processes Ray forks for actors) shares a session
id; :meth:`LocalRayCluster.kill_node` SIGKILLs exactly that session (a node lost without
warning), and :meth:`LocalRayCluster.shutdown` every session it started — never ``ray
stop``, which would take down every Ray process on the machine, other people's included.
Ports are picked free per node (two nodes on one host would otherwise both want the
dashboard agent's fixed 52365) and the temp dir is private to the cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LocalNode", "LocalRayCluster"]

_STARTED = "Ray runtime started."
_NODE_LABEL = "coa.local-node"  # every node carries its name as this label


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _session_pids(sid: int) -> list[int]:
    """Every live process whose session id is ``sid`` (``/proc`` walk; Linux)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.getsid(int(entry)) == sid:
                pids.append(int(entry))
        except (ProcessLookupError, PermissionError):
            continue
    return pids


@dataclass
class LocalNode:
    """One ``ray start`` node: its name (also its ``coa.local-node`` label) and process."""

    name: str
    process: subprocess.Popen
    log: Path
    resources: dict[str, float] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


class LocalRayCluster:
    """Head + worker nodes on 127.0.0.1; use as a context manager so nodes never outlive it.

    ``health_check_s`` is how long the GCS takes to declare a silent node dead (Ray's
    default is ~30 s; tests want seconds). Node startup is sequential: raylets that
    register at the same moment on a loaded 2-core box miss Ray's fixed 30 s window.
    """

    def __init__(self, temp_root: str | Path | None = None, health_check_s: float = 3.0,
                 object_store_mb: int = 200, start_timeout_s: float = 180.0) -> None:
        # Unix socket paths must stay under 108 bytes: keep the root short.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="coa-ray-", dir=temp_root or "/tmp"))
        self.object_store_mb = object_store_mb
        self.start_timeout_s = start_timeout_s
        period_ms = max(200, int(health_check_s * 1000 / 4))
        self.env = {
            **os.environ,
            # Ray's default for a local cluster. A fresh driver finds the token in
            # ~/.ray/auth_token; one that ran a local ray.init before is in token mode
            # already (Ray sets RAY_AUTH_MODE=token and caches it for the process), and
            # could not drive a cluster without auth: its actors are never scheduled.
            "RAY_AUTH_MODE": "token",
            "RAY_health_check_period_ms": str(period_ms),
            "RAY_health_check_timeout_ms": str(period_ms),
            "RAY_health_check_failure_threshold": "3",
            "RAY_health_check_initial_delay_ms": "0",
        }
        self.address: str | None = None
        self.nodes: dict[str, LocalNode] = {}

    # -- lifecycle ---------------------------------------------------------------------
    def __enter__(self) -> LocalRayCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def start_head(self, num_cpus: float = 1, resources: dict[str, float] | None = None,
                   labels: dict[str, str] | None = None, name: str = "head") -> str:
        """Start the head node; returns its ``host:port`` (what ``--address`` takes)."""
        if self.address is not None:
            raise RuntimeError("the head is already running")
        port = _free_port()
        self._start(name, ["--head", "--port", str(port), "--include-dashboard", "false",
                           "--ray-client-server-port", str(_free_port()),
                           "--temp-dir", str(self.temp_dir)],
                    num_cpus, resources, labels)
        self.address = f"127.0.0.1:{port}"
        return self.address

    def add_node(self, name: str, num_cpus: float = 1, resources: dict[str, float] | None = None,
                 labels: dict[str, str] | None = None) -> LocalNode:
        """Start a worker node joined to the head, with its own CPUs, resources and labels."""
        if self.address is None:
            raise RuntimeError("start_head first")
        return self._start(name, ["--address", self.address], num_cpus, resources, labels)

    def _start(self, name: str, role_args: list[str], num_cpus: float,
               resources: dict[str, float] | None, labels: dict[str, str] | None) -> LocalNode:
        if name in self.nodes:
            raise ValueError(f"a node named {name!r} exists already")
        labels = {**(labels or {}), _NODE_LABEL: name}
        args = ["ray", "start", "--block", "--disable-usage-stats",
                "--node-ip-address", "127.0.0.1", "--num-cpus", str(num_cpus),
                "--num-gpus", "0",
                "--object-store-memory", str(self.object_store_mb * 1024 * 1024),
                "--resources", json.dumps(resources or {}),
                "--labels", ",".join(f"{k}={v}" for k, v in labels.items()),
                "--node-manager-port", str(_free_port()),
                "--object-manager-port", str(_free_port()),
                "--dashboard-agent-listen-port", str(_free_port()),
                "--dashboard-agent-grpc-port", str(_free_port()),
                "--runtime-env-agent-port", str(_free_port()),
                "--metrics-export-port", str(_free_port()),
                *role_args]
        log = self.temp_dir / f"{name}.log"
        with log.open("w") as sink:
            process = subprocess.Popen(args, env=self.env, stdout=sink, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        node = LocalNode(name, process, log, dict(resources or {}), labels)
        self.nodes[name] = node
        deadline = time.monotonic() + self.start_timeout_s
        while _STARTED not in log.read_text(errors="replace"):
            if not node.alive or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:]
                self.kill_node(name)
                raise RuntimeError(f"ray node {name!r} did not start:\n{tail}")
            time.sleep(0.2)
        return node

    def kill_node(self, name: str) -> None:
        """Lose the node without warning: SIGKILL every process of its session."""
        node = self.nodes[name]
        sid = node.process.pid  # start_new_session: the ray start process leads the session
        for _ in range(3):  # Ray may fork a worker while the first sweep runs
            pids = _session_pids(sid)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        with contextlib.suppress(subprocess.TimeoutExpired):
            node.process.wait(timeout=10)

    def connect(self, **init_kwargs: Any) -> None:
        """``ray.init`` this process as a driver of the cluster, in its auth mode (a driver
        does not turn token auth on by itself when it joins; it reads the token from
        ``~/.ray/auth_token`` once it is on). Other drivers: :attr:`driver_env`."""
        import ray

        if self.address is None:
            raise RuntimeError("start_head first")
        mode = self.env["RAY_AUTH_MODE"]
        if os.environ.get("RAY_AUTH_MODE") != mode:
            # Ray reads the mode into a process-wide config when imported; its own switch
            # to token mode (``_enable_token_auth``) refreshes that cache the same way.
            from ray._raylet import Config

            os.environ["RAY_AUTH_MODE"] = mode
            Config.initialize("")
        ray.init(address=self.address, **init_kwargs)

    @property
    def driver_env(self) -> dict[str, str]:
        """The environment for a driver process (``coa train rl --address``) to join with."""
        return {**os.environ, "RAY_AUTH_MODE": self.env["RAY_AUTH_MODE"]}

    def node_name(self, node_id: str) -> str | None:
        """The name of the node with Ray node id ``node_id`` (needs ``ray.init`` here)."""
        import ray

        for info in ray.nodes():
            if info["NodeID"] == node_id:
                return (info.get("Labels") or {}).get(_NODE_LABEL)
        return None

    def shutdown(self) -> None:
        """Kill every node this cluster started (worker nodes first) and remove its temp dir."""
        for name in reversed(list(self.nodes)):
            self.kill_node(name)
        self.nodes.clear()
        self.address = None
        shutil.rmtree(self.temp_dir, ignore_errors=True)
