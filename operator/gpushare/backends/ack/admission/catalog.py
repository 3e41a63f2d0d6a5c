"""ACK's admission rules for pods and workloads, each defined once: id, verdict, pool dependence,
HTTP code, what must hold, the fix, the messages, and the CEL form of the rules the
ValidatingAdmissionPolicy holds (records of :class:`gpushare.rulekit.records.AdmissionRule`).

The engine (:mod:`gpushare.backends.ack.admission.rules`) emits findings of these records.
Two of them are shared with NVIDIA's pod rules (:mod:`gpushare.backends.nvidia.admission`), which
emit their NVIDIA cases: ``GS009`` (the pod is confined to pools of another kind; an NVIDIA pool
is the kind ``nvidia`` beside ACK's ``cgpu``, ``share`` and ``core_mem``) and ``GS011`` (the
target does not exist). ``GS018`` is ACK's: a pod asking for ACK's GPU sharing also asks for
NVIDIA's GPUs. NVIDIA's own ``GS019`` is in :mod:`gpushare.backends.nvidia.admission.catalog`.
``gpushare.admission.catalog`` assembles the backends' records with the pool rules into the one
table.
"""

from __future__ import annotations

from gpushare import constants as c
from gpushare.backends.nvidia.admission.catalog import NVIDIA_WHAT
from gpushare.rulekit import cel
from gpushare.rulekit.records import CODE_INVALID, AdmissionRule, Case, CelForm, CelMessage, PodCelForm

MEM = c.RES_GPU_MEM
CORE = c.RES_GPU_CORE

#: The CEL strings of a GPU entry's core and memory values (as shown) and why they are malformed.
_CS, _MS = cel.shown("e.cv"), cel.shown("e.mv")
_CE, _ME = cel.reason("e.cv"), cel.reason("e.mv")

# --- the workload rules ----------------------------------------------------------------------------

_UNIT_DIFFERS = (
    "the policy cannot know the target pool, so its message names GiB; the webhook names MiB for a"
    " pod aimed only at pools with `devicePlugin.memoryUnit: MiB`"
)
_SPACES_DIFFER = (
    'a value with spaces around it in a custom resource (stored as written, e.g. `" 5"`) is read'
    " by the engine as the apiserver reads a built-in's quantity (trimmed), and refused by the policy"
    " (CEL's `quantity()` does not trim)"
)

CORE_STEP = AdmissionRule(
    id="GS001-core-percentage-step",
    verdict="deny",
    pool_mode=False,
    code=CODE_INVALID,
    what=f"`{CORE}` is a whole number and a multiple of 5",
    fix="use the nearest multiple of 5 (e.g. 30 or 35 instead of 33)",
    cases={
        "malformed": Case(
            "{error}; the GPU compute share is a whole multiple of 5 from 5 to 100",
            "write a number such as 30",
        ),
        "step": Case("is not a multiple of 5", "use {low} or {high}"),
    },
    cel=CelForm(
        broken="e.cn == -1 || (e.cn >= 5 && e.cn <= 100 && e.cn % 5 != 0)",
        messages=(
            CelMessage("e.cn == -1", "malformed", cel.res_field("e.cw", CORE), _CS, {"error": _CE}),
            CelMessage(
                "true",
                "step",
                cel.res_field("e.cw", CORE),
                _CS,
                {"low": "string(e.cn - e.cn % 5)", "high": "string(e.cn - e.cn % 5 + 5)"},
            ),
        ),
        summary=f'"{CORE}" is not a whole multiple of 5',
    ),
    differs=_SPACES_DIFFER,
)

CORE_RANGE = AdmissionRule(
    id="GS002-core-percentage-range",
    verdict="deny",
    pool_mode=False,
    code=CODE_INVALID,
    what=f"`{CORE}` is from 5 to 100 (100 = one whole GPU)",
    fix="ask for 5..100; for more than one GPU use exclusive scheduling",
    cases={
        "below": Case("is outside 5..100 (percent of one GPU)", "use 5 for the smallest share"),
        "above": Case("is outside 5..100 (percent of one GPU)", "use at most 100 (one whole GPU)"),
    },
    cel=CelForm(
        broken="e.cn >= 0 && (e.cn < 5 || e.cn > 100)",
        messages=(
            CelMessage("e.cn < 5", "below", cel.res_field("e.cw", CORE), _CS),
            CelMessage("true", "above", cel.res_field("e.cw", CORE), _CS),
        ),
        summary=f'"{CORE}" is outside 5..100',
    ),
)

