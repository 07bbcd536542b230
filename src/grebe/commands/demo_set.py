"""The demo's posts, built from real packaged data on the spot (no network):

- 240 e-mails of the SpamAssassin public corpus (half spam, half ham; CC0/PDDL) shipped
  in grebe/data/demo_messages.jsonl, posted as originals, replies and comments;
- scikit-image's bundled photos as image posts (file URLs, allowed by the demo config);
- a short video with real speech: a moonshine-voice reading muxed onto a photo by ffmpeg;
- a handful of written posts exercising the safety categories and relevant replies.

Each post goes to the topic of the seed stream that would carry it (see default.yaml).
"""

from __future__ import annotations

import json
import random
import subprocess
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from grebe.errors import MediaError
from grebe.types import Envelope, Media, Post, User, UserContext

SEED = 7
VIDEO_SECONDS = 12
FFMPEG_TIMEOUT_S = 60.0
SPEECH_WAV = "two_cities.wav"

# Topics of the seed streams in grebe/data/default.yaml.
T_POSTS, T_MIN_TRACTION, T_MEDIA, T_VIDEO = "posts", "posts.min_traction", "posts.media", \
    "posts.video"
T_REPLIES, T_COMMENTS, T_SAFETY = "replies", "comments", "requests.safety"

PHOTOS = {  # skimage/data file -> caption
    "coffee.png": "Best flat white in town at the corner cafe this morning #coffee",
    "chelsea.png": "My cat Chelsea judging me from the windowsill again",
    "astronaut.png": "Eileen Collins, the first woman to pilot the Space Shuttle #space",
    "rocket.jpg": "Launch day! Watching the rocket lift off from the pad",
    "page.png": "Found this scanned page of notes in the archive, can anyone read it?",
    "hubble_deep_field.jpg": "Every dot in this Hubble deep field image is a galaxy",
    "motorcycle_left.png": "New bike in the garage, who wants to ride this weekend?",
    "camera.png": "Classic photographer portrait, shot on film",
}
PHOTO_REPLIES = {
    "coffee.png": "That flat white looks amazing, which cafe is it? I need good coffee",
    "chelsea.png": "Cats on windowsills are the best, mine does the same thing",
    "rocket.jpg": "Great launch photo, was it loud standing that close to the rocket?",
    "hubble_deep_field.jpg": "Mind blowing that each of those dots holds billions of stars",
}
WRITTEN = [  # (author, text): the safety categories, and harmless controls
    ("w1", "You are a worthless idiot and everyone here hates you, shut up"),
    ("w2", "Say that again and I will find you and beat you up"),
    ("w3", "Some days I just want to die, nothing helps anymore"),
    ("w4", "Check out my nudes and xxx videos, link in bio"),
    ("w5", "Lovely sunset at the beach today, the sky went pink and orange"),
    ("w6", "Damn this stupid printer, it jammed again right before the meeting"),
]


@dataclass(frozen=True)
class DemoPost:
    topic: str
    envelope: Envelope
    kind: str  # "ham", "spam", "photo", "video", "written", "reply"

    @property
    def post(self) -> Post:
        return self.envelope.post


