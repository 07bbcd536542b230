"""What a stream's selection costs per post: `why_not` over a mix of crafted posts
(originals, replies with and without follower counts, media...) for the streams of
src/grebe/data/default.yaml that have rules. CPU-bound and single-threaded: the numbers
are per post, in this process.

    .venv/bin/python bench/selection.py [--posts 200000]
"""

from __future__ import annotations

import argparse
import sys
import time
from importlib import resources
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.selection.crafted import CRAFTED

from grebe.config import load_config
from grebe.selection.rules import why_not
from grebe.types import TaskPayload, UserContext


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--posts", type=int, default=200_000)
    args = parser.parse_args()
    config = load_config(str(resources.files("grebe") / "data" / "default.yaml"))
    payloads = [TaskPayload(payload_id=k, post=e.post, user=e.user,
                            context=e.context or UserContext()) for k, e in CRAFTED.items()]
    rounds = max(1, args.posts // len(payloads))
    for stream in config.streams:
        if stream.selection.selects_everything:
            continue
        selection = stream.selection
        start = time.process_time()
        for _ in range(rounds):
            for payload in payloads:
                why_not(selection, payload)
        per_post = (time.process_time() - start) / (rounds * len(payloads))
        print(f"{stream.name:48s} {per_post * 1e6:6.2f} us CPU per post")


if __name__ == "__main__":
    main()
