"""NVIDIA's admission records: what ``gpushare.backends.nvidia.admission.rules`` emits of its own.

``GS019`` to ``GS023`` are NVIDIA's alone (``GS022`` and ``GS023`` its MIG pools'). ``GS019``: a
container asks for more than one shared GPU where the pool's device plugin refuses it at Allocate.
The pod rules also emit the NVIDIA cases of two records shared with ACK's rules, ``GS009`` and
``GS011`` (in :mod:`gpushare.backends.ack.admission.catalog`, where their other cases are), and
ACK's ``GS018`` names NVIDIA's resources by :data:`NVIDIA_WHAT`.
"""

from __future__ import annotations

from gpushare import constants as c
from gpushare.backends.nvidia.admission import cel
from gpushare.rulekit.records import CODE_INVALID, AdmissionRule, Case, CelForm, CelMessage

_NV = c.RES_NVIDIA_GPU
_NVS = c.RES_NVIDIA_GPU_SHARED

#: What each NVIDIA resource is, in the messages (ACK's GS018 too).
NVIDIA_WHAT: dict[str, str] = {_NV: "whole GPUs", _NVS: "NVIDIA's shared GPUs"}

NVIDIA_MORE_THAN_ONE = AdmissionRule(
    id="GS019-nvidia-more-than-one-shared-gpu",
    verdict="deny",
    pool_mode=True,
    what=f"a container asks for at most one `{_NV}` (or `{_NVS}`) when it can land on an NVIDIA pool whose"
    " device plugin refuses more at Allocate: `failRequestsGreaterThanOne: true`, or strategy MPS (NVIDIA's"
    " plugin always refuses more than one MPS replica); for `" + _NV + "` the pod is confined to such"
    " pools by its node constraints, for `" + _NVS + "` it can reach one",
    fix="ask for 1, or set `failRequestsGreaterThanOne: false` on a TimeSlicing pool (more than one"
    " time-sliced replica gives a container no more of the GPU)",
    cases={
        "fail": Case(
            "asks for {count} shared GPUs, but pool {pool} (NVIDIA {strategy}, failRequestsGreaterThanOne:"
            " true) makes the device plugin refuse a container asking for more than one at Allocate"
            " (UnexpectedAdmissionError)",
            'ask for 1 "{resource}", or set spec.nvidia.failRequestsGreaterThanOne: false on pool {pool};'
            " more than one time-sliced replica gives the container no more of the GPU, only more"
            " shares of the same one",
        ),
        "mps": Case(
            "asks for {count} shared GPUs, but pool {pool} shares its GPUs with MPS, and NVIDIA's device"
            " plugin refuses a container asking for more than one MPS replica at Allocate"
            " (UnexpectedAdmissionError)",
            'ask for 1 "{resource}"; for a larger share of each GPU, lower spec.nvidia.replicas on'
            " pool {pool}",
        ),
    },
)

#: NVIDIA's resources are extended resources: the prefix of their names.
NVIDIA_PREFIX = cel.PREFIX

