"""NVIDIA's admission rules behind the sharing-backend seam (pure).

* :mod:`.catalog`: the record of NVIDIA's own rule (``NVIDIA_MORE_THAN_ONE``) and the words for
  its resources;
* :mod:`.rules`: which pods they judge (:func:`.rules.judged_nvidia`) and the judging
  (:func:`.rules.evaluate_pod`; :data:`.rules.POD_RULES` is what ``gpushare.admission.rules``
  drives);
* :mod:`.mig`: what a MIG pool's nodes advertise and its own rules (a profile the pool does not
  offer, a whole GPU on a pool whose GPUs are all MIG), which :mod:`.rules` asks for a MIG pool;
* :mod:`.cel`: NVIDIA's containers in the ValidatingAdmissionPolicy's CEL, and what aims a pod at
  an NVIDIA pool (``AIMED_NAMES``, ``AIMED_PREFIXES``), which the webhook's gate reads.
"""
