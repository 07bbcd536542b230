"""scripts/hate_judge_sim.py reads the hate remove bar from the policy it replays, so its
`remove` stage moves with policy.yaml instead of a copied number."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import hate_judge_sim as sim

from grebe.flows.policy import read_policy


def test_remove_bar_is_the_lowest_remove_rule_of_the_packaged_policy() -> None:
    policy = read_policy(None)[1]
    rules = policy["safety_ptos"]["policies"]["hate"]
    removes = [float(r["min_score"]) for r in rules if r["action"] == "remove"]
    assert removes and sim.hate_remove_bar(policy) == min(removes)


def test_remove_bar_follows_a_changed_policy() -> None:
    policy = {"safety_ptos": {"policies": {"hate": [
        {"min_score": 0.95, "action": "remove"}, {"min_score": 0.7, "action": "remove"},
        {"min_score": 0.0, "action": "label"}]}}}
    assert sim.hate_remove_bar(policy) == 0.7