CORE_WITHOUT_MEM = AdmissionRule(
    id="GS003-core-without-mem",
    verdict="deny",
    pool_mode=False,
    code=CODE_INVALID,
    what=f"a container asking for `{CORE}` also asks for `{MEM}`",
    fix=f"add `{MEM}` (GiB) to the same container's limits",
    cases={
        "missing": Case(
            f'is missing but the container asks for "{CORE}"={{core}}',
            f'add "{MEM}" ({{unit}} of GPU memory) to the same container',
        )
    },
    cel=CelForm(
        broken="e.cn != -2 && e.mn == -2",
        messages=(
            CelMessage(
                "true", "missing", cel.res_field("'limits'", MEM), None, {"core": _CS, "unit": "'GiB'"}
            ),
        ),
        summary=f'asks for "{CORE}" without "{MEM}"',
    ),
    differs=_UNIT_DIFFERS,
)

MEM_POSITIVE = AdmissionRule(
    id="GS004-mem-positive-integer",
    verdict="deny",
    pool_mode=False,
    code=CODE_INVALID,
    what=f"`{MEM}` is a positive whole number of the device plugin's memory unit (GiB, or MiB"
    " on pools with `devicePlugin.memoryUnit: MiB`), without a binary unit suffix (the value the"
    " apiserver stores: `2e3` and `2k` are 2000)",
    fix=f'write e.g. `{MEM}: 2` (not "2Gi", "1.5" or 0)',
    cases={
        "malformed": Case(
            "{error}; GPU memory is a positive whole number of {unit}",
            "write a whole number of {unit} such as {example}",
        ),
        "zero": Case(
            "is zero; GPU memory is a positive whole number of {unit}",
            f'ask for at least 1, or remove "{MEM}"',
        ),
    },
    cel=CelForm(
        broken="e.mn == -1 || e.mn == 0",
        messages=(
            CelMessage("e.mn == 0", "zero", cel.res_field("e.mw", MEM), _MS, {"unit": "'GiB'"}),
            CelMessage(
                "true",
                "malformed",
                cel.res_field("e.mw", MEM),
                _MS,
                {"error": _ME, "unit": "'GiB'", "example": "'2'"},
            ),
        ),
        summary=f'"{MEM}" is not a positive whole number of GiB',
    ),
    differs=f"{_UNIT_DIFFERS}; {_SPACES_DIFFER}",
)

MEM_EXCEEDS_GPU = AdmissionRule(
    id="GS005-mem-exceeds-gpu",
    verdict="deny",
    pool_mode=True,
    what=f"`{MEM}` of a container (and of the pod, or of each card with `{c.RES_GPU_COUNT}`)"
    " fits on one GPU of the target pool, in the pool's memory unit; without a target, on one GPU"
    " of some known pool",
    fix="ask for at most the per-GPU memory of the pool, or target a pool with larger GPUs (the fix"
    " suggests a `gpu-count` split when one fits, and calls out MiB-looking values on GiB pools)",
)

REQUEST_LIMIT = AdmissionRule(
    id="GS006-request-limit-mismatch",
    verdict="deny",
    pool_mode=False,
    code=CODE_INVALID,
    what="requests and limits of the GPU-sharing resources are equal when both are given, and limits are set",
    fix="set only limits, or requests equal to limits",
    cases={
        "no-limit": Case(
            "is set without a limit; extended resources are allocated by their limit",
            'set resources.limits["{resource}"] to the same value',
        ),
        "differs": Case("differs from the limit {limit}", "set requests equal to limits, or drop requests"),
    },
    cel=CelForm(
        broken="e.m6 || e.c6",
        messages=tuple(
            CelMessage(
                f"e.{flag}6 && {cel.string_literal(res)} in e.l" if nolimit is None else f"e.{flag}6",
                "differs" if nolimit is None else "no-limit",
                cel.res_field("'requests'", res),
                cel.shown(f"e.q[{cel.string_literal(res)}]"),
                {"limit": cel.shown(f"e.l[{cel.string_literal(res)}]")}
                if nolimit is None
                else {"resource": nolimit},
            )
            for flag, res in (("m", MEM), ("c", CORE))
            for nolimit in (None, cel.string_literal(res))
        ),
        summary="requests a GPU-sharing resource that differs from (or lacks) its limit",
    ),
)

