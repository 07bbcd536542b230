"""Reply spam depth: coordinated spam across accounts, the spam plan's reply filter,
reply ranking's follower gate and the high-visibility risky-reply signal."""

from __future__ import annotations

from typing import Any

import msgspec

from grebe.core.planmaster import PlanMaster
from grebe.flows import registry
from grebe.flows.coordination import CoordinationIndex, fingerprint
from grebe.flows.services import FlowServices
from grebe.types import TaskStatus, User, UserContext

from .conftest import fake_services, payload

SPAM = frozenset({"spam_comment"})
RANKING = frozenset({"reply_ranking"})
NO_DEDUPE = {"defaults": {"dedupe_ttl_s": 0}}
PROMO = "Huge sale on designer watches today only, use code SAVE{n} at https://shop{n}.example/x"


async def run_one(services: FlowServices, eligibilities: frozenset[str], text: str,
                  context: UserContext | None = None, **kwargs: Any) -> Any:
    """One payload; `context` (extra, author) is merged with the parent conftest builds."""
    built = payload(text, eligibilities=eligibilities, **kwargs)
    if context is not None:
        built = msgspec.structs.replace(built, context=msgspec.structs.replace(
            context, parent=built.context.parent))
    [result] = await PlanMaster(registry.PLANS, services=services).run_plans(built)
    return result


async def test_the_same_promo_from_20_accounts_is_coordinated_spam() -> None:
    services = fake_services(NO_DEDUPE)
    outputs = []
    for n in range(20):  # each account once, each with its own link and promo code
        result = await run_one(services, SPAM, PROMO.format(n=n), post_id=f"c{n}",
                               author=f"acct{n}", lang="en")
        assert result.status == TaskStatus.SUCCESS, result.error
        outputs.append(result.output)
    flagged = ["coordinated_spam" in out.labels for out in outputs]
    assert flagged == [False] * 4 + [True] * 16  # from the 5th account on (min_accounts 5)
    last = outputs[-1]
    assert "spam" in last.labels and last.scores["coordinated_spam"] == 20.0
    assert "near-identical text from 20 accounts" in last.reasons["coordinated_spam"]


async def test_a_lone_post_and_one_account_repeating_are_not_coordinated() -> None:
    services = fake_services(NO_DEDUPE)
    lone = await run_one(services, SPAM, PROMO.format(n=1), post_id="lone", author="solo",
                         lang="en")
    assert "coordinated_spam" not in lone.output.labels
    for n in range(20):
        same = await run_one(services, SPAM, PROMO.format(n=n), post_id=f"r{n}",
                             author="repeater", lang="en")
        assert "coordinated_spam" not in same.output.labels
    other = await run_one(services, SPAM, "a completely different post about my garden roses",
                          post_id="g", author="gardener", lang="en")
    assert "coordinated_spam" not in other.output.labels


def test_coordination_window_and_short_texts() -> None:
    now = [0.0]
    index = CoordinationIndex(max_entries=100, window_s=60, max_distance=3, clock=lambda: now[0])
    for n in range(4):
        index.observe(f"p{n}", f"a{n}", PROMO.format(n=n))
    assert index.observe("p4", "a4", PROMO.format(n=4)).accounts == 5
    now[0] = 61.0  # the campaign's earlier posts left the window
    assert index.observe("p5", "a5", PROMO.format(n=5)).accounts == 1
    assert fingerprint("thanks!") is None  # too short to tell a campaign from chance
    assert index.observe("s1", "x", "lol ok").accounts == 1


def test_short_replies_said_by_many_by_chance_are_not_a_campaign() -> None:
    index = CoordinationIndex(max_entries=100, window_s=3600, max_distance=3)
    for n, text in enumerate(["@a Yes she is!", "@b @c yes she is!!!!!", "@d Yes...she is",
                              "Yes she is", "@e yes she is", "@f YES SHE IS"]):
        assert index.observe(f"y{n}", f"acct{n}", text).accounts == 1
    assert fingerprint("Happy Birthday Captain!") is None
    # a short text that carries a link is a campaign's payload, and still counts
    for n in range(5):
        found = index.observe(f"l{n}", f"acct{n}", f"win big here https://x{n}.example/{n}")
    assert found.accounts == 5
    # and so does a long copy without a link
    assert fingerprint("please everyone share this message with all of your friends today")


