"""The product: one module per flow, each declaring its tasks, its plan and its `FLOW`.

Read in this order: `shared` (filters, rate limit, media hydration, memoised model calls)
and `sinks` (the one sink), then a flow (`spam`, `safety`, `ptos`, `banger`, `replies`,
`embeddings`, `multimodal`), then `catalog` (collects every module's `FLOW`) and
`registry` (the bundle the engine runs). `settings` holds every threshold and `section`
the typed `plans:` config section, `models` the models container, `text_signals` and
`author_memory` the cheap text signals, `llm` the chat-model path, `basic` the runtime's
built-in plans, `analyze` the Analyzer behind /v1/analyze and `grebe analyze` (tooling
is in grebe.commands).
"""