TARGET_MISSING = AdmissionRule(
    id="GS007-pool-target-missing",
    verdict="deny",
    pool_mode=True,
    what="a pod asking for GPU sharing has a nodeSelector or required node affinity naming its pool",
    fix=f"add `nodeSelector: {{{c.LABEL_POOL}: <pool>}}` (or the pool's ACK labels)",
)

TARGET_AMBIGUOUS = AdmissionRule(
    id="GS008-pool-target-ambiguous",
    verdict="deny",
    pool_mode=True,
    what="the pod's node constraints confine it to pools of exactly one kind (cgpu, share or core_mem; an"
    " NVIDIA pool, kind nvidia, offers no aliyun.com/gpu* and is left out when another kind is reached)",
    fix=f"select one pool, e.g. `{c.LABEL_POOL}: <pool>` or `{c.LABEL_SCHEDULE}: <mode>`",
)

_NV = c.RES_NVIDIA_GPU
_NVS = c.RES_NVIDIA_GPU_SHARED

KIND_MISMATCH = AdmissionRule(
    id="GS009-pool-kind-mismatch",
    verdict="deny",
    pool_mode=True,
    what="memory-only pods target pools without compute allocation; pods with "
    f"`{CORE}` target pools with it (no mixing of job types on a node). An NVIDIA pool (spec.nvidia) is"
    f" a kind of its own, `nvidia`: a pod asking for `{c.GPU_RESOURCE_PREFIX}*` does not target only"
    f" NVIDIA pools, a pod asking for `{_NV}` or `{_NVS}` confined to pools (by `{c.LABEL_POOL}`, the"
    f" pool's nodeSelector, node names or `{c.LABEL_SCHEDULE}`) targets an NVIDIA pool that advertises"
    f" the resource it asks for (`{_NVS}` with renameByDefault, else `{_NV}`; a MIG device"
    f" `{c.RES_NVIDIA_MIG_PREFIX}*` only on a MIG pool, whose profiles GS022 judges, or a pool with"
    " strategy None: a TimeSlicing or MPS pool's config shares no MIG device, and NVIDIA's plugin does not"
    " support MPS on MIG-enabled devices)",
    fix="target a pool of the matching kind, or add/remove the gpu-core.percentage request; ask for the"
    " resource the NVIDIA pool advertises",
    cases={
        "ack-on-nvidia": Case(
            "targets {where} (nvidia: {kind_text}) but {asker} asks for ACK GPU sharing"
            ' ("{resource}"); the nodes of an NVIDIA pool offer no ' + c.GPU_RESOURCE_PREFIX + "*, so the"
            " pod would stay Pending",
            "target a pool of ACK's GPU sharing ({suggestion}), or ask for {offered} on the NVIDIA pool"
            " instead of the " + c.GPU_RESOURCE_PREFIX + "* resources",
        ),
        "nvidia-on-ack": Case(
            'targets {where} but {asker} asks for "{resource}": the nodes there run ACK\'s GPU sharing'
            " ({kinds}), which offers " + c.GPU_RESOURCE_PREFIX + "* and no {resource}, so the pod would"
            " stay Pending",
            "target an NVIDIA pool ({suggestion}), or ask for " + MEM + " to share a GPU of the ACK pool",
        ),
        "nvidia-mig": Case(
            'targets {where} but {asker} asks for the MIG device "{resource}": the pool shares its GPUs'
            " ({why}), its config shares " + _NV + " only and names no MIG device{mps}, so its nodes"
            " advertise no {resource} and the pod would stay Pending",
            'ask for "{offered}" on this pool; for {resource}, target a MIG pool that offers it,'
            " {suggestion}, or an NVIDIA pool with strategy None on nodes whose device plugin runs with the"
            " mixed MIG strategy",
        ),
        "nvidia-resource": Case(
            'targets {where} but {asker} asks for "{resource}": the pool\'s nodes advertise "{offered}"'
            " ({why}) and no {resource}, so the pod would stay Pending",
            'ask for "{offered}" instead, or target an NVIDIA pool that advertises "{resource}"'
            " ({suggestion})",
        ),
    },
)

