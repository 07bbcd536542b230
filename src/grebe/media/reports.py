"""What the media pipeline learnt about a post's media: one report per item and the
merged view plans consume (grebe.media.pipeline fills them; it re-exports these)."""

from __future__ import annotations

import msgspec

from grebe.media.asr import ASRErrorCode

KIND_IMAGE, KIND_VIDEO, KIND_AUDIO = "image", "video", "audio"
WARN_NSFW, WARN_OCR = "nsfw", "ocr"  # prefixes of model-failure warnings
NO_NSFW_MODEL = "no NSFW model configured"

__all__ = ["KIND_AUDIO", "KIND_IMAGE", "KIND_VIDEO", "NO_NSFW_MODEL", "WARN_NSFW", "WARN_OCR",
           "DuplicateRef", "ItemReport", "MediaReport"]


class DuplicateRef(msgspec.Struct, frozen=True, kw_only=True):
    post_id: str
    url: str
    distance: int  # Hamming bits between the closest pair of hashes


class ItemReport(msgspec.Struct, kw_only=True):
    """Everything learnt about one media item of one post."""

    post_id: str
    url: str
    kind: str | None = None  # sniffed: image | video | audio
    content_type: str | None = None
    size: int = 0
    width: int = 0
    height: int = 0
    duration_s: float | None = None
    frames: int = 0
    nsfw: list[float] = []  # per image or sampled frame
    ocr_text: str = ""
    transcript: str = ""
    transcript_language: str | None = None
    transcript_error: str | None = None  # an ASRErrorCode value
    transcript_detail: str | None = None  # why, when transcript_error is set
    transcript_capped: bool = False  # only the first `video.max_audio_s` was transcribed
    duplicates: list[DuplicateRef] = []
    error: str | None = None  # fatal: the item could not be processed
    warnings: list[str] = []  # a model failed; the rest of the report stands
    elapsed_s: float = 0.0

    @property
    def unchecked(self) -> str | None:
        """Why this item's content was not (fully) looked at, or None if it was.

        Fail closed: an item that could not be fetched or decoded, a picture or video
        the NSFW model did not score, or speech that could not be transcribed was not
        checked, and a verdict must not read as if it had been."""
        if self.error is not None:
            return self.error
        if self.kind in (KIND_IMAGE, KIND_VIDEO) and not self.nsfw:
            why = next((w for w in self.warnings if w.startswith(WARN_NSFW)), NO_NSFW_MODEL)
            return f"not scored for nudity ({why})"
        if self.transcript_error not in (None, ASRErrorCode.NO_AUDIO_STREAM.value):
            why = f": {self.transcript_detail}" if self.transcript_detail else ""
            return f"speech not transcribed ({self.transcript_error}{why})"
        return None


class MediaReport(msgspec.Struct, kw_only=True):
    """A post's media, item by item, plus the merged view plans consume (the same
    fields as flows' MediaFacts, so adapting is one constructor call)."""

    post_id: str
    items: list[ItemReport] = []
    nsfw_model: str = ""
    over_cap: int = 0  # items beyond `pipeline.max_items_per_post`, never fetched
    max_items: int = 0  # that cap, for the reason

    @property
    def nsfw(self) -> tuple[float, ...]:
        return tuple(s for item in self.items for s in item.nsfw)

    @property
    def ocr_text(self) -> str:
        return "\n".join(i.ocr_text for i in self.items if i.ocr_text)

    @property
    def transcript(self) -> str:
        return "\n".join(i.transcript for i in self.items if i.transcript)

    @property
    def transcript_language(self) -> str | None:
        return next((i.transcript_language for i in self.items if i.transcript_language), None)

    @property
    def errors(self) -> tuple[str, ...]:
        return tuple(f"{i.url}: {e}" for i in self.items for e in [i.error, *i.warnings] if e)

    @property
    def unchecked(self) -> tuple[str, ...]:
        """One line per item that was not checked, saying which and why; items over the
        per-post cap are summed up in one line (a post may name thousands)."""
        lines = [f"{i.url}: {why}" for i in self.items if (why := i.unchecked) is not None]
        if self.over_cap:
            lines.append(f"{self.over_cap} more media item(s) not fetched: over the cap of "
                         f"{self.max_items} per post")
        return tuple(lines)
