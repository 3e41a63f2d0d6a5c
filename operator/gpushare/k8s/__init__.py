"""Every Kubernetes API side effect of gpushare lives in this package.

Requests are raw JSON (``gpushare.k8s.rest``); kubernetes_asyncio supplies only the configuration
loader and the transport, and nothing above this package imports it (an import-linter contract):
they name ``ApiClient``, the constructors and the one error type through here: ``ApiError``
(any failed request), with its two kinds ``Conflict`` (another writer got there first: 409) and
``ApiUnavailable`` (transient failures outlasted every retry).
"""

from __future__ import annotations

from gpushare.k8s.client import ApiClient, Configuration, KubeConfigError, make_api_client, new_api_client
from gpushare.k8s.rest import ApiError
from gpushare.k8s.retry import ApiUnavailable, Conflict

__all__ = [
    "ApiClient",
    "ApiError",
    "ApiUnavailable",
    "Configuration",
    "Conflict",
    "KubeConfigError",
    "make_api_client",
    "new_api_client",
]
