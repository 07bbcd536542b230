"""Label sets as small integer codes, so the safety filter is one array lookup.

The safety filter asked, for each of ~1,500 candidates, whether its labels list meets
the viewer's blocked labels: a Python call on a list object per candidate, each list
somewhere else in memory (0.6 ms of a home request on the loaded box). Posts carry
few distinct label sets, so the feature table gives each post the code of its set
(`LabelSets.code`), and the filter answers per distinct set once (`blocked`) and per
candidate by indexing that answer with the codes column.

Codes are never reused (a set keeps its code for the life of the process), so a code
read in one request means the same labels in every later one. At most `limit`
distinct sets get a code; a post with another set gets NO_CODE and the filter reads
its labels as before.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

#: The code of a label set beyond the limit: read the labels themselves.
NO_CODE = -1
#: Distinct label sets given codes (more than a deployment's labels will combine to).
LABEL_SETS_LIMIT = 65_536


class LabelSets:
    """Distinct label sets by code, in the order first seen."""

    def __init__(self, limit: int = LABEL_SETS_LIMIT) -> None:
        self.limit = limit
        self._codes: dict[frozenset[str], int] = {}
        self._sets: list[frozenset[str]] = []
        #: blocked labels -> whether each code's set meets them (extended as sets come)
        self._blocked: dict[frozenset[str], np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._sets)

    def code(self, labels: Iterable[str]) -> int:
        key = frozenset(labels)
        found = self._codes.get(key)
        if found is not None:
            return found
        if len(self._sets) >= self.limit:
            return NO_CODE
        self._codes[key] = code = len(self._sets)
        self._sets.append(key)
        return code

    def labels(self, code: int) -> frozenset[str]:
        return self._sets[code]

    def blocked(self, blocked: frozenset[str]) -> np.ndarray:
        """Whether each code's set holds one of `blocked`, indexed by code."""
        known = self._blocked.get(blocked)
        if known is None or len(known) < len(self._sets):
            known = np.fromiter((not blocked.isdisjoint(s) for s in self._sets),
                                dtype=bool, count=len(self._sets))
            self._blocked[blocked] = known
        return known
