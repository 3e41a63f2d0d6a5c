"""Names shared by every part of gpushare: API group, label keys, resources, annotations."""

from __future__ import annotations

from typing import Final

GROUP: Final = "gpushare.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "GPUSharePool"
PLURAL: Final = "gpusharepools"
SINGULAR: Final = "gpusharepool"
SHORT_NAME: Final = "gsp"
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

# ACK node labels that select GPU sharing (see docs/ and ack-gpu-sharing.md).
LABEL_CGPU: Final = "cgpu"
LABEL_DISABLE_ISOLATION: Final = "cgpu.disable.isolation"
LABEL_SCHEDULE: Final = "ack.node.gpu.schedule"
LABEL_PLACEMENT: Final = "ack.node.gpu.placement"
#: NVIDIA's device plugin: the node label its config-manager sidecar reads, the name of the
#: node's sharing config.
LABEL_NVIDIA_CONFIG: Final = "nvidia.com/device-plugin.config"
#: NVIDIA's MIG manager (mig-parted): the node label naming the MIG config to apply, and the one
#: it reports its progress in (``pending``, ``rebooting``, ``success``, ``failed``).
LABEL_MIG_CONFIG: Final = "nvidia.com/mig.config"
LABEL_MIG_CONFIG_STATE: Final = "nvidia.com/mig.config.state"
#: The MIG manager's ConfigMap of mig-parted configs, as NVIDIA's GPU Operator deploys it.
MIG_CONFIGS_NAMESPACE: Final = "gpu-operator"
MIG_CONFIGS_CONFIGMAP: Final = "default-mig-parted-config"
#: The field managers gpushare writes nodes with (the operator's, the node agent's): a node's
#: ``metadata.managedFields`` entry of any other manager is someone else's write.
OPERATOR_FIELD_MANAGER: Final = "gpushare-operator"
AGENT_FIELD_MANAGER: Final = "gpushare-agent"
# Our own node labels.
LABEL_POOL: Final = f"{GROUP}/pool"
LABEL_SKIP: Final = f"{GROUP}/skip"

#: Every node label the operator may write. Nothing else is ever touched.
MANAGED_LABELS: Final = (
    LABEL_CGPU,
    LABEL_DISABLE_ISOLATION,
    LABEL_SCHEDULE,
    LABEL_PLACEMENT,
    LABEL_NVIDIA_CONFIG,
    LABEL_MIG_CONFIG,
    LABEL_POOL,
)

#: Node labels NVIDIA's GPU Feature Discovery writes from the node's sharing config, so that an
#: NVIDIA pool changes them by applying itself; a pool may not select by them (the CRD refuses it,
#: ``gpushare.api.rules.REWRITTEN_SELECTOR``). Read in k8s-device-plugin v0.19.3, ``internal/lm``:
#: ``resource.go`` ``getProductName`` appends ``-SHARED`` to the product of a shared resource that
#: is not renamed, ``baseLabeler`` writes its replicas and sharing strategy; ``nvml.go``
#: ``newSharingLabeler`` writes ``mps.capable`` (true only under an MPS config); ``strategy.go``
#: writes ``mig.strategy`` from the config's flags. MIG adds the labels its configs make GFD
#: rewrite here: this tuple is the one list.
NVIDIA_SHARING_LABELS: Final = (
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.replicas",
    "nvidia.com/gpu.sharing-strategy",
    "nvidia.com/mig.strategy",
    "nvidia.com/mps.capable",
)

SCHEDULE_DEFAULT: Final = "default"
SCHEDULE_CGPU: Final = "cgpu"
SCHEDULE_SHARE: Final = "share"
SCHEDULE_CORE_MEM: Final = "core_mem"
#: The kind of a pool of NVIDIA's device plugin (``GPUSharePoolSpec.mode``; not an ACK schedule).
POOL_KIND_NVIDIA: Final = "nvidia"

