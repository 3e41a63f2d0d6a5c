"""The reconciler, by role: ``store`` (observed state), ``plans`` (plan cache and membership),
``writes`` (every API write), ``apply``/``restarts``/``report`` (the phases), ``passes`` (one
pass as a list of phases), ``reconciler`` (the long-lived parts and the wake-ups), ``loop`` (the
wait loop of one pool). The decisions are pure, in ``gpushare.policy``."""

from gpushare.reconcile.reconciler import Reconciler
from gpushare.reconcile.scope import PassResult
from gpushare.reconcile.store import pod_key

__all__ = ["PassResult", "Reconciler", "pod_key"]
