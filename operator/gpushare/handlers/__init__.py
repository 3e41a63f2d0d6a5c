"""Kopf wiring of the operator (thin: each handler hands off to gpushare.reconcile).

Importing this package registers every handler in Kopf's default registry:
``lifecycle`` (startup settings, login, probe, cleanup; it starts ``watch``, gpushare's own Node
and Pod watches, not Kopf's: never a timer, daemon, finalizer or diff-base annotation on Nodes or
Pods) and
``pools`` (the per-pool reconcile loop, spec updates, deletion with our finalizer),
``demand`` (each pool's demand daemon) and ``gate`` (the webhook configuration's NVIDIA gate).
"""

from __future__ import annotations

from gpushare.handlers import demand, gate, lifecycle, pools, watch

__all__ = ["demand", "gate", "lifecycle", "pools", "watch"]
