"""Helpers shared by several test modules (tests/conftest.py puts ``tests/`` on ``sys.path``).

The tests run with ``--import-mode=importlib``, so one test module cannot import another; what
more than one of them needs lives here:

- :mod:`support.kube`: a tiny synchronous Kubernetes client (urllib) for tests that run beside an
  async operator or webhook in the same process;
- :mod:`support.operator_proc`: ``gpushare run`` as a subprocess, its metrics (parsed with
  ``prometheus_client.parser``) and its JSON log;
- :mod:`support.celtext`: a shipped (laid-out) CEL expression back on one line.
"""
