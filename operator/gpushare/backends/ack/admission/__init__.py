"""ACK's admission rules behind the sharing-backend seam (pure).

* :mod:`.catalog`: the records of the pod and workload rules (``GS*``): messages, CEL forms;
* :mod:`.rules`: the engine that judges a pod or workload by them
  (:func:`.rules.evaluate_workload`, which ``gpushare.admission.evaluate`` calls);
* :mod:`.targeting`: which kinds of pool (``cgpu``, ``share``, ``core_mem``, ``nvidia``) and which
  pools a pod's node constraints reach, by ACK's labels and the pools' backends;
* :mod:`.cel`: ACK's GPU containers as the ValidatingAdmissionPolicy reads them.

They are written with the building blocks of :mod:`gpushare.rulekit`.
"""
