"""Every admission rule in one table: the backends' pod and workload rules, and the pool rules.

A rule is a record (:class:`gpushare.rulekit.records.AdmissionRule`) defined once: the backends'
pod and workload rules ``GS*`` in :mod:`gpushare.backends.ack.admission.catalog` and
:mod:`gpushare.backends.nvidia.admission.catalog`, the pool rules ``GP*`` here (their
CRD/pydantic record is :mod:`gpushare.api.rules`; here they get their verdict and HTTP code).
This module assembles them:

* :data:`ALL_RULES` and :data:`RULES` (by id): the table the engine's findings, the HTTP code of a
  denial (:func:`gpushare.admission.review.verdict`) and the docs read;
* :data:`STATELESS`: the records with a CEL form, which the ValidatingAdmissionPolicy holds
  (:mod:`gpushare.admission.vap`);
* the tables of docs/reference/admission-rules.md (gpushare.docsgen) are :func:`rules_table` and
  :func:`policy_table` (a unit test compares them with the docs).
"""

from __future__ import annotations

from gpushare import constants as c
from gpushare.api.rules import COMPUTE_WITHOUT_ISOLATION, EMPTY_SELECTOR, MANAGED_SELECTOR
from gpushare.backends.ack.admission import catalog as ack
from gpushare.backends.nvidia.admission import catalog as nvidia
from gpushare.rulekit.records import CODE_INVALID, AdmissionRule

# --- the pool rules (their CRD/pydantic record is gpushare.api.rules) ------------------------------

POOL_SCHEMA = AdmissionRule(
    id=MANAGED_SELECTOR.id,
    verdict="deny",
    pool_mode=False,
    code=CODE_INVALID,
    what="a GPUSharePool follows the API schema (field types, enums, ranges, no selector on labels"
    " gpushare writes, nor on those NVIDIA's GPU Feature Discovery rewrites when GPUs are shared)",
    fix="correct the field named in the message (see `kubectl explain gsp.spec`)",
)
POOL_COMPUTE_WITHOUT_ISOLATION = AdmissionRule(
    id=COMPUTE_WITHOUT_ISOLATION.id,
    verdict="deny",
    pool_mode=False,
    code=CODE_INVALID,
    what="`computeAllocation: true` requires `memoryIsolation: true`",
    fix=COMPUTE_WITHOUT_ISOLATION.fix,
)
POOL_EMPTY_SELECTOR = AdmissionRule(
    id=EMPTY_SELECTOR.id,
    verdict="deny",
    pool_mode=False,
    code=CODE_INVALID,
    what="a pool's `nodeSelector` is not empty (an empty selector takes over every node)",
    fix="select the pool's nodes, e.g. by `alibabacloud.com/nodepool-id`",
)
POOL_OVERLAP = AdmissionRule(
    id="GP004-pool-overlap",
    verdict="deny",
    pool_mode=False,
    what="a pool selects no node that currently belongs to another pool (selected by it, or labelled"
    f" `{c.LABEL_POOL}=<other>` by a pool that is gone; a node labelled for a pool that no longer selects"
    f" it is moving, and a node this pool lent, `{c.ANNOTATION_LOAN}`, is still its own)",
    fix="narrow one pool's nodeSelector so that each node is in at most one pool",
)
ALL_RULES: tuple[AdmissionRule, ...] = (
    *ack.WORKLOAD_RULES,
    *nvidia.WORKLOAD_RULES,
    POOL_SCHEMA,
    POOL_COMPUTE_WITHOUT_ISOLATION,
    POOL_EMPTY_SELECTOR,
    POOL_OVERLAP,
)
RULES: dict[str, AdmissionRule] = {rule.id: rule for rule in ALL_RULES}

#: The rules the ValidatingAdmissionPolicy holds (no cluster state), in the policy's order.
STATELESS: tuple[AdmissionRule, ...] = (*ack.STATELESS, *nvidia.STATELESS)
assert {r.id for r in STATELESS} == {r.id for r in ALL_RULES if r.cel is not None or r.pod_cel is not None}


# --- the docs tables -------------------------------------------------------------------------------


def rules_table() -> str:
    """The rules table of docs/reference/admission-rules.md."""
    rows = ["| Rule | Verdict | Pool mode | What must hold | Fix |", "|---|---|---|---|---|"]
    for rule in ALL_RULES:
        mode = rule.pool_mode_text or ("yes" if rule.pool_mode else "no")
        rows.append(f"| `{rule.id}` | {rule.verdict} | {mode} | {rule.what} | {rule.fix} |")
    return "\n".join(rows) + "\n"


def policy_table() -> str:
    """The second table of docs/reference/admission-rules.md: the rules the policy holds, and where
    it differs."""
    rows = ["| rule | policy differs from the webhook |", "|---|---|"]
    rows.extend(f"| `{rule.id}` | {rule.differs or 'no'} |" for rule in STATELESS)
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    import sys

    tables = {"rules": rules_table, "policy": policy_table}
    if len(sys.argv) != 2 or sys.argv[1] not in tables:
        sys.exit("usage: python -m gpushare.admission.catalog rules|policy")
    sys.stdout.write(tables[sys.argv[1]]())
