"""The social graph thunder asks when a request names no followed accounts.

The specification's service looks the viewer's follows up itself when the caller sends
an empty `following_user_ids`, so a thin client need not carry a 1,000-id list. grebe
owns no graph: `SocialGraph` is the seam, and `ViewerFileGraph` reads the same viewers
file as `grebe feed --viewers` (a real deployment plugs a graph service in here).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from grebe.feed.viewers import MemoryViewerDirectory


class SocialGraph(Protocol):
    async def following(self, user_id: str) -> Sequence[str]: ...


class ViewerFileGraph:
    """Follows from a viewers file (ConfigError when it cannot be read)."""

    def __init__(self, path: Path | str) -> None:
        self.directory = MemoryViewerDirectory.from_file(path)

    async def following(self, user_id: str) -> Sequence[str]:
        return (await self.directory.get(user_id)).following
