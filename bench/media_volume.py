"""Media at volume: N short real videos through `grebe media scan` and through the flows.

    .venv/bin/python bench/media_volume.py [--videos 1000] [--max-seconds 900]
                                          [--flow-videos N] [--no-flows]

The videos are made here with ffmpeg from packaged data: scikit-image photos (a slow pan
across each, so frames differ) and moonshine-voice's real speech recording, in varied
lengths (1-20 s) and sizes (160p-720p), every other one with the speech track. They live
in a temporary directory removed at the end, and are read as files (`fetch.allow_files`
under that directory only), so the numbers are the pipeline's, not a web server's.

In one run it prints:

- (a) the batch scan (`grebe.media.scan.scan`, what `grebe media scan DIR` runs, with its
  default models: NSFW classifier, OCR, Whisper tiny.en): videos/s and sampled frames/s;
  per stage (download = fetch, decode, classify, transcribe, dedup) items, mean and max
  latency, peak queue depth; peak RSS of the bench process and of its children (decoding
  children, ASR workers);
- the same frames decoded by PyAV directly in this process (`grebe.media.video.
  sample_frames`, no child, no PNG, no model): frames/s, and the pipeline's ratio to it;
- (b) the flows: posts each carrying one of the videos through post_safety and mm_emb_v5
  (`grebe ingest` into the local broker, `grebe run --exit-when-done`, engine processes,
  SQLite store): videos/s, peak RSS per process (dispatcher, engines, their children);
- intermediate files: the pipeline's per-item directories (`grebe-media-*` under the
  bench's TMPDIR) at their peak while running, and left at the end (must be 0).

Each phase stops at `--max-seconds` (what finished by then is reported, and says so).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from grebe.commands.demo_set import PHOTOS, skimage_dir, speech_wav
from grebe.media.config import MediaConfig
from grebe.media.pipeline import ItemReport
from grebe.media.scan import scan
from grebe.media.video import sample_frames

GREBE = str(Path(sys.executable).parent / "grebe")
FLOWS = ["post_safety", "mm_emb_v5"]
HEIGHTS = (160, 240, 360, 480, 720)
FPS = 10
WORK_PREFIX = "grebe-media-"  # the pipeline's per-item directories (pipeline._download)
TICK = os.sysconf("SC_CLK_TCK")


# --- the videos ---

@dataclass(frozen=True)
class Clip:
    path: Path
    seconds: int
    height: int
    audio: bool


def clip_plan(n: int, directory: Path) -> list[Clip]:
    """Deterministic variety: lengths 1..20 s, five sizes, audio on every other clip."""
    return [Clip(directory / f"clip-{i:05d}.mp4", 1 + (i * 7) % 20, HEIGHTS[i % len(HEIGHTS)],
                 i % 2 == 0) for i in range(n)]


def make_clip(clip: Clip, photo: Path, wav: Path, salt: int) -> None:
    # A pan across three quarters of the photo: the frames of one clip differ, and the
    # offset differs per clip, so near-duplicate search has real work and real matches.
    offset = (salt * 0.137) % 1
    pan = (f"crop=iw*3/4:ih*3/4:(iw/4)*t/{clip.seconds}:(ih/4)*{offset:.3f},"
           f"scale=-2:{clip.height},format=yuv420p")
    args = ["ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-loop", "1",
            "-framerate", str(FPS), "-i", str(photo)]
    if clip.audio:
        args += ["-stream_loop", "-1", "-i", str(wav)]
    args += ["-t", str(clip.seconds), "-vf", pan, "-r", str(FPS), "-c:v", "libx264",
             "-preset", "ultrafast", "-threads", "1"]
    args += ["-c:a", "aac", "-shortest"] if clip.audio else ["-an"]
    subprocess.run([*args, str(clip.path)], check=True, capture_output=True, timeout=120)


def make_clips(n: int, directory: Path) -> tuple[list[Clip], float]:
    photos = [skimage_dir() / name for name in PHOTOS]
    wav = speech_wav()
    clips = clip_plan(n, directory)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        list(pool.map(lambda ic: make_clip(ic[1], photos[ic[0] % len(photos)], wav, ic[0]),
                      enumerate(clips)))
    return clips, time.monotonic() - started


# --- watching processes and the pipeline's temporary directories ---

@dataclass
class Watch:
    """Samples, every 0.1 s: peak RSS of a process tree by role, and how many per-item
    directories the pipeline holds under `work` (cleaned as it goes: bounded, then 0)."""

    root_pid: int
    work: Path
    root_role: str
    names: dict[int, str] = field(default_factory=dict)
    peak_kb: dict[int, int] = field(default_factory=dict)
    cpu_s: dict[int, float] = field(default_factory=dict)
    peak_dirs: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _children(self, pid: int) -> list[int]:
        out: list[int] = []
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                out += [int(p) for p in (task / "children").read_text().split()]
            except OSError:
                continue
        return out

    def _sample(self, pid: int, role: str) -> None:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            return
        self.cpu_s[pid] = (int(fields[11]) + int(fields[12])) / TICK
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                self.peak_kb[pid] = max(self.peak_kb.get(pid, 0), int(line.split()[1]))
        self.names.setdefault(pid, role)

    def _walk(self, pid: int, role: str) -> None:
        self._sample(pid, role)
        for child in self._children(pid):
            try:
                cmd = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            self._walk(child, _role(cmd.decode("utf-8", "replace"), role))

    def _run(self) -> None:
        while not self._stop.is_set():
            self._walk(self.root_pid, self.root_role)
            self.peak_dirs = max(self.peak_dirs, count_workdirs(self.work))
            self._stop.wait(0.1)

    def stop(self) -> dict[str, float]:
        """Peak RSS in MB by role (the largest process of each role)."""
        self._stop.set()
        self._thread.join()
        by_role: dict[str, float] = {}
        for pid, kb in self.peak_kb.items():
            role = self.names[pid]
            by_role[role] = max(by_role.get(role, 0.0), kb / 1024)
        return by_role


def _role(cmdline: str, parent: str) -> str:
    """`parent/what`: what = decode (the sandboxed decoding child), process (a spawned
    Python process: an engine under the dispatcher, an ASR worker), or the program."""
    argv = cmdline.split()
    if "grebe.media.video_sandbox" in argv:
        what = "decode"
    elif "multiprocessing" in cmdline or (argv and "python" in Path(argv[0]).name):
        what = "process"
    else:
        what = Path(argv[0]).name if argv else "?"
    return f"{parent}/{what}"


def count_workdirs(work: Path) -> int:
    try:
        return sum(1 for p in work.iterdir() if p.name.startswith(WORK_PREFIX))
    except OSError:
        return 0


# --- (a) the scan, and the raw decode beside it ---

def run_scan(clips: list[Clip], clip_dir: Path, work: Path, max_s: float) -> dict:
    tempfile.tempdir = str(work)  # the pipeline's per-item directories go under `work`
    config = MediaConfig()
    done: list[ItemReport] = []
    watch = Watch(os.getpid(), work, "bench")
    started = time.monotonic()

    async def go() -> dict:
        try:
            result = await asyncio.wait_for(
                scan([str(clip_dir)], config, on_done=done.append), timeout=max_s)
            return {"stages": result.stages, "models": result.models, "timed_out": False,
                    "groups": len(result.groups)}
        except TimeoutError:
            return {"stages": {}, "models": {}, "timed_out": True, "groups": 0}

    outcome = asyncio.run(go())
    wall = time.monotonic() - started
    rss = watch.stop()
    tempfile.tempdir = None
    frames = sum(r.frames for r in done)
    errors = [f"{Path(r.url).name}: {r.error}" for r in done if r.error]
    return {
        **outcome, "videos": len(done), "of": len(clips), "wall_s": wall,
        "videos_per_s": len(done) / wall, "frames": frames, "frames_per_s": frames / wall,
        "transcribed": sum(1 for r in done if r.transcript),
        "errors": errors[:5], "error_count": len(errors),
        "peak_rss_mb": rss, "peak_workdirs": watch.peak_dirs,
        "workdirs_left": count_workdirs(work), "done": sorted(Path(r.url).name for r in done),
    }


def raw_decode(clips: list[Clip], count: int, max_side: int, max_s: float) -> dict:
    """The same sampled frames, decoded by PyAV in this process: the floor under the
    pipeline's decode (which adds a child process, PNG frames, models, dedup)."""
    started = time.monotonic()
    frames = videos = 0
    if not clips:
        return {"videos": 0, "frames": 0, "wall_s": 0.0, "videos_per_s": 0.0,
                "frames_per_s": float("nan")}
    for clip in clips:
        frames += len(sample_frames(clip.path, count, max_side=max_side))
        videos += 1
        if time.monotonic() - started > max_s:
            break
    wall = time.monotonic() - started
    return {"videos": videos, "frames": frames, "wall_s": wall,
            "videos_per_s": videos / wall, "frames_per_s": frames / wall}


