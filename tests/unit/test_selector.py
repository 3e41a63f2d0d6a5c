"""gpushare.api.selector: the one definition of label-selector semantics."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpushare.api.selector import Requirement, candidate, implies, matches, render, term_possible
from gpushare.api.v1alpha1 import LabelSelector

VALUES = st.sampled_from(["a", "b", "1", "7"])
REQS = st.builds(
    Requirement,
    key=st.sampled_from(["k", "j"]),
    operator=st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]),
    values=st.lists(VALUES, max_size=2).map(tuple),
)
LABELS = st.dictionaries(st.sampled_from(["k", "j", "x"]), VALUES, max_size=3)


@pytest.mark.parametrize(
    ("req", "labels", "expected"),
    [
        pytest.param(Requirement("k", "In", ("a", "b")), {"k": "b"}, True, id="in"),
        pytest.param(Requirement("k", "In", ("a",)), {}, False, id="in-absent"),
        pytest.param(Requirement("k", "NotIn", ("a",)), {}, True, id="notin-absent"),
        pytest.param(Requirement("k", "NotIn", ("a",)), {"k": "a"}, False, id="notin"),
        pytest.param(Requirement("k", "Exists"), {"k": ""}, True, id="exists"),
        pytest.param(Requirement("k", "DoesNotExist"), {"k": ""}, False, id="does-not-exist"),
        pytest.param(Requirement("k", "Gt", ("5",)), {"k": "7"}, True, id="gt"),
        pytest.param(Requirement("k", "Lt", ("5",)), {"k": "7"}, False, id="lt"),
        pytest.param(Requirement("k", "Gt", ("5",)), {"k": "x"}, False, id="gt-not-a-number"),
        pytest.param(Requirement("k", "Gt", ("1",)), {"k": "\u00b2"}, False, id="gt-unicode-digit"),
        pytest.param(Requirement("k", "Lt", ("-5",)), {"k": "-7"}, True, id="lt-negative"),
        pytest.param(Requirement("k", "Lt", ("5",)), {"k": "--7"}, False, id="lt-two-minus"),
        pytest.param(Requirement("k", "Near", ("5",)), {"k": "5"}, False, id="unknown-operator"),
    ],
)
def test_operators(req: Requirement, labels: dict[str, str], expected: bool) -> None:
    assert req.matches(labels) is expected


@given(term=st.lists(REQS, max_size=3).map(tuple), labels=LABELS)
def test_exact_match_is_the_possible_match_of_exact_labels(
    term: tuple[Requirement, ...], labels: dict[str, str]
) -> None:
    exact = {k: frozenset((v,)) for k, v in labels.items()}
    assert matches(term, labels) == term_possible(term, exact, exact=True)


@given(term=st.lists(REQS, max_size=3).map(tuple), selector=st.lists(REQS, max_size=3), labels=LABELS)
def test_analysis_is_sound(
    term: tuple[Requirement, ...], selector: list[Requirement], labels: dict[str, str]
) -> None:
    """Labels that match a term fit its candidate, and match every selector the term implies."""
    if matches(term, labels):
        assert term_possible(term, candidate(term))
        if implies(term, selector):
            assert matches(selector, labels)


def test_label_selector_renders_and_matches_through_the_model() -> None:
    selector = LabelSelector.model_validate(
        {
            "matchLabels": {"b": "1", "a": "2"},
            "matchExpressions": [
                {"key": "x", "operator": "In", "values": ["1", "2"]},
                {"key": "y", "operator": "DoesNotExist"},
                {"key": "z", "operator": "NotIn", "values": ["0"]},
                {"key": "w", "operator": "Exists"},
            ],
        }
    )
    assert selector.to_query() == "a=2,b=1,x in (1,2),!y,z notin (0),w"
    assert render(selector.requirements()) == selector.to_query()
    assert selector.matches({"a": "2", "b": "1", "x": "2", "w": ""})
    assert not selector.matches({"a": "2", "b": "1", "x": "2"})
    assert not selector.matches({"a": "2", "b": "1", "x": "2", "w": "", "y": "1"})


def test_copy_with_new_fields_does_not_reuse_old_requirements() -> None:
    selector = LabelSelector(match_labels={"a": "1"})
    assert selector.matches({"a": "1"})
    changed = selector.model_copy(update={"match_labels": {"a": "2"}})
    assert not changed.matches({"a": "1"})
    assert changed.to_query() == "a=2"
    assert changed != selector and selector == LabelSelector(match_labels={"a": "1"})
