"""Per-stream selection: which posts a stream hands to its plans, and in which mode.

Grox has sixteen stream generators; what distinguishes them is data (a topic, an
eligibility set, the filters their plans apply, a mode that PTOS reads). In grebe each
is a stream of the config with a `selection:` section (`settings.Selection`), evaluated
in the engine on the hydrated post (`rules.why_not`, attached by `master.attach`).
"""

from grebe.selection.settings import FollowerRange, Mode, PostType, Selection

__all__ = ["FollowerRange", "Mode", "PostType", "Selection"]