def messages() -> list[dict[str, object]]:
    text = (resources.files("grebe") / "data" / "demo_messages.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def skimage_dir() -> Path:
    import skimage

    return Path(skimage.__file__).parent / "data"


def speech_wav() -> Path:
    import moonshine_voice

    return Path(moonshine_voice.__file__).parent / "assets" / SPEECH_WAV


def make_speech_video(photo: Path, wav: Path, out: Path, seconds: int = VIDEO_SECONDS) -> Path:
    """A still photo with a real speech track: what a talking-head post looks like to
    the pipeline (frames to classify, audio to transcribe)."""
    if out.exists():
        return out
    args = ["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-loop", "1", "-i", str(photo),
            "-i", str(wav), "-t", str(seconds), "-vf", "scale=320:-2,format=yuv420p",
            "-r", "5", "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac",
            "-shortest", str(out)]
    try:
        subprocess.run(args, check=True, capture_output=True, timeout=FFMPEG_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        raise MediaError(f"could not make the demo video with ffmpeg: {exc}") from exc
    return out


def _engagement(rng: random.Random) -> dict[str, Any]:
    views = rng.randint(20, 5000)  # engagement rates are skewed: most posts get little
    return {"view_count": views, "like_count": int(views * min(0.2, rng.expovariate(60))),
            "repost_count": int(views * min(0.05, rng.expovariate(400))),
            "reply_count": rng.randint(0, 20)}


def build_demo_set(media_dir: Path, now: float) -> list[DemoPost]:
    rng = random.Random(SEED)
    media_dir.mkdir(parents=True, exist_ok=True)
    out: list[DemoPost] = []

    def add(topic: str, post: Post, kind: str, parent: Post | None = None) -> None:
        context = UserContext(parent=parent) if parent is not None else None
        user = User(id=post.author_id, handle=post.author_id)
        out.append(DemoPost(topic, Envelope(post=post, user=user, context=context), kind))

    photos = []
    for n, (name, caption) in enumerate(PHOTOS.items()):
        url = (skimage_dir() / name).resolve().as_uri()
        post = Post(id=f"photo-{n:02d}", author_id=f"photographer-{n % 3}", text=caption,
                    created_at=now, media=(Media(kind="image", url=url),), **_engagement(rng))
        photos.append(post)
        add(T_MEDIA, post, "photo")
        if name in PHOTO_REPLIES:
            reply = Post(id=f"photo-reply-{n:02d}", author_id=f"fan-{n}",
                         text=PHOTO_REPLIES[name], reply_to_post_id=post.id, created_at=now)
            add(T_REPLIES, reply, "reply", parent=post)

    video = make_speech_video(skimage_dir() / "astronaut.png", speech_wav(),
                              media_dir / "reading.mp4")
    add(T_VIDEO, Post(id="video-00", author_id="reader", created_at=now,
                      text="Reading the opening of A Tale of Two Cities aloud",
                      media=(Media(kind="video", url=video.resolve().as_uri()),)), "video")

    for n, (author, text) in enumerate(WRITTEN):
        add(T_SAFETY, Post(id=f"written-{n:02d}", author_id=author, text=text,
                           created_at=now), "written")

    corpus = messages()
    ham = [m for m in corpus if not m["spam"]]
    spam = [m for m in corpus if m["spam"]]
    originals = []
    for n, msg in enumerate(ham):
        if n < 80:
            post = Post(id=str(msg["id"]), author_id=f"user-{n % 40}", text=str(msg["text"]),
                        created_at=now, **_engagement(rng))
            originals.append(post)
            add(T_POSTS, post, "ham")
            if n % 2 == 0:
                add(T_MIN_TRACTION, post, "ham")
        else:
            parent = rng.choice(originals + photos)
            add(T_REPLIES, Post(id=str(msg["id"]), author_id=f"user-{n % 40}",
                                text=str(msg["text"]), reply_to_post_id=parent.id,
                                created_at=now), "ham", parent=parent)
    for n, msg in enumerate(spam):
        post = Post(id=str(msg["id"]), author_id=f"spammer-{n % 12}", text=str(msg["text"]),
                    created_at=now)
        if n < 80:
            parent = rng.choice(originals + photos)
            post = Post(id=post.id, author_id=post.author_id, text=post.text,
                        reply_to_post_id=parent.id, created_at=now)
            add(T_REPLIES, post, "spam", parent=parent)
        else:
            add(T_COMMENTS, post, "spam")
    # One spammer pasting the same comment under several posts.
    pasted = str(spam[0]["text"])
    for n in range(4):
        parent = photos[n]
        add(T_REPLIES, Post(id=f"pasted-{n}", author_id="spammer-paste", text=pasted,
                            reply_to_post_id=parent.id, created_at=now), "spam", parent=parent)
    return out
