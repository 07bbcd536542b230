"""The `grebe` command's processes start with one BLAS thread (grebe.blas): OpenBLAS
threads spin on the small products engines do, and a user's own setting wins."""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROBE = ("import grebe.cli, numpy, json; from threadpoolctl import threadpool_info; "
         "print(json.dumps([i['num_threads'] for i in threadpool_info() "
         "if i['internal_api'] == 'openblas']))")


def blas_threads(env_value: str | None) -> list[int]:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if env_value is not None:
        env["OPENBLAS_NUM_THREADS"] = env_value
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, check=True,
                         capture_output=True, text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_command_starts_numpy_with_one_blas_thread() -> None:
    threads = blas_threads(None)
    assert threads and set(threads) == {1}


def test_a_users_own_setting_wins() -> None:
    assert set(blas_threads("2")) == {2}
