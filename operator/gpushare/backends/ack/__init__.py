"""Alibaba ACK's GPU sharing (cGPU, share, core_mem), the first sharing backend.

ACK switches a node's GPU sharing with four labels its device plugin reads when it starts
(``cgpu``, ``cgpu.disable.isolation``, ``ack.node.gpu.schedule``, ``ack.node.gpu.placement``);
the plugin (``gpushare-device-plugin`` in kube-system) is made to reread them by deleting its pod
on the node; the node then advertises ``aliyun.com/gpu-mem`` (and, under ``core_mem``,
``aliyun.com/gpu-core.percentage``). Pods that hold ``aliyun.com/gpu-mem`` are what a mode switch
disrupts. ``gpushare.backends.ack.evidence`` reads the mode from what a node advertises.
"""

from gpushare.backends.ack.backend import ACK, AckBackend

__all__ = ["ACK", "AckBackend"]
