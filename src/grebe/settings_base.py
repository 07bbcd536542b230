"""The base of every configuration section model, and how their errors read.

It sits low in the import graph (pydantic and nothing of grebe's) so each package keeps
its own section model beside its code (`inference/settings.py`, `media/config.py`,
`thunder/settings.py`, `feed/settings.py`) and `config.py` assembles them into one
`GrebeConfig` without an import cycle: a package never imports `config.py` to get its
base class.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError


class Section(BaseModel):
    """A config section: an unknown key is an error, never silently ignored (a typo
    such as `embeder:` would otherwise leave the default in force)."""

    model_config = ConfigDict(extra="forbid")


#: pydantic's prefix for a message raised by a validator; the field name before it says
#: enough, so it is dropped ("inference.chat: backend openai needs base_url and model").
_VALUE_ERROR = "Value error, "


def validation_problems(exc: ValidationError, prefix: str = "") -> str:
    """Every invalid field of a pydantic error as "section.field: why", joined with "; ",
    so each config section reports bad input the same way."""
    return "; ".join(
        f"{prefix + '.'.join(str(p) for p in err['loc']) or '<root>'}: "
        f"{err['msg'].removeprefix(_VALUE_ERROR)}"
        for err in exc.errors()
    )
