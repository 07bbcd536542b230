"""Regenerate thunder_pb2.py, thunder_pb2.pyi and thunder_pb2_grpc.py from thunder.proto.

Run `python -m grebe.thunder.proto.generate` (needs grpcio-tools, a dev dependency).
Paths are rooted at src/ so the generated imports read `from grebe.thunder.proto ...`.
"""

from __future__ import annotations

import sys
from pathlib import Path

PROTO = Path(__file__).with_name("thunder.proto")
SRC_ROOT = PROTO.parents[3]  # .../src


def main() -> int:
    from grpc_tools import protoc

    rel = PROTO.relative_to(SRC_ROOT)
    return protoc.main([
        "grpc_tools.protoc",
        f"-I{SRC_ROOT}",
        f"--python_out={SRC_ROOT}",
        f"--pyi_out={SRC_ROOT}",
        f"--grpc_python_out={SRC_ROOT}",
        str(rel),
    ])


if __name__ == "__main__":
    sys.exit(main())