# Kubernetes' own rules for an extended resource (pkg/apis/core/validation, validation.go:
# ``ValidateResourceRequirements``, ``ValidateResourceQuantityValue``, ``ValidateNonnegativeQuantity``;
# an extended resource is an integer resource, ``helper.IsIntegerResourceName``, that cannot be
# overcommitted, ``helper.IsOvercommitAllowed``). The problems are Kubernetes' own words.
NVIDIA_QUANTITY = AdmissionRule(
    id="GS020-nvidia-resource-quantity",
    verdict="deny",
    pool_mode=False,
    code=CODE_INVALID,
    what=f"a container's `{NVIDIA_PREFIX}*` requests and limits are what Kubernetes accepts for an extended"
    " resource (`pkg/apis/core/validation` `ValidateResourceRequirements`): quantities that are whole and not"
    " negative, and a request only beside a limit of the same amount (extended resources cannot be"
    " overcommitted); the apiserver refuses a Pod that breaks this, and a workload's pods are never created",
    fix="write a whole number, and set only limits (the request defaults to the limit) or requests equal"
    " to limits",
    cases={
        "malformed": Case(
            "is not a Kubernetes quantity; the apiserver refuses it",
            "write a whole number such as 1",
        ),
        "negative": Case(
            "must be greater than or equal to 0 (Kubernetes refuses a negative quantity)",
            "write a whole number such as 1",
        ),
        "not-integer": Case(
            "must be an integer: Kubernetes counts {resource} in whole devices, as every extended resource",
            "ask for a whole number (for a fraction of a GPU, ask for one replica of a shared GPU on an"
            " NVIDIA pool that shares them)",
        ),
        "no-limit": Case(
            "is set without a limit: Limit must be set for non overcommitable resources (Kubernetes refuses"
            " a request of an extended resource without its limit)",
            'set resources.limits["{resource}"] to the same value, or set only the limit (the request'
            " defaults to it)",
        ),
        "differs": Case(
            "must be equal to {resource} limit of {limit}: Kubernetes does not overcommit extended resources",
            "set requests equal to limits, or drop requests",
        ),
    },
    cel=CelForm(
        broken="size(e.b) > 0 || size(e.nl) > 0 || size(e.nd) > 0",
        messages=(
            *(
                CelMessage(
                    f"size(e.b) > 0 && e.b[0][2] == '{case}'",
                    case,
                    "'resources.' + e.b[0][0] + '[\"' + e.b[0][1] + '\"]'",
                    cel.shown("(e.b[0][0] == 'limits' ? e.l : e.q)[e.b[0][1]]"),
                    {"resource": "e.b[0][1]"},
                )
                for case in ("malformed", "negative", "not-integer")
            ),
            CelMessage(
                "size(e.nl) > 0",
                "no-limit",
                "'resources.requests[\"' + e.nl[0] + '\"]'",
                cel.shown("e.q[e.nl[0]]"),
                {"resource": "e.nl[0]"},
            ),
            CelMessage(
                "true",
                "differs",
                "'resources.requests[\"' + e.nd[0] + '\"]'",
                cel.shown("e.q[e.nd[0]]"),
                {"resource": "e.nd[0]", "limit": cel.shown("e.l[e.nd[0]]")},
            ),
        ),
        summary=f"asks for an {NVIDIA_PREFIX}* quantity Kubernetes refuses (whole, not negative, requests"
        " equal to limits)",
        entries="nvidia",
        custom_kinds_only=True,
    ),
    differs="the policy holds it for custom workload kinds only: the apiserver's own validation refuses"
    " such a Pod, or a built-in kind's pod template, before any admission runs; the policy shows the"
    " first broken quantity, then requests without a limit, then requests that differ",
)

# What the scheduler can never place (its NodeResourcesFit filter, pkg/scheduler/framework/plugins/
# noderesources/fit.go: "Insufficient <resource>" when the pod's request exceeds a node's allocatable).
NVIDIA_EXCEEDS_NODE = AdmissionRule(
    id="GS021-nvidia-request-exceeds-node",
    verdict="deny",
    pool_mode=True,
    what=f"a pod's effective request of each `{NVIDIA_PREFIX}*` resource, as the scheduler computes it"
    " (containers and sidecar init containers summed, a regular init container with the sidecars"
    " before it, the larger of the two), fits on one node it can land on: on an NVIDIA pool the"
    " largest node's GPUs x the pool's replicas (its allocatable once the pool's config is applied"
    " there); on a MIG pool with a geometry, the profile's devices per GPU x the node's GPUs x the"
    " profile's time-slicing replicas (what the device plugin advertises once NVIDIA's MIG manager"
    " has applied the geometry: `nvidia.com/mig-<profile>` under the mixed strategy, `nvidia.com/gpu`"
    " under single); elsewhere the node's allocatable; a pod without node constraints (which only"
    " `gpushare check` judges) on some known node; admitted while a node's size is unknown",
    fix="ask for at most what one node offers, or target a pool with larger nodes or more replicas (on a"
    " MIG pool: more devices of the profile per GPU, or its time-slicing)",
    cases={
        "target": Case(
            'asks for {count} "{resource}" in all (the pod\'s effective request: containers summed, init'
            " containers at their peak), but no node it can land on offers more than {most} ({sizes});"
            " the pod would stay Pending (Insufficient {resource})",
            "ask for at most {most}, split the work over several pods, or target a pool with larger nodes"
            " or more replicas",
        ),
        "anywhere": Case(
            'asks for {count} "{resource}" in all (the pod\'s effective request: containers summed, init'
            " containers at their peak), but no known node offers more than {most}{sizes}; the pod would"
            " stay Pending (Insufficient {resource})",
            "ask for at most {most}, or add nodes that offer more",
        ),
        "mig": Case(
            'asks for {count} "{resource}" in all (the pod\'s effective request: containers summed, init'
            " containers at their peak), but no node of MIG pool {pool} has more than {most} ({how});"
            " the pod would stay Pending (Insufficient {resource})",
            "ask for at most {most}, split the work over several pods, or give pool {pool} more {profile}"
            " devices per GPU in spec.nvidia.mig.geometry (or time-slice them: spec.nvidia.mig.timeSlicing)",
        ),
        "nowhere": Case(
            'asks for {count} "{resource}" in all, but no known node offers {resource}; the pod would stay'
            " Pending (Insufficient {resource})",
            "ask for a resource the cluster's nodes offer, or add nodes that offer {resource} (an NVIDIA"
            " pool advertises nvidia.com/gpu, or nvidia.com/gpu.shared with renameByDefault)",
        ),
    },
)

