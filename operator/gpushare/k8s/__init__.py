"""Every Kubernetes API side effect of gpushare lives in this package (kubernetes_asyncio)."""

from __future__ import annotations

from gpushare.k8s.client import KubeConfigError, make_api_client

__all__ = ["KubeConfigError", "make_api_client"]
