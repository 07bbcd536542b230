"""The docs say only true things: scripts/check_docs.py over README.md and docs/*.md, the
checker's own rules on small made-up docs, and a few of the README's commands run for real.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from check_docs import check_files, doc_files  # noqa: E402

GREBE = str(Path(sys.executable).with_name("grebe"))


def test_readme_and_docs_pass_the_docs_check() -> None:
    problems = check_files(doc_files())
    assert not problems, "\n".join(map(str, problems))


# --- the checker's rules, each on a made-up doc that breaks it ---------------------------


def _check(tmp_path: Path, text: str, files: dict[str, str] | None = None) -> list[str]:
    for name, content in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(content)
    doc = tmp_path / "docs" / "page.md"
    doc.parent.mkdir(exist_ok=True)
    doc.write_text(textwrap.dedent(text))
    return [p.message for p in check_files([doc], root=tmp_path)]


def test_links_must_resolve_with_their_anchors(tmp_path: Path) -> None:
    problems = _check(tmp_path, """\
        # Page
        ## Other part
        [ok](other.md#a-heading) [self](#other-part) [web](https://example.com)
        [gone](missing.md) [bad anchor](other.md#nope) [outside](../../elsewhere/DESIGN.md)
        `[not a link](missing.md)`
        """, {"docs/other.md": "# A heading\n"})
    assert len(problems) == 3, problems
    assert "'missing.md': no such file" in problems[0]
    assert "no heading with anchor #nope" in problems[1]
    assert "leaves the repository" in problems[2]


def test_grebe_commands_are_parsed_by_the_cli_itself(tmp_path: Path) -> None:
    problems = _check(tmp_path, """\
        ```bash
        grebe run -c grebe.yaml --exit-when-done     # fine: grebe.yaml is the reader's
        .venv/bin/grebe annotations POST_ID --json
        grebe ingest posts.jsonl --topics posts
        grebe frobnicate
        grebe dlq list / grebe dlq replay
        grebe annotations <post id>
        ```
        """)
    assert len(problems) == 4, problems
    assert "No such option: --topics" in problems[0]
    assert "No such command 'frobnicate'" in problems[1]
    assert "unexpected extra argument" in problems[2]
    assert "shell redirection, not a placeholder" in problems[3]


def test_scripts_paths_and_bench_options_must_exist(tmp_path: Path) -> None:
    bench = "import argparse\nparser = argparse.ArgumentParser()\n" \
            "parser.add_argument('--posts')\nparser.parse_args()\n"
    problems = _check(tmp_path, """\
        ```console
        $ bash scripts/up.sh && python bench/fast.py --posts 3
        output line, not a command: grebe frobnicate
        $ bash scripts/missing.sh
        $ python bench/fast.py --rounds 3
        $ grebe eval tests/data/missing.jsonl --label spam
        $ curl http://127.0.0.1:8080/healthz
        ```
        """, {"scripts/up.sh": "", "bench/fast.py": bench, "tests/data/x.jsonl": ""})
    assert len(problems) == 4, problems
    assert "scripts/missing.sh: no such script" in problems[0]
    assert "no option --rounds" in problems[1]
    assert "tests/data/missing.jsonl: no such path" in problems[2]
    assert "'curl' is not a command the docs check knows" in problems[3]


def test_illustrative_blocks_are_skipped_and_untyped_fences_refused(tmp_path: Path) -> None:
    problems = _check(tmp_path, """\
        <!-- illustrative -->
        ```bash
        curl http://127.0.0.1:8080/healthz
        ```

        ```
        grebe frobnicate
        ```
        """)
    assert len(problems) == 1 and "without a language" in problems[0], problems


def test_inline_code_names_real_files_and_objects(tmp_path: Path) -> None:
    problems = _check(tmp_path, """\
        `core/offsets.py` `tests/t.py::test_here` `grebe.yaml` `flows/*.py`
        `grebe.brokers.kafka.KafkaSource` `grebe.flows.registry:build_bundle` `grebe.post_id`
        `core/gone.py` `tests/t.py::test_gone` `grebe.brokers.kafka.NoSuchSource`
        """, {"src/grebe/core/offsets.py": "", "tests/t.py": "def test_here():\n    pass\n"})
    assert len(problems) == 3, problems
    assert "'core/gone.py': no such file" in problems[0]
    assert "no test test_gone" in problems[1]
    assert "has no 'NoSuchSource'" in problems[2]


def test_yaml_blocks_load_as_grebe_config(tmp_path: Path) -> None:
    problems = _check(tmp_path, """\
        ```yaml
        engine: {processes: 2}
        ```

        ```yaml
        engine: {processes: two}
        enginez: {processes: 2}
        ```

        <!-- illustrative -->
        ```yaml
        kafka: {security_protocol: SASL_SSL}
        ```
        """)
    assert len(problems) == 1, problems
    assert "engine.processes" in problems[0] and "enginez" in problems[0]


def test_tables_have_one_header_row(tmp_path: Path) -> None:
    problems = _check(tmp_path, """\
        | a | b |
        |---|---|
        | one `x | y` | two |
        |---|---|
        | three |
        """)
    assert len(problems) == 2, problems
    assert "second separator row" in problems[0]
    assert "row has 1 cells, its header 2" in problems[1]


# --- README commands, run for real where cheap -------------------------------------------


def _grebe(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GREBE, *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def test_grebe_help_lists_the_readme_commands() -> None:
    done = _grebe("--help")
    assert done.returncode == 0, done.stderr
    for command in ("run", "ingest", "annotations", "demo", "serve", "feed", "dlq", "topics"):
        assert command in done.stdout


def test_api_key_new_prints_the_key_once_and_its_config_entry() -> None:
    """docs/security.md: `grebe api-key new ops` prints `grb_<id>_<43 chars>` and the
    auth.keys entry holding only its sha256, scopes api, feed, thunder by default."""
    done = _grebe("api-key", "new", "ops")
    assert done.returncode == 0, done.stderr
    first, rest = done.stdout.split("\n", 1)
    key = first.removeprefix("key (shown once): ")
    assert key.startswith("grb_ops_") and len(key.removeprefix("grb_ops_")) == 43, key
    entry = yaml.safe_load(rest.removeprefix("add to the config:\n"))["auth"]["keys"][0]
    assert entry == {"id": "ops", "sha256": hashlib.sha256(key.encode()).hexdigest(),
                     "scopes": ["api", "feed", "thunder"]}


def test_ingest_then_annotations_in_a_data_dir(tmp_path: Path) -> None:
    """README "Running the pipeline": `grebe ingest posts.jsonl --topic posts` appends to
    the local log under the data dir ($GREBE_DATA_DIR); a bad line is reported, not
    appended; `grebe annotations POST_ID` reads the store in the same data dir."""
    posts = tmp_path / "posts.jsonl"
    posts.write_text(json.dumps({"post": {"id": "p1", "author_id": "a", "text": "hi",
                                          "created_at": 1.0}}) + "\nnot json\n")
    env = {"GREBE_DATA_DIR": str(tmp_path / "var")}
    done = _grebe("ingest", str(posts), "--topic", "posts", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ingested 1 posts into 'posts', rejected 1 bad lines" in done.stdout
    assert (tmp_path / "var" / "log.db").exists()
    done = _grebe("annotations", "p1", env=env)  # ingested, not yet run: none, exit 1
    assert (done.returncode, done.stdout) == (1, "no annotations for post 'p1'\n"), done


def test_feed_recipe_without_plans_factory_refuses_to_start(tmp_path: Path) -> None:
    """README "Feed end to end": without `plans.factory` `grebe run` refuses to start,
    naming the eligibilities no plan serves (it used to annotate nothing, silently)."""
    readme = (ROOT / "README.md").read_text()
    config = yaml.safe_load(readme.split("```yaml\n", 1)[1].split("```", 1)[0])
    assert config["plans"] == {"factory": "grebe.flows.registry:build_bundle"}
    del config["plans"]
    config["data_dir"] = str(tmp_path / "var")
    path = tmp_path / "grebe.yaml"
    path.write_text(yaml.safe_dump(config))
    done = _grebe("run", "-c", str(path), "--exit-when-done")
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "no plan serves" in output and "post_safety" in output, output
