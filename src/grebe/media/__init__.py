"""grebe.media: untrusted media in, facts out.

`fetch` (SSRF-safe download), `image` and `video` (guarded decoding, frame sampling,
audio extraction), `asr` (Whisper in worker processes), `dedup` (perceptual-hash
index), `pipeline` (the staged download -> decode -> classify -> dedup pipeline and
`hydrate(post)`), `scan` (the batch command). Settings: `config.MediaConfig`, read from
the `media:` section of the grebe config.
"""