# What a MIG pool's nodes advertise. NVIDIA's device plugin (k8s-device-plugin README,
# "--mig-strategy"): with the mixed strategy each MIG device is advertised as
# nvidia.com/mig-<profile> (a GPU with MIG disabled still as nvidia.com/gpu); with single, every
# GPU carries one profile and its devices are advertised as nvidia.com/gpu. NVIDIA's MIG manager
# (mig-parted v0.10.0) applies a config's entries to the GPUs each matches (cmd/nvidia-mig-parted/
# assert/assert.go WalkSelectedMigConfigForEachGPU: a GPU no entry's device-filter matches is
# skipped, left as it was); every entry gpushare writes sets mig-enabled: true
# (gpushare.backends.nvidia.migconfig). The two rules need the pool's geometry: the
# ValidatingAdmissionPolicy, which reads no cluster state, does not hold them.
_MIG = c.RES_NVIDIA_MIG_PREFIX

NVIDIA_MIG_PROFILE = AdmissionRule(
    id="GS022-nvidia-mig-profile-not-offered",
    verdict="deny",
    pool_mode=True,
    what=f"a pod confined to NVIDIA MIG pools asks only for MIG devices (`{_MIG}<profile>`) that one of"
    " them advertises: under the device plugin's mixed strategy a profile of the pool's geometry (NVIDIA's"
    " MIG manager creates only those; a pool naming an existing config is not judged), under the single"
    f" strategy none (its slices are advertised as `{_NV}`)",
    fix=f"ask for a profile the pool's geometry declares, or `{_NV}` on a single-strategy pool, or add the"
    " profile to the pool's spec.nvidia.mig.geometry",
    cases={
        "profile": Case(
            'asks for the MIG device "{resource}", but MIG pool {pool} cuts its GPUs into {profiles}'
            " devices only (spec.nvidia.mig.geometry); NVIDIA's MIG manager creates no {profile} device"
            " there, so no node advertises {resource} and the pod would stay Pending",
            'ask for one of {offered} (e.g. "{example}"), or add {profile} to the geometry of pool {pool}',
        ),
        "single": Case(
            'asks for the MIG device "{resource}", but MIG pool {pool} runs the device plugin\'s single'
            " MIG strategy: its slices ({profiles}) are advertised as " + _NV + " and no " + _MIG + "*"
            " resource exists there, so the pod would stay Pending",
            'ask for "' + _NV + '" (one ' + "{profiles} slice each) on pool {pool}, or target a MIG pool"
            " with strategy mixed",
        ),
    },
)

NVIDIA_WHOLE_GPU_ON_MIG = AdmissionRule(
    id="GS023-nvidia-whole-gpu-on-mig",
    verdict="deny",
    pool_mode=True,
    what=f"a pod confined to NVIDIA MIG pools of the mixed strategy asks for no `{_NV}` where every GPU is"
    " MIG-enabled (a geometry with an entry for every GPU, without deviceFilter): the device plugin"
    f" advertises such GPUs only as `{_MIG}<profile>` devices, never as `{_NV}`",
    fix=f"ask for a profile the pool offers (`{_MIG}<profile>`), or target a pool of whole GPUs",
    cases={
        "mixed": Case(
            'asks for "{resource}", but every GPU of MIG pool {pool} is MIG-enabled'
            " (spec.nvidia.mig.geometry: {profiles} on every GPU) and the device plugin's mixed strategy"
            " advertises them as MIG devices only, no {resource}; the pod would stay Pending",
            'ask for a MIG profile instead, e.g. resources.limits["{example}"]: {count}, or target a pool of'
            " whole GPUs (an NVIDIA pool with strategy None)",
        ),
    },
)

#: The rules the ValidatingAdmissionPolicy holds of NVIDIA's (no cluster state).
STATELESS: tuple[AdmissionRule, ...] = (NVIDIA_QUANTITY,)

#: NVIDIA's own pod and workload rules, in the table's order.
WORKLOAD_RULES: tuple[AdmissionRule, ...] = (
    NVIDIA_MORE_THAN_ONE,
    NVIDIA_QUANTITY,
    NVIDIA_EXCEEDS_NODE,
    NVIDIA_MIG_PROFILE,
    NVIDIA_WHOLE_GPU_ON_MIG,
)
