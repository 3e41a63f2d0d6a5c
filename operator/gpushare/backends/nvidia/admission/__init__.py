"""NVIDIA's admission rules behind the sharing-backend seam (pure).

* :mod:`.catalog`: the record of NVIDIA's own rule (``NVIDIA_MORE_THAN_ONE``) and the words for
  its resources;
* :mod:`.rules`: which pods they judge (:func:`.rules.judged_nvidia`) and the judging
  (:func:`.rules.evaluate_pod`; :data:`.rules.POD_RULES` is what ``gpushare.admission.rules``
  drives).
"""