# Node annotations written by the operator.
#: JSON: {"pool": name, "prior": {label: value-or-null}} — what we replaced, for Restore.
ANNOTATION_OWNED: Final = f"{GROUP}/owned-labels"
#: Set when the operator cordoned a node for a mode switch; never uncordon without it.
ANNOTATION_CORDONED_BY: Final = f"{GROUP}/cordoned-by"
#: JSON (policy.planner.RestartRecord): {"hash": plugin-labels-hash, "since": when they were written,
#: "state": Pending|Done|Failed|Skipped, "pool": who owes the restart, "result": optional detail}.
ANNOTATION_PLUGIN_RESTART: Final = f"{GROUP}/plugin-restart"
#: JSON (policy.planner.LoanRecord): {"from": lender pool, "to": borrower pool, "since": RFC 3339}:
#: the node is lent; the planner puts it in the borrower pool while it stays selected by the lender.
ANNOTATION_LOAN: Final = f"{GROUP}/loan"
#: JSON GPU inventory published by the node agent.
ANNOTATION_INVENTORY: Final = f"{GROUP}/gpu-inventory"

#: The well-known label naming a node (how a pod pins one node through its nodeSelector).
LABEL_HOSTNAME: Final = "kubernetes.io/hostname"

# Agent labels.
LABEL_GPU_COUNT: Final = f"{GROUP}/gpu.count"
LABEL_GPU_PRODUCT: Final = f"{GROUP}/gpu.product"
LABEL_GPU_MEMORY_MIB: Final = f"{GROUP}/gpu.memory-mib"
LABEL_CGPU_ISOLATION: Final = f"{GROUP}/cgpu.isolation"

# Extended resources.
RES_GPU_MEM: Final = "aliyun.com/gpu-mem"
RES_GPU_CORE: Final = "aliyun.com/gpu-core.percentage"
RES_GPU_COUNT: Final = "aliyun.com/gpu-count"
GPU_RESOURCE_PREFIX: Final = "aliyun.com/gpu"
#: Whole GPUs (exclusive scheduling, ``ack.node.gpu.schedule=default``; NVIDIA's device plugin).
RES_NVIDIA_GPU: Final = "nvidia.com/gpu"
#: Every NVIDIA resource (extended resources: whole, not overcommitted) starts with this.
RES_NVIDIA_PREFIX: Final = "nvidia.com/"
#: Every ``aliyun.com/gpu*`` resource name ACK's device plugins offer; others are misspellings.
KNOWN_GPU_RESOURCES: Final = (
    RES_GPU_MEM,
    RES_GPU_CORE,
    RES_GPU_COUNT,
    "aliyun.com/gpu",
    "aliyun.com/gpu-core.tflops",
)

# Webhook opt-out.
LABEL_WEBHOOK: Final = f"{GROUP}/webhook"
WEBHOOK_IGNORE: Final = "ignore"

# Device plugin defaults.
DEFAULT_PLUGIN_NAMESPACE: Final = "kube-system"
DEFAULT_PLUGIN_LABELS: Final = {"name": "gpushare-device-plugin-ds"}

# NVIDIA's device plugin (k8s-device-plugin), as its Helm chart deploys it.
#: With renameByDefault, shared GPUs are advertised under this name.
RES_NVIDIA_GPU_SHARED: Final = "nvidia.com/gpu.shared"
#: With the plugin's mixed MIG strategy, each MIG profile is advertised as ``nvidia.com/mig-<profile>``.
RES_NVIDIA_MIG_PREFIX: Final = "nvidia.com/mig-"
#: GPU Feature Discovery's count of a node's physical GPUs.
LABEL_NVIDIA_GPU_COUNT: Final = "nvidia.com/gpu.count"
NVIDIA_PLUGIN_NAMESPACE: Final = "nvidia-device-plugin"
NVIDIA_PLUGIN_LABELS: Final = {"app.kubernetes.io/name": "nvidia-device-plugin"}
NVIDIA_CONFIGS_CONFIGMAP: Final = "nvidia-device-plugin-configs"
#: ConfigMap annotation: the keys gpushare wrote there and when (JSON {key: RFC 3339}).
ANNOTATION_CONFIGS: Final = f"{GROUP}/configs"

FINALIZER: Final = f"{GROUP}/cleanup"