# --- (b) the flows ---

def write_config(data_dir: Path, clip_dir: Path) -> Path:
    config = {
        "data_dir": str(data_dir),
        "streams": [{"name": "bench", "topic": "posts", "eligibilities": FLOWS}],
        "plans": {"factory": "grebe.flows.registry:build_bundle"},
        "metrics": {"enabled": False},
        "media": {"fetch": {"allow_files": True, "file_roots": [str(clip_dir)]}},
    }
    path = data_dir / "grebe.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def posts_file(clips: list[Clip], directory: Path) -> Path:
    out = directory / "posts.jsonl"
    with out.open("w") as handle:
        for i, clip in enumerate(clips):
            handle.write(json.dumps({
                "id": f"video-{i:05d}", "author_id": f"author-{i % 50:03d}",
                "text": f"clip {i}: {clip.seconds}s at {clip.height}p",
                "created_at": 1717200000 + i,
                "media": [{"kind": "video", "url": clip.path.resolve().as_uri()}]}) + "\n")
    return out


def annotated(data_dir: Path) -> int:
    path = data_dir / "annotations.db"
    if not path.exists():
        return 0
    try:
        with sqlite3.connect(path) as conn:
            return int(conn.execute(
                "SELECT count(DISTINCT post_id) FROM annotations").fetchone()[0])
    except sqlite3.OperationalError:  # the engines have not created the table yet
        return 0


