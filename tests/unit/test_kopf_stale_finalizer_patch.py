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

        @kopf.on.delete(c.GROUP, c.VERSION, c.PLURAL, id="cleanup", registry=self.registry)
        async def cleanup(name: str, **_: Any) -> None:
            self.cleanups.append(name)

        async def fake_patch(url: str, *, payload: Any = None, headers: Any = None, **_: Any) -> Any:
            kind = (headers or {}).get("Content-Type", "")
            self.writes.append((kind, copy.deepcopy(payload)))
            if "json-patch" in kind and self.conflict_next_json_patch:
                self.conflict_next_json_patch = False
                raise errors.APIUnprocessableEntityError("the test op failed", status=422, headers={})
            return {"metadata": {"resourceVersion": str(100 + len(self.writes))}}

        monkeypatch.setattr(api, "patch", fake_patch)

    async def process(self, raw_type: str | None, body: dict[str, Any]) -> str | None:
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
