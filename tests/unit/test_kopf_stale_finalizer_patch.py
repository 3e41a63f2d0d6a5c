"""Issue 58 (soak seed 1664): a pool deleted while a replica was paused by peering is never
cleaned up by that replica after it resumes. This pins the Kopf 1.45.2 mechanism, in-process,
through Kopf's own ``process_resource_event`` with only its API calls replaced:

1. The replica's first cycle of a pool adds the finalizer with a JSON-patch guarded by
   ``test /metadata/resourceVersion``. Another writer (the other replica adding the same
   finalizer, or the demand loop's ``status.demand``) got there first: 422. Kopf keeps the
   finalizer function as the object's ``remaining_patch`` in its per-object memory, "to try on
   the next cycle soon" (kopf/_cogs/clients/patching.py:109-116, processing.py:147).
2. The replica is paused by peering before that next event: the watch is closed, the memory kept.
3. After the resume, the re-listed pool (deletionTimestamp set, the finalizer already added by
   the other replica) is processed with that stale patch: the patch is not empty, so the cycle
   "exits to PATCHing" before the on.delete handlers (processing.py:71, 238, 321-323); the
   finalizer function then yields no JSON-patch op (the finalizer is there), so nothing is
   written (patching.py:79-95) and no event follows. Repeated DELETEs of a terminating object
   change nothing either: the cleanup handler waits for an event that never comes.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import kopf
import pytest
from kopf._cogs.clients import api, errors
from kopf._cogs.structs import ephemera, references
from kopf._core.engines import indexing
from kopf._core.reactor import inventory, processing

from gpushare import constants as c
from gpushare.handlers import pools

POOLS = references.Resource(
    group=c.GROUP, version=c.VERSION, plural=c.PLURAL, namespaced=False, subresources=frozenset({"status"})
)


def _pool(rv: str, *, deleting: bool) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "soak-b", "uid": "uid-b", "resourceVersion": rv, "generation": 1}
    if deleting:
        # As the other replica left it: finalizer added, its last-handled-configuration stored.
        meta["finalizers"] = [c.FINALIZER]
        meta["deletionTimestamp"] = "2026-12-06T18:44:18Z"
        meta["annotations"] = {
            f"{c.GROUP}/last-handled-configuration": '{"spec":{"cleanup":"Restore"}}',
        }
    return {
        "apiVersion": f"{c.GROUP}/{c.VERSION}",
        "kind": "GPUSharePool",
        "metadata": meta,
        "spec": {"cleanup": "Restore"},
    }


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _json_patch(target: dict[str, Any], ops: list[dict[str, Any]]) -> None:
    """The few JSON-patch ops Kopf sends for finalizers (test, add, remove, replace)."""
    for op in ops:
        *parents, leaf = op["path"].strip("/").split("/")
        node: Any = target
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
        if op["op"] == "test":
            assert node[leaf] == op["value"]
        elif op["op"] == "remove":
            del node[int(leaf) if isinstance(node, list) else leaf]
        elif isinstance(node, list):
            node.insert(len(node) if leaf == "-" else int(leaf), op["value"])
        else:
            node[leaf] = copy.deepcopy(op["value"])


class Replica:
    """One replica's Kopf reactor state for GPUSharePools: registry, settings, per-object memory."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.registry = kopf.OperatorRegistry()
        self.settings = kopf.OperatorSettings()
        self.settings.persistence.finalizer = c.FINALIZER
        self.settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=c.GROUP)
        self.settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
            prefix=c.GROUP, key="last-handled-configuration"
        )
        self.memories = inventory.ResourceMemories()
        self.indexers = indexing.OperatorIndexers()
        self.cleanups: list[str] = []
        self.writes: list[tuple[str, Any]] = []
        self.conflict_next_json_patch = False
        self.stored: dict[str, Any] = {}  # the apiserver's copy, as of the last event processed

        @kopf.on.delete(c.GROUP, c.VERSION, c.PLURAL, id="cleanup", registry=self.registry)
        async def cleanup(name: str, **_: Any) -> None:
            self.cleanups.append(name)

        async def fake_patch(url: str, *, payload: Any = None, headers: Any = None, **_: Any) -> Any:
            kind = (headers or {}).get("Content-Type", "")
            self.writes.append((kind, copy.deepcopy(payload)))
            if "json-patch" in kind and self.conflict_next_json_patch:
                self.conflict_next_json_patch = False
                raise errors.APIUnprocessableEntityError("the test op failed", status=422, headers={})
            if "json-patch" in kind:
                _json_patch(self.stored, payload)
            else:
                _merge(self.stored, payload)
            self.stored["metadata"]["resourceVersion"] = str(100 + len(self.writes))
            return copy.deepcopy(self.stored)

        monkeypatch.setattr(api, "patch", fake_patch)

    async def process(self, raw_type: str | None, body: dict[str, Any]) -> str | None:
        self.stored = copy.deepcopy(body)
        return await processing.process_resource_event(
            lifecycle=kopf.lifecycles.all_at_once,
            indexers=self.indexers,
            registry=self.registry,
            settings=self.settings,
            memories=self.memories,
            memobase=ephemera.AnyMemo(kopf.Memo()),
            resource=POOLS,
            raw_event={"type": raw_type, "object": copy.deepcopy(body)},  # type: ignore[typeddict-item]
            event_queue=asyncio.Queue(),
            no_throttling=True,
        )


