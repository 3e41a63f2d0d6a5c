"""ACK's GPU containers in CEL: what the ValidatingAdmissionPolicy reads of each, once per request.

:func:`gpu_entries` turns the request's container entries (``gpushare.rulekit.cel``'s variables)
into its GPU containers (those asking for an ``aliyun.com/gpu*`` resource) with their core and
memory values read once; each stateless rule's CEL form (:mod:`gpushare.backends.ack.admission.
catalog`) is a few comparisons over one such entry ``e``.
"""

from __future__ import annotations

from gpushare import constants as c
from gpushare.rulekit.cel import entry_number, mismatch, prefix_key, string_literal, value_of

CORE = c.RES_GPU_CORE
MEM = c.RES_GPU_MEM
_str = string_literal


def _gpu_key(var: str) -> str:
    return prefix_key(var, (c.GPU_RESOURCE_PREFIX,))


def _unknown_name(var: str) -> str:
    known = ", ".join(_str(n) for n in c.KNOWN_GPU_RESOURCES)
    return f"({_gpu_key(var)} && !({var} in [{known}]))"


def gpu_entries(entries: str) -> str:
    """The GPU containers of a list of container entries, each with what the rules read, computed
    once per admission request (CEL variables are evaluated at most once):

    ``label``, ``name``, ``l``/``q`` (limits, requests); ``cv``/``mv`` the core and memory values
    (limit, else request; null when absent); ``cw``/``mw`` where they are (``limits``,
    ``requests``); ``cn``/``mn`` their numbers (-2 absent, -1 malformed, else the whole number);
    ``c6``/``m6`` whether the request breaks ``REQUEST_LIMIT``; ``ul``/``uq`` the unknown ``aliyun.com/gpu*``
    names of limits and requests (``UNKNOWN_RESOURCE``)."""
    asks = f"(e.l.exists(r, {_gpu_key('r')}) || e.q.exists(r, {_gpu_key('r')}))"
    first = (
        "{'label': e.label, 'name': e.name, 'l': e.l, 'q': e.q,"
        f" 'ch': dyn({_str(CORE)} in e.l || {_str(CORE)} in e.q),"
        f" 'mh': dyn({_str(MEM)} in e.l || {_str(MEM)} in e.q),"
        f" 'cw': dyn({_str(CORE)} in e.l ? 'limits' : 'requests'),"
        f" 'mw': dyn({_str(MEM)} in e.l ? 'limits' : 'requests'),"
        f" 'ul': dyn(e.l.filter(r, {_unknown_name('r')})), 'uq': dyn(e.q.filter(r, {_unknown_name('r')})),"
        f" 'm6': dyn({mismatch('e', MEM)}), 'c6': dyn({mismatch('e', CORE)}),"
        f" 'cv': dyn({value_of('e', CORE)}), 'mv': dyn({value_of('e', MEM)})}}"
    )
    numbers = (
        "{'label': e.label, 'name': e.name, 'l': e.l, 'q': e.q, 'cw': e.cw, 'mw': e.mw,"
        " 'ul': e.ul, 'uq': e.uq, 'm6': e.m6, 'c6': e.c6, 'cv': e.cv, 'mv': e.mv,"
        f" 'cn': dyn(e.cv == null ? (e.ch ? -1 : -2) : {entry_number('e.cv')}),"
        f" 'mn': dyn(e.mv == null ? (e.mh ? -1 : -2) : {entry_number('e.mv')})}}"
    )
    return f"{entries}.filter(e, {asks}).map(e, {first}).map(e, {numbers})"
