"""The LLM path of the classifiers: prompt templates kept as files, answers validated
against msgspec schemas by the ChatModel (one repair attempt included there). Each flow
declares its own answer schemas (in its module, `Unit` here for scores).

A template is markdown with a `## system` and a `## user` section and `$name`
placeholders (string.Template, so JSON braces need no escaping). The packaged templates
are in grebe/flows/prompts/; a flow module may carry its own (`Flow(prompts={name:
template})`, so a new LLM flow is still one module); `plans.prompts_dir` points at a
directory that overrides any of them by file name.
"""

from __future__ import annotations

import importlib.resources
import re
from pathlib import Path
from string import Template
from typing import Annotated, Any

import msgspec

from grebe.core.task import TaskContext
from grebe.errors import ConfigError, InferenceError
from grebe.flows import catalog
from grebe.inference.base import ChatMessage

Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]

_SECTION = re.compile(r"^## (system|user)\s*$", re.MULTILINE)


class PromptBook:
    """Loads and renders the prompt templates (read once, cached)."""

    def __init__(self, override_dir: Path | None = None) -> None:
        self._override = override_dir
        self._cache: dict[str, tuple[Template, Template]] = {}

    def _load(self, name: str) -> tuple[Template, Template]:
        cached = self._cache.get(name)
        if cached is not None:
            return cached
        filename = f"{name}.md"
        if self._override is not None and (self._override / filename).is_file():
            text = (self._override / filename).read_text()
        else:
            resource = importlib.resources.files("grebe.flows") / "prompts" / filename
            declared = None if resource.is_file() else catalog.prompt_template(name)
            if declared is None and not resource.is_file():
                raise ConfigError(f"no prompt template named {name!r}")
            text = declared if declared is not None else resource.read_text()
        parts = _SECTION.split(text)
        # ['', 'system', body, 'user', body]
        sections = dict(zip(parts[1::2], parts[2::2], strict=True))
        if set(sections) != {"system", "user"}:
            raise ConfigError(f"prompt {name!r} needs a '## system' and a '## user' section")
        pair = (Template(sections["system"].strip()), Template(sections["user"].strip()))
        self._cache[name] = pair
        return pair

    def render(self, name: str, **values: Any) -> list[ChatMessage]:
        system, user = self._load(name)
        try:
            return [
                {"role": "system", "content": system.substitute(values)},
                {"role": "user", "content": user.substitute(values)},
            ]
        except KeyError as exc:
            missing = exc.args[0]
            raise ConfigError(f"prompt {name!r} uses ${missing}, which is not given") from exc


async def ask(ctx: TaskContext, prompt: str, schema: Any, **values: Any) -> Any:
    """Render `prompt`, ask the configured chat model, return the validated answer."""
    services = ctx.services
    if services.models.chat is None:
        raise InferenceError(
            f"plan {ctx.plan!r} is configured for the llm classifier but no chat model is "
            "configured (inference.chat)"
        )
    ctx.output.model_versions["chat"] = services.models.chat.name
    messages = services.prompts.render(prompt, **values)
    return await services.models.chat.complete_json(messages, schema)