NO_ISOLATION = AdmissionRule(
    id="GS010-no-isolation-sizing",
    verdict="warn",
    pool_mode=True,
    what="a pod on a pool without memory isolation sees the whole GPU and must size itself",
    fix="read `ALIYUN_COM_GPU_MEM_CONTAINER` / `ALIYUN_COM_GPU_MEM_DEV` in the application",
)

TARGET_UNKNOWN = AdmissionRule(
    id="GS011-pool-target-unknown",
    verdict="deny",
    pool_mode=True,
    what="the pod's node constraints match at least one known pool or GPU-sharing node (ACK labels"
    " that no known node has and no pool writes match nothing: see below); a pod asking for"
    f" `{c.RES_NVIDIA_GPU_SHARED}` reaches an NVIDIA pool with renameByDefault or a node that advertises"
    f" it, and one asking for `{c.RES_NVIDIA_GPU}` names (`{c.LABEL_POOL}`) a pool that exists",
    fix="fix the pool name or labels in the nodeSelector / node affinity, or create a pool of the kind"
    " asked for",
    cases={
        "nvidia-pool-unknown": Case(
            f"names pool {{wanted}}, which no GPUSharePool is (known pools: {{known}}): no node carries"
            f" {c.LABEL_POOL}={{wanted}}, so {{asker}} would stay Pending",
            "fix the pool name ({suggestion})",
        ),
        "no-shared-pool": Case(
            f'lets {{asker}} ask for "{_NVS}", which only the nodes of NVIDIA pools with'
            " renameByDefault: true advertise, but the pod reaches no such pool and no node that"
            " advertises it (NVIDIA pools with renameByDefault: {known}); the pod would stay Pending",
            f"target an NVIDIA pool with renameByDefault: true ({{suggestion}}), set renameByDefault: true"
            f' on the NVIDIA pool it should run on, or ask for "{_NV}"',
        ),
    },
)

_OFFERS = f"the device plugin offers {MEM} and {CORE}"

UNKNOWN_RESOURCE = AdmissionRule(
    id="GS012-unknown-gpu-resource",
    verdict="deny",
    pool_mode=False,
    code=CODE_INVALID,
    what=f"every `{c.GPU_RESOURCE_PREFIX}*` resource a container asks for is one a node can offer"
    f" (`{MEM}`, `{CORE}`; `aliyun.com/gpu-core.tflops` is let through); `{c.RES_GPU_COUNT}` and"
    " `aliyun.com/gpu` in a container are warnings (nodes report them, but they are not GPU sharing)."
    " The ValidatingAdmissionPolicy denies exactly the names the engine denies (any other"
    " `aliyun.com/gpu*` name), with the same message less the did-you-mean",
    fix="fix the resource name (did-you-mean in the message)",
    cases={
        "unknown": Case(
            "is not a resource any GPU-sharing node offers; the pod would stay Pending",
            "{suggestion}" + _OFFERS,
        ),
        "other": Case("is not a GPU-sharing resource: {what}", f"ask for {MEM} instead"),
    },
    cel=CelForm(
        broken="size(e.ul) > 0 || size(e.uq) > 0",
        messages=tuple(
            CelMessage(
                f"size(e.u{m}) > 0" if m == "l" else "true",
                "unknown",
                f"'resources.{where}[\"' + e.u{m}[0] + '\"]'",
                cel.shown(f"e.{m}[e.u{m}[0]]"),
                {"suggestion": "''"},
            )
            for m, where in (("l", "limits"), ("q", "requests"))
        ),
        summary=f"asks for an aliyun.com/gpu* resource no node offers; {_OFFERS}",
    ),
    differs="the policy has no did-you-mean (difflib has no CEL counterpart)",
)