def run_flows(clips: list[Clip], clip_dir: Path, work: Path, max_s: float) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix="grebe-mediavol-data-", dir=work.parent))
    config = write_config(data_dir, clip_dir)
    subprocess.run([GREBE, "ingest", str(posts_file(clips, data_dir)), "-c", str(config)],
                   check=True, stdout=subprocess.DEVNULL)
    env = {**os.environ, "TMPDIR": str(work)}
    started = time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen([GREBE, "run", "-c", str(config), "--exit-when-done"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    watch = Watch(proc.pid, work, "dispatcher")
    first = None
    timed_out = False
    while proc.poll() is None:
        if first is None and annotated(data_dir):
            first = time.monotonic() - started
        if time.monotonic() - started > max_s:
            timed_out = True
            proc.terminate()
            proc.wait(60)
            break
        time.sleep(0.2)
    wall = time.monotonic() - started
    rss = watch.stop()
    # Count leftovers only once every process of the tree is gone (engines outlive the
    # dispatcher briefly when it is stopped at the cap, and clean up as they exit).
    deadline = time.monotonic() + 60
    while any(Path(f"/proc/{pid}").exists() for pid in watch.names if pid != proc.pid) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    stderr = proc.stderr.read().decode("utf-8", "replace") if proc.stderr else ""
    if proc.returncode not in (0, None) and not timed_out:
        raise SystemExit(f"grebe run exited {proc.returncode}: {stderr[-2000:]}")
    posts = annotated(data_dir)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    shutil.rmtree(data_dir, ignore_errors=True)
    return {"videos": posts, "of": len(clips), "wall_s": wall, "timed_out": timed_out,
            "first_annotation_s": first, "videos_per_s": posts / wall,
            "steady_videos_per_s": posts / (wall - first) if first and wall > first else None,
            "cpu_s_per_video": cpu / posts if posts else None,
            "peak_rss_mb": rss, "peak_workdirs": watch.peak_dirs,
            "workdirs_left": count_workdirs(work)}


# --- report ---

def _rss(by_role: dict[str, float]) -> str:
    return ", ".join(f"{role} {mb:.0f}" for role, mb in sorted(by_role.items()))


def print_report(made: dict, scanned: dict, raw: dict, flows: dict | None) -> None:
    print(f"\nvideos made: {made['n']} in {made['wall_s']:.1f} s "
          f"({made['audio']} with speech, lengths 1-20 s, {min(HEIGHTS)}p-{max(HEIGHTS)}p, "
          f"{made['mb']:.1f} MB)")
    cut = " (stopped at --max-seconds)" if scanned["timed_out"] else ""
    print(f"\n(a) media scan{cut}: {scanned['videos']}/{scanned['of']} videos in "
          f"{scanned['wall_s']:.1f} s = {scanned['videos_per_s']:.2f} videos/s, "
          f"{scanned['frames_per_s']:.1f} frames/s ({scanned['frames']} frames), "
          f"{scanned['transcribed']} transcribed, {scanned['error_count']} errors, "
          f"{scanned['groups']} near-duplicate groups; models {scanned['models']}")
    for line in scanned["errors"]:
        print(f"    error: {line}")
    print(f"    {'stage':<11}{'items':>7}{'errors':>7}{'mean ms':>10}{'max ms':>10}"
          f"{'peak queue':>12}")
    for stage, s in scanned["stages"].items():
        name = "fetch" if stage == "download" else stage
        print(f"    {name:<11}{s['processed']:>7}{s['errors']:>7}{s['mean_ms']:>10.1f}"
              f"{s['max_ms']:>10.1f}{s['peak_queue_depth']:>12}")
    print("    peak RSS MB: " + _rss(scanned["peak_rss_mb"]))
    print(f"    raw PyAV decode of the same frames, in process: {raw['frames']} frames of "
          f"{raw['videos']} videos in {raw['wall_s']:.1f} s = {raw['frames_per_s']:.1f} frames/s;"
          f" pipeline / raw = {scanned['frames_per_s'] / raw['frames_per_s']:.3f}")
    print(f"    per-item temp dirs: peak {scanned['peak_workdirs']} live, "
          f"{scanned['workdirs_left']} left at the end")
    if flows is None:
        return
    cut = " (stopped at --max-seconds)" if flows["timed_out"] else ""
    steady = flows["steady_videos_per_s"]
    print(f"\n(b) flows {','.join(FLOWS)}{cut}: {flows['videos']}/{flows['of']} posts annotated in "
          f"{flows['wall_s']:.1f} s = {flows['videos_per_s']:.2f} videos/s"
          + (f" ({steady:.2f}/s after the first annotation at {flows['first_annotation_s']:.1f} s)"
             if steady else "")
          + (f"; CPU {flows['cpu_s_per_video']:.2f} s per video" if flows['cpu_s_per_video']
             else ""))
    print("    peak RSS MB: " + _rss(flows["peak_rss_mb"]))
    print(f"    per-item temp dirs: peak {flows['peak_workdirs']} live, "
          f"{flows['workdirs_left']} left at the end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--videos", type=int, default=1000, help="videos to make (default 1000)")
    parser.add_argument("--flow-videos", type=int, default=None,
                        help="of them, how many go through the flows (default: all)")
    parser.add_argument("--no-flows", action="store_true", help="the scan only")
    parser.add_argument("--max-seconds", type=float, default=900.0,
                        help="each phase stops here and reports what finished (default 900)")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    if args.videos < 1:
        parser.error("--videos must be at least 1")
    if shutil.which("ffmpeg") is None:
        raise SystemExit("ffmpeg is needed to make the videos (apt install ffmpeg)")

    root = Path(tempfile.mkdtemp(prefix="grebe-mediavol-"))
    try:
        clip_dir, work = root / "clips", root / "work"
        clip_dir.mkdir()
        work.mkdir()
        clips, made_s = make_clips(args.videos, clip_dir)
        made = {"n": len(clips), "wall_s": made_s, "audio": sum(c.audio for c in clips),
                "mb": sum(c.path.stat().st_size for c in clips) / 2**20}
        print(f"made {len(clips)} videos in {made_s:.1f} s", flush=True)
        scanned = run_scan(clips, clip_dir, work, args.max_seconds)
        print(f"scanned {scanned['videos']} videos", flush=True)
        video = MediaConfig().video
        # The same frames: only the clips the scan finished (all, unless it hit the cap).
        finished = set(scanned.pop("done"))
        raw = raw_decode([c for c in clips if c.path.name in finished], video.frames,
                         video.frame_max_side, args.max_seconds)
        flows = None
        if not args.no_flows:
            chosen = clips[: args.flow_videos] if args.flow_videos else clips
            flows = run_flows(chosen, clip_dir, work, args.max_seconds)
        print_report(made, scanned, raw, flows)
        if args.json:
            print(json.dumps({"made": made, "scan": scanned, "raw_decode": raw, "flows": flows},
                             indent=2, default=str))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