async def test_spam_reply_filter() -> None:
    services = fake_services({**NO_DEDUPE, "spam_comment": {
        "reply_filter": {"bot_account_ids": ["the-bot"]}}})

    async def reply(author: str = "r1", **extra: Any) -> Any:
        kwargs = {"context": UserContext(extra=extra)} if extra else {}
        return await run_one(services, SPAM, "buy cheap pills now", author=author,
                             parent="the parent post", **kwargs)

    judged = await reply()  # unknown follower counts: judged, not dropped
    assert judged.status == TaskStatus.SUCCESS
    self_reply = await reply(author="a0")  # the conftest parent's author
    assert self_reply.status == TaskStatus.SKIPPED
    assert "self-reply" in self_reply.skip_reasons["reply_filter"]
    big = await reply(parent_author_followers=250_000)
    assert "parent author has 250000 followers > 60000" in big.skip_reasons["reply_filter"]
    root_big = await reply(root_author_id="root", root_author_followers=70_000,
                           parent_author_followers=10)
    assert "root author has 70000" in root_big.skip_reasons["reply_filter"]
    to_bot = await reply(root_author_id="the-bot")
    assert "bot account" in to_bot.skip_reasons["reply_filter"]


async def test_reply_ranking_follower_gate_and_risky_reply() -> None:
    services = fake_services({**NO_DEDUPE, "reply_ranking": {"min_thread_followers": 60_000}})

    async def rank(text: str, *, author_user: User | None = None, **extra: Any) -> Any:
        parent = "What is the best coffee in town?"
        return await run_one(services, RANKING, text, parent=parent,
                             context=UserContext(extra=extra, author=author_user))

    unknown = await rank("try the corner cafe")
    assert "no follower counts" in unknown.skip_reasons["parent"]
    small = await rank("try the corner cafe", parent_author_followers=500)
    assert "at most 500 < 60000" in small.skip_reasons["parent"]
    big = await rank("you stupid idiot", parent_author_followers=1_000_000)
    assert big.status == TaskStatus.SUCCESS, big.error
    assert "reply_score:0" in big.output.labels
    assert "risky_high_viz_reply" in big.output.labels
    verified = await rank("you stupid idiot", parent_author_followers=1_000_000,
                          author_user=User(id="a1", verified=True))
    assert "reply_score:0" in verified.output.labels
    assert "risky_high_viz_reply" not in verified.output.labels


async def test_reply_ranking_reads_the_thread_not_only_the_parent() -> None:
    root = "What is the best coffee in Lisbon right now?"
    reply = "The best coffee in Lisbon right now is at the corner cafe"
    services = fake_services(NO_DEDUPE)
    alone = await run_one(services, RANKING, reply, parent="I went there last summer.",
                          post_id="t1")
    threaded = await run_one(services, RANKING, reply, parent="I went there last summer.",
                             post_id="t2", context=UserContext(extra={"ancestor_texts": [root]}))
    assert threaded.output.scores["relevance"] > alone.output.scores["relevance"]
    assert threaded.output.scores["reply_score"] > alone.output.scores["reply_score"]


async def test_llm_reply_ranking_prompt_shows_the_thread() -> None:
    from grebe.inference.fakes import ScriptedChatModel

    chat = ScriptedChatModel(['{"score": 2, "reason": "answers the root question"}'])
    services = fake_services({**NO_DEDUPE, "classifier": "llm"}, chat=chat)
    result = await run_one(services, RANKING, "the corner cafe", parent="I went there.",
                           context=UserContext(extra={"ancestor_texts": ["Best coffee?"]}))
    assert result.output.labels == ["reply_score:2"]
    prompt = chat.requests[0][1]["content"]
    assert prompt.index("Best coffee?") < prompt.index("I went there.")
    assert "#### Post 2 (the post replied to)" in prompt


def test_coordination_index_is_bounded_and_tolerates_small_edits() -> None:
    index = CoordinationIndex(max_entries=3, window_s=3600, max_distance=3)
    seen = [index.observe(f"p{n}", f"a{n}", PROMO.format(n=n)).accounts for n in range(6)]
    assert seen == [1, 2, 3, 4, 4, 4]  # the newest three texts only, plus the post itself
    a, b = fingerprint(PROMO.format(n=1)), fingerprint(PROMO.format(n=987))
    assert a is not None and a == b  # links and promo codes normalised away
    other = fingerprint("my garden roses are finally blooming after the long winter")
    assert other is not None and bin(a ^ other).count("1") > 3
