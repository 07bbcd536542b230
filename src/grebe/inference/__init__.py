"""Model backends behind small protocols.

- `base`: the protocols (Embedder, TextClassifier, ImageClassifier, Transcriber, OCR,
  ChatModel, Service) and the Transcript/Segment types; `fakes`: their test doubles.
- `batcher`: MicroBatcher, gathering concurrent single requests into batched calls.
- local models: `minilm` (text embeddings), `text` (language id, offensive, hate),
  `nsfw`, `ocr` (tesseract), `whisper` (speech), `spam_head` (+ `spam_corpus`).
- remote models: `openai_compat` (embeddings, structured chat, fallback chain) with
  `breaker` (circuit breaker) and `schema` (structured-output validation).
- `factory`: builds all of them from the `inference` config section.
"""
