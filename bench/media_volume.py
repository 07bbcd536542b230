"""Media at volume: N short real videos through `grebe media scan` and through the flows.

    nice -n 19 .venv/bin/python bench/media_volume.py [--videos 1000] [--max-seconds 900]
        [--deadline-seconds S] [--flow-videos N] [--no-flows | --no-scan]
        [--engine-processes K] [--cache-dir DIR] [--cached-only] [--json]

The videos (bench/media_clips.py: ffmpeg from packaged photos and real speech, 1-20 s,
160p-720p, every other one with speech) are made once into a cache directory outside git
and reused by later runs. They are read as files (`fetch.allow_files` under that
directory only), so the numbers are the pipeline's, not a web server's.

In one run it prints:

- (a) the batch scan (`grebe.media.scan.scan`, what `grebe media scan` runs, with its
  default models: NSFW classifier, OCR, Whisper tiny.en): videos/s, sampled frames/s and
  CPU s per video (the figure that holds on a busy machine); per stage (download = fetch,
  decode, classify, transcribe, dedup) items, mean/p50/p99/max latency, peak queue depth;
  peak RSS by role (the bench process, decoding children, ASR workers, tesseract) and the
  RSS at every tenth of the videos (a leak shows as growth);
- the same frames decoded by PyAV directly in this process (`grebe.media.video.
  sample_frames`, no child, no PNG, no model): frames/s, and the pipeline's ratio to it;
- (b) the flows: posts each carrying one of the videos through post_safety and mm_emb_v5
  (`grebe ingest` into the local broker, `grebe run --exit-when-done`, engine processes,
  SQLite store): videos/s, CPU s per video, peak RSS per process;
- intermediate files: the pipeline's per-item directories (`grebe-media-*` under the
  bench's TMPDIR) at their peak while running and left at the end. The bench fails (exit
  1, after printing) if any is left or the peak exceeds what the stage queues allow.

Each phase stops at `--max-seconds`, and the whole run at `--deadline-seconds`: what
finished by then is reported, stage figures included, and says so.
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
import time
from pathlib import Path

import yaml
from media_clips import HEIGHTS, Clip, Made, clip_plan, default_cache_dir, ensure_clips
from media_watch import TIMELINE_POINTS, Timeline, Watch, count_workdirs, load_average

from grebe.config import EngineConfig
from grebe.media.config import MediaConfig, PipelineConfig
from grebe.media.pipeline import STOPPED, ItemReport
from grebe.media.scan import scan
from grebe.media.video import sample_frames

GREBE = str(Path(sys.executable).parent / "grebe")
FLOWS = ["post_safety", "mm_emb_v5"]
STOP_GRACE_S = 60  # `grebe run` stopped at the cap gets this long to exit before SIGKILL


# --- (a) the scan, and the raw decode beside it ---

def _cpu_s() -> float:
    """CPU seconds of this process and of its children that have exited (decoding
    children, tesseract, the ASR workers once the scan stops them)."""
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(u.ru_utime + u.ru_stime for u in usage)


def run_scan(clips: list[Clip], work: Path, max_s: float) -> dict:
    tempfile.tempdir = str(work)  # the pipeline's per-item directories go under `work`
    done: list[ItemReport] = []
    stopped = 0
    watch = Watch(os.getpid(), work, "bench")
    load_before, cpu_before, started = load_average(), _cpu_s(), time.monotonic()
    timeline = Timeline(max(1, len(clips) // TIMELINE_POINTS), watch, started)

    def on_done(report: ItemReport) -> None:
        nonlocal stopped
        if report.error == STOPPED:  # cut off by the cap: not a finished video
            stopped += 1
            return
        done.append(report)
        timeline.tick(len(done))

    result = asyncio.run(scan([str(c.path) for c in clips], MediaConfig(), on_done=on_done,
                              max_seconds=max_s))
    wall, cpu = time.monotonic() - started, _cpu_s() - cpu_before
    rss = watch.stop()
    tempfile.tempdir = None
    frames = sum(r.frames for r in done)
    errors = [f"{Path(r.url).name}: {r.error}" for r in done if r.error]
    # A model that failed on an item (tesseract, NSFW) is a warning, not an error: count
    # them too, or a run whose OCR failed throughout would read as clean.
    warnings = [f"{Path(r.url).name}: {w}" for r in done for w in r.warnings]
    return {
        "stages": result.stages, "models": result.models, "timed_out": result.timed_out,
        "groups": len(result.groups), "videos": len(done), "stopped": stopped,
        "of": len(clips), "wall_s": wall, "videos_per_s": len(done) / wall,
        "frames": frames, "frames_per_s": frames / wall,
        "cpu_s_per_video": cpu / len(done) if done else None,
        "transcribed": sum(1 for r in done if r.transcript),
        "errors": errors[:5], "error_count": len(errors),
        "warnings": warnings[:5], "warning_count": len(warnings),
        "peak_rss_mb": rss, "rss_timeline": timeline.points, "peak_workdirs": watch.peak_dirs,
        "workdirs_left": count_workdirs(work), "load": f"{load_before} -> {load_average()}",
        "done": sorted(Path(r.url).name for r in done),
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

def write_config(data_dir: Path, clip_dir: Path, engines: int) -> Path:
    config = {
        "engine": {"processes": engines},
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


def run_flows(clips: list[Clip], clip_dir: Path, work: Path, max_s: float,
              engines: int) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix="grebe-mediavol-data-", dir=work.parent))
    config = write_config(data_dir, clip_dir, engines)
    subprocess.run([GREBE, "ingest", str(posts_file(clips, data_dir)), "-c", str(config)],
                   check=True, stdout=subprocess.DEVNULL)
    env = {**os.environ, "TMPDIR": str(work)}
    load_before, started = load_average(), time.monotonic()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    # stderr to a file, not a pipe: nobody reads a pipe while it runs, and a full one
    # (64 KB of log lines over a long run) would block grebe's next write: a stall.
    log_path = data_dir / "run.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen([GREBE, "run", "-c", str(config), "--exit-when-done"],
                                env=env, stdout=subprocess.DEVNULL, stderr=log)
    watch = Watch(proc.pid, work, "dispatcher")
    timeline = Timeline(max(1, len(clips) // TIMELINE_POINTS), watch, started)
    first = None
    timed_out = hung = False
    seen = 0
    while proc.poll() is None:
        count = annotated(data_dir)
        if first is None and count:
            first = time.monotonic() - started
        while seen < count:
            seen += 1
            timeline.tick(seen)
        if time.monotonic() - started > max_s:
            timed_out = True
            proc.terminate()
            try:
                proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:  # it hung: say so, kill it, still report
                hung = True
                proc.kill()
                proc.wait()
            break
        time.sleep(0.5)
    wall = time.monotonic() - started
    rss = watch.stop()
    # Count leftovers only once every process of the tree is gone (engines outlive the
    # dispatcher briefly when it is stopped at the cap, and clean up as they exit).
    deadline = time.monotonic() + 60
    while any(Path(f"/proc/{pid}").exists() for pid in watch.names if pid != proc.pid) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, None) and not timed_out:
        tail = log_path.read_text("utf-8", "replace")[-2000:]
        raise SystemExit(f"grebe run exited {proc.returncode}: {tail}")
    posts = annotated(data_dir)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    shutil.rmtree(data_dir, ignore_errors=True)
    return {"videos": posts, "of": len(clips), "wall_s": wall, "timed_out": timed_out,
            "first_annotation_s": first, "videos_per_s": posts / wall,
            "steady_videos_per_s": posts / (wall - first) if first and wall > first else None,
            "cpu_s_per_video": cpu / posts if posts else None,
            "peak_rss_mb": rss, "rss_timeline": timeline.points,
            "peak_workdirs": watch.peak_dirs, "workdirs_left": count_workdirs(work),
            "load": f"{load_before} -> {load_average()}", "engines": engines,
            "hung_at_stop": hung}


def workdir_bound(pipeline: PipelineConfig) -> int:
    """Items holding a per-item directory at once, at most, in one pipeline: one per
    worker of every stage (the directory is made by the download stage and removed when
    the item leaves the last), plus the queues after download (twice their workers)."""
    after_download = pipeline.decode_workers + pipeline.classify_workers + pipeline.dedup_workers
    return pipeline.download_workers + after_download + 2 * after_download


def check_workdirs(phase: str, figures: dict, bound: int) -> list[str]:
    problems = []
    if figures["workdirs_left"]:
        problems.append(f"{phase}: {figures['workdirs_left']} per-item directories left")
    if figures["peak_workdirs"] > bound:
        problems.append(f"{phase}: {figures['peak_workdirs']} per-item directories live at "
                        f"once, more than the stage queues allow ({bound})")
    return problems


# --- report ---

def _rss(by_role: dict[str, float]) -> str:
    return ", ".join(f"{role} {mb:.0f}" for role, mb in sorted(by_role.items()))


def _print_timeline(points: list[dict], root: str) -> None:
    """RSS (MB) by role at every tenth of the videos: flat is bounded, rising is a leak."""
    if not points:
        return
    roles = sorted({k for p in points for k in p} - {"done", "s", "dirs"})
    names = [r.removeprefix(root + "/") for r in roles]  # `all` and the root stay whole
    print("    RSS MB over the run: " + f"{'done':>6}{'s':>7}{'dirs':>6}"
          + "".join(f"{n:>{len(n) + 2}}" for n in names))
    for p in points:
        print(" " * 25 + f"{p['done']:>6}{p['s']:>7.0f}{p['dirs']:>6}"
              + "".join(f"{p.get(r, 0):>{len(n) + 2}.0f}" for r, n in zip(roles, names,
                                                                            strict=True)))


def _print_stages(stages: dict[str, dict]) -> None:
    print(f"    {'stage':<11}{'items':>7}{'errors':>7}{'mean ms':>10}{'p50 ms':>10}"
          f"{'p99 ms':>10}{'max ms':>10}{'peak queue':>12}")
    for stage, s in stages.items():
        name = "fetch" if stage == "download" else stage
        print(f"    {name:<11}{s['processed']:>7}{s['errors']:>7}{s['mean_ms']:>10.1f}"
              f"{s['p50_ms']:>10.1f}{s['p99_ms']:>10.1f}{s['max_ms']:>10.1f}"
              f"{s['peak_queue_depth']:>12}")


def print_scan(scanned: dict, raw: dict) -> None:
    cut = " (stopped at the cap)" if scanned["timed_out"] else ""
    cpu = scanned["cpu_s_per_video"]
    print(f"\n(a) media scan{cut}: {scanned['videos']}/{scanned['of']} videos in "
          f"{scanned['wall_s']:.1f} s = {scanned['videos_per_s']:.2f} videos/s, "
          f"{scanned['frames_per_s']:.1f} frames/s ({scanned['frames']} frames)"
          + (f", CPU {cpu:.2f} s per video" if cpu else "")
          + f"; {scanned['transcribed']} transcribed, {scanned['error_count']} errors, "
          f"{scanned['warning_count']} model warnings, "
          f"{scanned['stopped']} stopped at the cap, {scanned['groups']} near-duplicate groups;"
          f" load average {scanned['load']}; models {scanned['models']}")
    for line in scanned["errors"]:
        print(f"    error: {line}")
    for line in scanned["warnings"]:
        print(f"    warning: {line}")
    _print_stages(scanned["stages"])
    print("    peak RSS MB: " + _rss(scanned["peak_rss_mb"]))
    _print_timeline(scanned["rss_timeline"], "bench")
    ratio = scanned["frames_per_s"] / raw["frames_per_s"] if raw["frames"] else float("nan")
    print(f"    raw PyAV decode of the same frames, in process: {raw['frames']} frames of "
          f"{raw['videos']} videos in {raw['wall_s']:.1f} s = {raw['frames_per_s']:.1f} frames/s;"
          f" pipeline / raw = {ratio:.3f}")
    print(f"    per-item temp dirs: peak {scanned['peak_workdirs']} live, "
          f"{scanned['workdirs_left']} left at the end")


def print_flows(flows: dict) -> None:
    cut = " (stopped at the cap)" if flows["timed_out"] else ""
    steady = flows["steady_videos_per_s"]
    print(f"\n(b) flows {','.join(FLOWS)}, {flows['engines']} engine process(es){cut}: "
          f"{flows['videos']}/{flows['of']} posts annotated "
          f"in {flows['wall_s']:.1f} s = {flows['videos_per_s']:.2f} videos/s"
          + (f" ({steady:.2f}/s after the first annotation at {flows['first_annotation_s']:.1f} s)"
             if steady else "")
          + (f"; CPU {flows['cpu_s_per_video']:.2f} s per video" if flows['cpu_s_per_video']
             else "") + f"; load average {flows['load']}")
    if flows["hung_at_stop"]:
        print(f"    grebe run did not exit within {STOP_GRACE_S} s of SIGTERM: killed")
    print("    peak RSS MB: " + _rss(flows["peak_rss_mb"]))
    _print_timeline(flows["rss_timeline"], "dispatcher")
    print(f"    per-item temp dirs: peak {flows['peak_workdirs']} live, "
          f"{flows['workdirs_left']} left at the end")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--videos", type=int, default=1000, help="videos to make (default 1000)")
    parser.add_argument("--flow-videos", type=int, default=None,
                        help="of them, how many go through the flows (default: all)")
    parser.add_argument("--no-flows", action="store_true", help="the scan only")
    parser.add_argument("--no-scan", action="store_true", help="the flows only")
    parser.add_argument("--max-seconds", type=float, default=900.0,
                        help="each phase stops here and reports what finished (default 900)")
    parser.add_argument("--deadline-seconds", type=float, default=None,
                        help="the whole run stops here, phases included (default: none)")
    parser.add_argument("--engine-processes", type=int, default=EngineConfig().processes,
                        help="grebe run's engine processes; 0 runs the engine in the "
                             "dispatcher, which has no start timeout (default %(default)s)")
    parser.add_argument("--cache-dir", type=Path, default=default_cache_dir(),
                        help="where the videos are kept between runs (default %(default)s)")
    parser.add_argument("--cached-only", action="store_true",
                        help="use the planned videos already in the cache, make none "
                             "(when making the rest would not fit in the time)")
    parser.add_argument("--json", action="store_true", help="also print the figures as JSON")
    args = parser.parse_args()
    if args.videos < 1:
        parser.error("--videos must be at least 1")
    if shutil.which("ffmpeg") is None:
        raise SystemExit("ffmpeg is needed to make the videos (apt install ffmpeg)")
    deadline = time.monotonic() + (args.deadline_seconds or float("inf"))

    def cap() -> float:  # a phase's time: its own cap, or what is left of the run's
        return max(1.0, min(args.max_seconds, deadline - time.monotonic()))

    if args.cached_only:
        cached = [c for c in clip_plan(args.videos, args.cache_dir) if c.path.is_file()]
        if not cached:
            raise SystemExit(f"--cached-only: none of the videos is in {args.cache_dir}")
        made = Made(clips=cached, made=0, wall_s=0.0,
                    mb=sum(c.path.stat().st_size for c in cached) / 2**20)
    else:
        made = ensure_clips(args.videos, args.cache_dir)
    clips, clip_dir = made.clips, made.clips[0].path.parent
    planned = "" if len(clips) == args.videos else f" of the {args.videos} planned"
    print(f"videos: {len(clips)}{planned} in {clip_dir} ({made.made} made in {made.wall_s:.1f} s, "
          f"{made.reused} reused from the cache; {sum(c.audio for c in clips)} with speech, "
          f"1-20 s, {min(HEIGHTS)}p-{max(HEIGHTS)}p, {made.mb:.1f} MB); "
          f"load average {load_average()}", flush=True)
    bound = workdir_bound(MediaConfig().pipeline)
    problems: list[str] = []
    figures: dict = {"made": {"n": len(clips), "made": made.made, "wall_s": made.wall_s,
                              "mb": made.mb}}
    root = Path(tempfile.mkdtemp(prefix="grebe-mediavol-"))
    try:
        work = root / "work"
        work.mkdir()
        if not args.no_scan:
            scanned = run_scan(clips, work, cap())
            # The same frames: only the clips the scan finished (all, unless it hit the cap).
            finished = set(scanned.pop("done"))
            video = MediaConfig().video
            raw = raw_decode([c for c in clips if c.path.name in finished], video.frames,
                             video.frame_max_side, cap())
            print_scan(scanned, raw)
            problems += check_workdirs("scan", scanned, bound)
            figures |= {"scan": scanned, "raw_decode": raw}
        if not args.no_flows and deadline - time.monotonic() > 1:
            chosen = clips[: args.flow_videos] if args.flow_videos else clips
            flows = run_flows(chosen, clip_dir, work, cap(), args.engine_processes)
            print_flows(flows)
            engines = max(1, args.engine_processes)  # one pipeline per engine process
            problems += check_workdirs("flows", flows, engines * bound)
            if flows["hung_at_stop"]:
                problems.append("flows: grebe run hung after SIGTERM and was killed")
            figures["flows"] = flows
        if args.json:
            print(json.dumps(figures, indent=2, default=str))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    for line in problems:
        print(f"FAIL {line}", file=sys.stderr)
    if problems:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