async def test_stale_finalizer_patch_swallows_the_relisted_deletion(monkeypatch: pytest.MonkeyPatch) -> None:
    replica = Replica(monkeypatch)

    # 18:44:04: the first listing; the finalizer's JSON-patch loses the race (422).
    replica.conflict_next_json_patch = True
    await replica.process(None, _pool("366", deleting=False))
    assert [kind for kind, _ in replica.writes] == ["application/json-patch+json"]
    assert replica.writes[0][1][0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "366"}

    # Paused by peering at once: no further event reaches this replica's worker. 18:45:04: resumed,
    # the pools are listed again; soak-b is being deleted, the other replica's finalizer on it.
    replica.writes.clear()
    deleting = _pool("379", deleting=True)
    await replica.process(None, deleting)
    # Kopf 1.45.2: the on.delete handler is skipped for the stale finalizer patch, and that patch
    # writes nothing (the finalizer is there), so no event will ever bring another cycle.
    assert replica.cleanups == []
    assert replica.writes == []

    # Any later event of the pool (none came in the soak) would run the cleanup: the stale patch
    # is gone from the memory now.
    await replica.process("MODIFIED", deleting)
    assert replica.cleanups == ["soak-b"]


async def test_without_the_stale_patch_the_relisted_deletion_is_cleaned_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    replica = Replica(monkeypatch)
    await replica.process(None, _pool("366", deleting=False))  # the finalizer's patch succeeds
    await replica.process(None, _pool("379", deleting=True))  # relisted after the pause
    assert replica.cleanups == ["soak-b"]


async def test_the_deletion_touch_brings_the_cycle_that_runs_the_cleanup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    replica = Replica(monkeypatch)
    kopf.on.event(c.GROUP, c.VERSION, c.PLURAL, id="deletion-touch", registry=replica.registry)(
        pools.deletion_touch
    )
    replica.conflict_next_json_patch = True
    await replica.process(None, _pool("366", deleting=False))  # 422, left pending; then paused

    replica.writes.clear()
    deleting = _pool("379", deleting=True)
    version = await replica.process(None, deleting)  # relisted after the resume
    assert replica.cleanups == []  # still skipped in this cycle (Kopf's gate) ...
    touch = f"{c.GROUP}/touch-dummy"
    [(kind, payload)] = replica.writes  # ... but it writes Kopf's touch-dummy:
    assert kind == "application/merge-patch+json"
    assert payload["metadata"]["annotations"][touch]
    assert version is not None  # the worker now expects that write's event

    # The touch's event (as the watch delivers it) runs the cleanup; Kopf's next write removes
    # the dummy and, the cleanup done, the finalizer.
    replica.writes.clear()
    touched = copy.deepcopy(deleting)
    touched["metadata"]["resourceVersion"] = version
    touched["metadata"]["annotations"][touch] = payload["metadata"]["annotations"][touch]
    await replica.process("MODIFIED", touched)
    assert replica.cleanups == ["soak-b"]
    merge = next(p for k, p in replica.writes if k == "application/merge-patch+json")
    assert merge["metadata"]["annotations"][touch] is None
    assert c.FINALIZER not in replica.stored["metadata"].get("finalizers", [])
    assert touch not in replica.stored["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("meta", "pending", "expected"),
    [
        ({"deletionTimestamp": "t", "finalizers": [c.FINALIZER]}, True, True),
        ({"deletionTimestamp": "t", "finalizers": [c.FINALIZER]}, False, False),  # nothing pends
        ({"finalizers": [c.FINALIZER]}, True, False),  # not terminating: no handler is lost for good
        ({"deletionTimestamp": "t", "finalizers": ["other.io/x"]}, True, False),  # ours is gone
        ({"deletionTimestamp": "t"}, True, False),
    ],
)
def test_stale_patch_blocks_cleanup(meta: dict[str, Any], pending: bool, expected: bool) -> None:
    assert pools.stale_patch_blocks_cleanup({"metadata": meta}, pending=pending) is expected
