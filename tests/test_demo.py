from grebe.demo import run_demo, sample_path


def test_sample_has_posts_and_some_bad_lines():
    lines = sample_path().read_text().splitlines()
    assert 190 <= len(lines) <= 220


async def test_demo_runs_the_sample_end_to_end(tmp_path):
    summary = await run_demo(tmp_path, engine={"processes": 0})
    assert summary.rejected_at_ingest == 2
    assert summary.dead_lettered == 2
    assert summary.annotated + summary.skipped + summary.dead_lettered == summary.ingested
    assert summary.annotated > 180 and summary.skipped > 0
