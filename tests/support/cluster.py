"""A real 3-master Redis Cluster on loopback, and moving one slot by hand (a resharding).

``redis-server --cluster-enabled yes`` ×3, slots assigned by ``redis-cli --cluster create``.
:meth:`ClusterRig.move_slot` migrates one hash slot the way ``redis-cli --cluster reshard``
does (SETSLOT IMPORTING/MIGRATING, MIGRATE key by key, SETSLOT NODE on every master), one
key at a time with a pause between keys, so clients running meanwhile meet ``ASK``,
``TRYAGAIN`` and then ``MOVED``.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from pathlib import Path

import redis
from redis.crc import key_slot

from tests.support.procs import stop_process
from tests.support.servers import free_port, server_binaries


def namespace_slot(namespace: str) -> int:
    """The hash slot of every key of ``namespace``."""
    return key_slot(f"{{{namespace}}}".encode())


class ClusterRig:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.ports = [free_port() for _ in range(3)]
        self.procs: list[subprocess.Popen[bytes]] = []
        cli = shutil.which("redis-cli")
        assert cli is not None, "redis-cli is needed to create the cluster"
        self.cli = cli

    @property
    def seed_url(self) -> str:
        """The URL relaybus is given: the first master (any node would do)."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self) -> None:
        for port in self.ports:
            d = self.root / str(port)
            d.mkdir()
            # The bus port is given: the default (port + 10000) may be taken or above 65535.
            argv = [server_binaries()["redis"], "--port", str(port), "--bind", "127.0.0.1"]
            argv += ["--cluster-enabled", "yes", "--cluster-port", str(free_port())]
            argv += ["--save", "", "--dir", str(d), "--logfile", str(d / "log")]
            self.procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL))
        for port, proc in zip(self.ports, self.procs, strict=True):
            self._wait_ping(port, proc)
        create = [self.cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports)]
        create += ["--cluster-replicas", "0", "--cluster-yes"]
        subprocess.run(create, check=True, capture_output=True, timeout=60)
        self.wait_agreed()

    def stop(self) -> None:
        for proc in self.procs:
            stop_process(proc, 5)

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)

    def node_id(self, port: int) -> str:
        with self.node(port) as r:
            return str(r.execute_command("CLUSTER MYID").decode())

    def owner(self, slot: int) -> int:
        """The port of the master serving ``slot``, as the first master sees it."""
        with self.node(self.ports[0]) as r:
            for start, end, primary, *_ in r.execute_command("CLUSTER SLOTS"):
                if start <= slot <= end:
                    return int(primary[1])
        raise LookupError(f"slot {slot} is not served")

    def owner_of(self, namespace: str) -> int:
        """The port of the master serving ``namespace`` (its ``{ns}`` hash tag)."""
        return self.owner(namespace_slot(namespace))

    def namespace_away_from_seed(self) -> str:
        """A fresh namespace whose slot is on another master than the seed node, so that a
        client given only the seed must follow the cluster's map."""
        while True:
            ns = f"t{uuid.uuid4().hex[:12]}"
            if self.owner_of(ns) != self.ports[0]:
                return ns

    def move_slot(self, slot: int, to_port: int, pause_s: float = 0.05) -> int:
        """Migrate ``slot`` to the master on ``to_port`` while it stays in use; returns the
        number of keys moved."""
        from_port = self.owner(slot)
        assert from_port != to_port
        src, dst = self.node(from_port), self.node(to_port)
        moved = 0
        try:
            dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", self.node_id(from_port))  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", self.node_id(to_port))  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
            while keys := src.execute_command("CLUSTER GETKEYSINSLOT", slot, 1):  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
                src.execute_command("MIGRATE", "127.0.0.1", to_port, "", 0, 5000, "KEYS", *keys)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
                moved += len(keys)
                time.sleep(pause_s)
            target = self.node_id(to_port)
            # The new owner first, then the old one, then the rest (as redis-cli does).
            for port in [
                to_port,
                from_port,
                *(p for p in self.ports if p not in (to_port, from_port)),
            ]:
                with self.node(port) as r:
                    r.execute_command("CLUSTER SETSLOT", slot, "NODE", target)
        finally:
            src.close()
            dst.close()
        self.wait_agreed()
        return moved

    def wait_agreed(self, timeout_s: float = 20) -> None:
        """Until every master reports the same slot map and the cluster state ``ok``."""
        deadline = time.monotonic() + timeout_s
        while True:
            maps, ok = set(), True
            for port in self.ports:
                with self.node(port) as r:
                    maps.add(repr(sorted(r.execute_command("CLUSTER SLOTS"))))
                    ok = ok and r.execute_command("CLUSTER INFO").get("cluster_state") == "ok"
            if len(maps) == 1 and ok:
                return
            if time.monotonic() > deadline:
                raise TimeoutError("the masters do not agree on the slot map")
            time.sleep(0.05)

    def _wait_ping(self, port: int, proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and proc.poll() is None:
            out = subprocess.run(
                [self.cli, "-p", str(port), "ping"], capture_output=True, timeout=5
            )
            if out.stdout.strip() == b"PONG":
                return
            time.sleep(0.05)
        raise TimeoutError(f"no redis on {port} (exit code {proc.poll()})")
