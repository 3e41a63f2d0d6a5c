"""The building blocks of the admission rules, below the sharing backends (pure, no client).

What every backend's rules are made of, and what the generic admission machinery
(``gpushare.admission``) walks, without naming any backend's labels or resources:

* :mod:`.kinds`: the workload-kinds table (where each kind keeps its pod templates);
* :mod:`.podspecs`: the pods inside an object, by that table;
* :mod:`.quantity`: a request value as the apiserver stores it;
* :mod:`.records`: a rule's record (id, verdict, HTTP code, messages, CEL form);
* :mod:`.model`: findings, nodes and the context (pools, nodes) the rules judge against;
* :mod:`.constraints`: a pod's node constraints (nodeSelector, required node affinity, nodeName);
* :mod:`.emit`: findings written from records, with the target pools' admission mode;
* :mod:`.cel`: the CEL building blocks of the webhook's matchConditions and of the
  ValidatingAdmissionPolicy.

The backends' own rules (``gpushare.backends.ack.admission``) are written with them.
"""