GPU_COUNT_SPLIT = AdmissionRule(
    id="GS013-gpu-count-split",
    verdict="deny",
    pool_mode=False,
    pool_mode_text="no (the target-pool part: yes)",
    what=f'a pod labelled `{c.RES_GPU_COUNT}: "M"` (ACK multi-GPU sharing) has M a whole number >= 1,'
    f" a total gpu-mem N with N/M whole, no gpu-core.percentage, and targets a cgpu pool",
    fix="make N a multiple of M, drop gpu-core.percentage, target a pool with memoryIsolation and no"
    " computeAllocation",
)

CGPU_DISABLE_ENV = AdmissionRule(
    id="GS014-cgpu-disable-env",
    verdict="warn",
    pool_mode=False,
    what="a container does not set `CGPU_DISABLE` itself (the device plugin sets `CGPU_DISABLE=true`"
    f" on nodes labelled `{c.LABEL_DISABLE_ISOLATION}=true`, which turns cGPU memory isolation off"
    " for the container)",
    fix="remove it; choose isolation by the target pool",
)

KIND_UNKNOWN = AdmissionRule(
    id="GS015-workload-kind-unknown",
    verdict="warn",
    pool_mode=False,
    what=f"an object whose containers ask for `{c.GPU_RESOURCE_PREFIX}*` is of a kind in the"
    " workload-kinds table (only `check` sees such objects; the webhook registers for the table's kinds)",
    fix="register the kind in a kinds file (`gpushare check --kinds FILE`,"
    " `gpushare run --workload-kinds FILE`)",
)

GPU_COUNT_EXCEEDS_NODE = AdmissionRule(
    id="GS016-gpu-count-exceeds-node",
    verdict="deny",
    pool_mode=True,
    what=f'a pod labelled `{c.RES_GPU_COUNT}: "M"` asks for at most as many GPUs as one node of its'
    " target pool has (the most any node of the pool offers, from its allocatable"
    f" `{c.RES_GPU_COUNT}` or the agent's inventory); without a target, of some known pool; admitted"
    " when a pool's GPU count is unknown",
    fix="spread the memory over at most as many GPUs as a node of the pool has, or target a pool"
    " with larger nodes",
)

NODE_NAME_SET = AdmissionRule(
    id="GS017-node-name-set",
    verdict="deny",
    pool_mode=False,
    code=CODE_INVALID,
    what="a pod asking for GPU sharing (or a workload template) has no `spec.nodeName`: it bypasses"
    " the scheduler, and with it the GPU-sharing scheduling that picks the GPU and writes the pod's"
    " assume annotations (the device plugin then fails the pod at Allocate with"
    " UnexpectedAdmissionError)",
    fix=f"remove nodeName and target the pool with nodeSelector; to pin one node add"
    f" `{c.LABEL_HOSTNAME}: <node>` to the nodeSelector",
    cases={
        "set": Case(
            "bypasses the scheduler and with it GPU-sharing scheduling, which picks the GPU and writes"
            " the pod's assume annotations: the device plugin may refuse the pod at Allocate"
            " (UnexpectedAdmissionError), and the scheduler's GPU ledger does not count it",
            f"remove nodeName and select the pool with nodeSelector ({c.LABEL_POOL}: <pool>);"
            f" to pin one node, add {c.LABEL_HOSTNAME}: {{node}} to the nodeSelector",
        ),
    },
    pod_cel=PodCelForm(
        broken="has(p.nodeName) && type(p.nodeName) == string && p.nodeName != ''",
        case="set",
        field="nodeName",
        value=cel.clipped("p.nodeName"),
        values={"node": cel.clipped("p.nodeName")},
        summary="is bound to a node by spec.nodeName, bypassing GPU-sharing scheduling",
    ),
    differs="the policy judges the object: in a kind with several pod templates it denies nodeName on"
    " one template when another asks for GPU sharing (the webhook and `check` judge each template);"
    " for templates under a wildcard (a map of replica specs, a list of groups) its message is the"
    " rule's summary, without the template's path",
)


