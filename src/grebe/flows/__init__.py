"""The product: one module per flow, each declaring its tasks and its plan.

Read in this order: `shared` (filters, rate limit, media hydration, memoised model calls,
the sink), then a flow (`spam`, `safety`, `ptos`, `banger`, `replies`, `embeddings`,
`multimodal`), then `registry` (all plans and the bundle the engine runs). `settings`
holds every threshold, `llm` the chat-model path, `basic` the runtime's built-in plans,
`analyze` the Analyzer behind /v1/analyze and `grebe analyze` (tooling is in grebe.commands).
"""
