"""Every Kubernetes API side effect of gpushare lives in this package.

Requests are raw JSON (``gpushare.k8s.rest``); kubernetes_asyncio supplies only the configuration
loader and the transport, and nothing above this package imports it (an import-linter contract):
they name ``ApiClient``, ``ApiError`` and the constructors through here.
"""

from __future__ import annotations

from gpushare.k8s.client import ApiClient, Configuration, KubeConfigError, make_api_client, new_api_client
from gpushare.k8s.rest import ApiError

__all__ = ["ApiClient", "ApiError", "Configuration", "KubeConfigError", "make_api_client", "new_api_client"]