def _nvidia_in(m: str) -> str:
    return " || ".join(f"{cel.string_literal(r)} in e.{m}" for r in NVIDIA_WHAT)


SHARED_WITH_WHOLE_GPU = AdmissionRule(
    id="GS018-shared-and-whole-gpu",
    verdict="deny",
    pool_mode=False,
    code=CODE_INVALID,
    what=f"a pod asking for `{MEM}` or `{CORE}` does not also ask for `{_NV}` or `{_NVS}` (in the same"
    " container or another): a node runs one GPU scheduling mode (ACK's GPU sharing, or NVIDIA's device"
    " plugin with whole, time-sliced or MPS GPUs), and enabling one sets the other modes' resources to"
    " 0, so no node offers both",
    fix=f"ask for either ACK GPU sharing ({MEM}) or NVIDIA's GPUs ({_NV}, {_NVS}), not both in one pod",
    cases={
        "both": Case(
            'asks for {what} in a container that also asks for ACK GPU sharing ("{shared}"); a node'
            " runs one GPU scheduling mode (ACK's GPU sharing or NVIDIA's device plugin), so no node"
            " offers both and the pod would stay Pending",
            'drop "{resource}" to share a GPU the ACK way, or drop the ' + c.GPU_RESOURCE_PREFIX + "*"
            " resources for {what}",
        ),
        "pod": Case(
            "asks for {what} in a pod whose {sharing} asks for ACK GPU sharing; a node runs one GPU"
            " scheduling mode (ACK's GPU sharing or NVIDIA's device plugin), so no node offers both and"
            " the pod would stay Pending",
            'drop "{resource}" to share a GPU the ACK way, or run the two in separate pods',
        ),
    },
    cel=CelForm(
        broken=f"(e.mn != -2 || e.cn != -2) && ({_nvidia_in('l')} || {_nvidia_in('q')})",
        messages=tuple(
            CelMessage(
                "true" if (m, res) == ("q", _NVS) else f"{cel.string_literal(res)} in e.{m}",
                "both",
                cel.res_field(f"'{where}'", res),
                cel.shown(f"e.{m}[{cel.string_literal(res)}]"),
                {
                    "shared": f"e.mn != -2 ? {cel.string_literal(MEM)} : {cel.string_literal(CORE)}",
                    "what": cel.string_literal(NVIDIA_WHAT[res]),
                    "resource": cel.string_literal(res),
                },
            )
            for m, where in (("l", "limits"), ("q", "requests"))
            for res in NVIDIA_WHAT
        ),
        summary=f"asks for both ACK GPU sharing and NVIDIA's GPUs ({_NV} or {_NVS})",
    ),
    differs="the policy judges one container at a time: whole GPUs in one container and GPU sharing"
    " in another of the same pod are denied by the webhook and `check` only",
)

#: The pod and workload rules, in the table's order.
WORKLOAD_RULES: tuple[AdmissionRule, ...] = (
    CORE_STEP,
    CORE_RANGE,
    CORE_WITHOUT_MEM,
    MEM_POSITIVE,
    MEM_EXCEEDS_GPU,
    REQUEST_LIMIT,
    TARGET_MISSING,
    TARGET_AMBIGUOUS,
    KIND_MISMATCH,
    NO_ISOLATION,
    TARGET_UNKNOWN,
    UNKNOWN_RESOURCE,
    GPU_COUNT_SPLIT,
    CGPU_DISABLE_ENV,
    KIND_UNKNOWN,
    GPU_COUNT_EXCEEDS_NODE,
    NODE_NAME_SET,
    SHARED_WITH_WHOLE_GPU,
)
#: The rules the ValidatingAdmissionPolicy holds (no cluster state), in the policy's order.
STATELESS: tuple[AdmissionRule, ...] = (
    UNKNOWN_RESOURCE,
    REQUEST_LIMIT,
    MEM_POSITIVE,
    CORE_STEP,
    CORE_RANGE,
    CORE_WITHOUT_MEM,
    SHARED_WITH_WHOLE_GPU,
    NODE_NAME_SET,
)
