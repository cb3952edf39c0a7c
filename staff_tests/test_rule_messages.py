"""The rule's verdict is typed: whether a problem is held for the staff's review is a field of its message, never a
reading of its text (issue 41), so no wording, the student's or ours, can make a breach a hold or a hold a breach."""

from __future__ import annotations

import copy
import pickle

from cs_basics.harness.rule.constructs import Construct
from cs_basics.harness.rule.fromscratch import (
    HELD,
    RuleMessage,
    cut_off_hold,
    hold_message,
    is_held,
    library_hold,
    runtime_breach,
    static_breach,
)
from cs_basics.harness.rule.sightings import Computed, Record
from cs_basics.harness.rule.syntax import Use


def test_holds_are_held_and_breaches_are_not():
    construct = Construct("gc.get_objects", "the garbage collector", "cs_basics/nn/functional.py", 3)
    assert is_held(hold_message("softmax", [construct]))
    assert is_held(library_hold("softmax", "softmax-dim_0", [Computed("torch.distributions.Categorical", "f.py:3")]))
    assert is_held(cut_off_hold("softmax", "softmax-dim_0", ["the channel was closed"]))
    assert not is_held(static_breach("softmax", [Use("torch.softmax", "cs_basics/nn/functional.py", 3)]))
    forged = Record(sightings=[], tampering=[f"wrote a line that says it is {HELD}"])
    breach = runtime_breach("softmax", "softmax-dim_0", forged)
    assert HELD in breach and not is_held(breach)  # the text says held; the verdict is a breach


def test_plain_text_is_never_a_hold():
    assert not is_held(f"0 points for softmax for now, {HELD}")
    assert not is_held(None)
    assert is_held(RuleMessage("any words", held=True)) and isinstance(RuleMessage("x", held=True), str)


def test_the_verdict_survives_pickle_and_copy():
    for held in (True, False):
        message = RuleMessage("0 points for softmax", held=held)
        for again in (pickle.loads(pickle.dumps(message)), copy.deepcopy(message), copy.copy(message)):
            assert again == message and is_held(again) is held
