"""Who the viewer is: follows, mutes, what they saw and engaged with, their interests.

grebe does not own a social graph; `ViewerDirectory` is the seam where a real one (a
graph service, a database) plugs in. `MemoryViewerDirectory` serves tests, the CLI and
small deployments, and can be loaded from a JSON or YAML file:

    {"alice": {"following": ["bob"], "muted": [], "engaged": ["p1"], "interests": ["jazz"],
               "safety_level": "strict"}}
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import msgspec
import yaml

from grebe.errors import ConfigError


class Viewer(msgspec.Struct, kw_only=True):
    user_id: str = ""
    following: list[str] = []
    muted: set[str] = set()
    seen: set[str] = set()
    engaged: list[str] = []
    interests: list[str] = []
    safety_level: str | None = None


@runtime_checkable
class ViewerDirectory(Protocol):
    async def get(self, user_id: str) -> Viewer: ...

    async def record_served(self, user_id: str, post_ids: Sequence[str]) -> None: ...


class MemoryViewerDirectory:
    """Viewers in a dict; an unknown viewer is a new user with an empty graph."""

    def __init__(self, viewers: dict[str, Viewer] | None = None, max_seen: int = 10_000) -> None:
        self.viewers = viewers or {}
        self.max_seen = max_seen

    @classmethod
    def from_file(cls, path: Path | str) -> MemoryViewerDirectory:
        try:
            raw = yaml.safe_load(Path(path).read_text()) or {}
            viewers = msgspec.convert(raw, dict[str, Viewer])
        except (OSError, yaml.YAMLError, msgspec.ValidationError) as exc:
            raise ConfigError(f"cannot load viewers from {path}: {exc}") from exc
        for user_id, viewer in viewers.items():
            viewer.user_id = user_id
        return cls(viewers)

    async def get(self, user_id: str) -> Viewer:
        return self.viewers.get(user_id) or Viewer(user_id=user_id)

    async def record_served(self, user_id: str, post_ids: Sequence[str]) -> None:
        viewer = self.viewers.setdefault(user_id, Viewer(user_id=user_id))
        viewer.seen.update(post_ids)
        if len(viewer.seen) > self.max_seen:  # forget arbitrarily; a real store keeps order
            for post_id in list(viewer.seen)[: len(viewer.seen) - self.max_seen]:
                viewer.seen.discard(post_id)
