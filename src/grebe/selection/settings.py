"""The `selection:` section of a stream: Grox's generator filters as data.

Every rule is off by default, so a stream without the section selects every post it
reads (what every grebe stream did before). Follower rules read the authors of the
parent and root posts that hydration (or the producer) put in the payload's context.
"""

from __future__ import annotations

import enum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from grebe import constants as C


class Mode(enum.StrEnum):
    """How a stream's posts are processed: Grox derives it from the generator type
    (PTOS picks its model, dedupe and rechecks by it). It travels in TaskPayload.mode."""

    REALTIME = C.DEFAULT_STREAM_MODE
    RECOVERY = "recovery"  # re-processing what the realtime path missed
    BACKFILL = "backfill"  # history, at low priority
    DELUXE = "deluxe"  # the expensive, more thorough pass
    TEST = "test"  # test traffic
    DELAYED = "delayed"  # a delayed replica of the firehose


class PostType(enum.StrEnum):
    ORIGINAL = "original"
    REPLY = "reply"
    QUOTE = "quote"
    REPOST = "repost"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class FollowerRange(_Section):
    """Bounds on a follower count, both inclusive; None: no bound. A bound set on a
    count nobody knows does not select the post (fail closed: Grox's reply filters
    require the parent and root authors too)."""

    min: int | None = Field(default=None, ge=0)
    max: int | None = Field(default=None, ge=0)

    @property
    def active(self) -> bool:
        return self.min is not None or self.max is not None

    def holds(self, count: int) -> bool:
        return (self.min is None or count >= self.min) and (self.max is None or count <= self.max)

    @model_validator(mode="after")
    def _ordered(self) -> FollowerRange:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is above max ({self.max})")
        return self


class Exclusions(_Section):
    self_replies: bool = False  # the replier wrote the parent or the root post
    reply_to_authors: list[str] = Field(default_factory=list)  # e.g. the platform's bots
    authors: list[str] = Field(default_factory=list)  # posts by these accounts
    protected_authors: bool = False  # accounts whose posts only followers see


class Selection(_Section):
    """What a stream selects. A post fails at the first rule it breaks; the reason
    names that rule (`not_selected:<rule>`, grebe.selection.rules)."""

    mode: Mode = Mode.REALTIME
    post_types: list[PostType] = Field(default_factory=lambda: list(PostType), min_length=1)
    languages: list[str] | None = None  # ISO 639-1 codes; None: any (and unknown) language
    # Traction: likes + reposts + replies + quotes, and views; 0: no bound.
    min_engagement: int = Field(default=0, ge=0)
    min_views: int = Field(default=0, ge=0)
    parent_followers: FollowerRange = FollowerRange()  # the parent post's author
    root_followers: FollowerRange = FollowerRange()  # the thread root's author
    # The larger of the two: Grox's reply ranking runs when the parent *or* the root
    # author has more than 60,000 followers (min 60001); its spam filter when both have
    # at most 60,000 (max 60000).
    thread_followers: FollowerRange = FollowerRange()
    exclude: Exclusions = Exclusions()
    requires_media: bool = False
    requires_video: bool = False

    @model_validator(mode="after")
    def _thread_rules_need_replies(self) -> Selection:
        """Thread rules apply to replies only: with replies not selected they would be
        settings that silently do nothing."""
        thread_rules = [name for name in ("parent_followers", "root_followers",
                                          "thread_followers")
                        if getattr(self, name).active]
        if self.exclude.self_replies:
            thread_rules.append("exclude.self_replies")
        if self.exclude.reply_to_authors:
            thread_rules.append("exclude.reply_to_authors")
        if thread_rules and PostType.REPLY not in self.post_types:
            raise ValueError(f"{', '.join(thread_rules)} apply to replies only, and "
                             "post_types does not select replies")
        return self

    @property
    def selects_everything(self) -> bool:
        """No rule is set: the engine need not look at the post."""
        return self.model_dump(exclude={"mode"}) == _EVERYTHING


_EVERYTHING = Selection().model_dump(exclude={"mode"})
