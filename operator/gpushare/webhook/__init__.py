"""The validating admission webhook: Kopf registration, answers, context cache, server, certificates.

* ``registration``: thin Kopf wiring (indexes, one validating handler per kind, startup/cleanup);
* ``answer``: the answer to one review (``admit``, the fast path, the direct path) and its metrics;
* ``context``: ``ContextCache``, the rules' live context built from Kopf's indexes;
* ``server``: ``GPUShareWebhookServer`` (Kopf's server, hardened; TLS 1.2 minimum);
* ``lifecycle``: ``CertLifecycle``, the certificate and caBundle over the server's life;
* ``tls``: the certificate maths (pure) and files; ``options``: ``WebhookOptions``.

Its API calls are in ``gpushare.k8s.webhook_api``; its command-line flags in ``gpushare.cli.run``.
Nothing is imported here, so ``gpushare.webhook.options`` loads without Kopf.
"""
