"""The oracle runner: every collected item reaches the verdict, or there is no verdict."""

from __future__ import annotations

import textwrap
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from engine import ItemResult, OracleBroken, Outcome, run_oracle

NOWHERE = "http://127.0.0.1:9"  # these oracles make no HTTP call


def oracle(tmp_path: Path, body: str, conftest: str = "") -> Path:
    folder = tmp_path / "oracle"
    folder.mkdir()
    (folder / "test_items.py").write_text(textwrap.dedent(body))
    if conftest:
        (folder / "conftest.py").write_text(textwrap.dedent(conftest))
    return folder


FIVE_FAST = """
    import pytest

    @pytest.mark.parametrize("n", range(5))
    def test_item(n):
        assert n >= 0
"""


async def test_a_cancel_while_items_are_handed_over_loses_none(tmp_path: Path) -> None:
    """Five results land in the file between two reads (slow polling, a sixth item still
    running); the first item's handler cancels the run: the other four must still arrive,
    each once."""
    folder = oracle(tmp_path, textwrap.dedent(FIVE_FAST) + "\n\ndef test_z_slow():\n"
                    "    import time\n    time.sleep(20)\n")
    seen: list[str] = []
    with anyio.CancelScope() as scope:

        async def on_item(item: ItemResult) -> None:
            seen.append(item.nodeid)
            scope.cancel()
            await anyio.lowlevel.checkpoint()  # where a cancel used to drop the rest

        await run_oracle(folder, NOWHERE, tmp_path, item_timeout=30, on_item=on_item,
                         poll_interval=2)
    assert scope.cancelled_caught
    assert len(seen) == 5 and len(set(seen)) == 5, seen


async def test_item_starts_are_reported_in_order_before_their_results(tmp_path: Path) -> None:
    folder = oracle(tmp_path, FIVE_FAST)
    log: list[tuple[str, str]] = []

    async def on_item(item: ItemResult) -> None:
        log.append(("end", item.nodeid))

    async def on_start(nodeid: str, ts: float) -> None:
        assert ts > 0
        log.append(("start", nodeid))

    items = await run_oracle(folder, NOWHERE, tmp_path, item_timeout=5, on_item=on_item,
                             on_start=on_start)
    expected = []
    for item in items:
        expected += [("start", item.nodeid), ("end", item.nodeid)]
    assert log == expected


async def test_an_oracle_that_ends_midway_is_broken_not_a_partial_verdict(
    tmp_path: Path,
) -> None:
    folder = oracle(tmp_path, """
        import os

        def test_a():
            pass

        def test_b():
            os._exit(0)

        def test_c():
            pass
    """)
    with pytest.raises(OracleBroken, match="after 1 of 3 items"):
        await run_oracle(folder, NOWHERE, tmp_path, item_timeout=5)


async def test_a_conftest_that_exits_is_not_an_oracle_without_items(tmp_path: Path) -> None:
    folder = oracle(tmp_path, "def test_a():\n    pass\n", conftest="import os\nos._exit(0)\n")
    with pytest.raises(OracleBroken, match="before it collected any item"):
        await run_oracle(folder, NOWHERE, tmp_path, item_timeout=5)


async def test_an_oracle_with_no_items_says_so(tmp_path: Path) -> None:
    folder = oracle(tmp_path, "X = 1\n")
    with pytest.raises(OracleBroken, match="has no items"):
        await run_oracle(folder, NOWHERE, tmp_path, item_timeout=5)


async def test_skips_and_setup_errors_keep_their_own_outcome(tmp_path: Path) -> None:
    folder = oracle(tmp_path, """
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("fixture broke")

        def test_passes():
            pass

        def test_skips():
            pytest.skip("not today")

        def test_setup_error(broken):
            pass

        def test_fails():
            assert 1 == 2
    """)
    items = {i.nodeid.rpartition("::")[2]: i
             for i in await run_oracle(folder, NOWHERE, tmp_path, item_timeout=5)}
    assert items["test_passes"].outcome is Outcome.PASSED and items["test_passes"].passed
    skipped = items["test_skips"]
    assert skipped.outcome is Outcome.SKIPPED
    assert not skipped.passed and not skipped.failed  # never counted as passed
    assert items["test_setup_error"].outcome is Outcome.ERROR
    assert "fixture broke" in items["test_setup_error"].message
    assert items["test_fails"].outcome is Outcome.FAILED and items["test_fails"].failed


async def test_the_oracle_log_is_capped_keeping_head_and_tail(tmp_path: Path) -> None:
    """A service answering huge bodies makes pytest print them: oracle.log stays bounded."""
    folder = oracle(tmp_path, """
        def test_huge_failure():
            print("y" * 5_000_000)
            assert False, "the body was wrong"
    """)
    (item,) = await run_oracle(folder, NOWHERE, tmp_path, item_timeout=10, log_cap=64 * 1024)
    assert item.failed and "the body was wrong" in item.message
    log = (tmp_path / "oracle.log").read_text()
    assert len(log) <= 64 * 1024 + 200
    assert "[anvil: log capped at 65536 bytes:" in log
    assert "1 failed" in log.splitlines()[-1]  # the tail: pytest's own last line


async def test_a_misspelt_marker_value_means_the_oracle_does_not_collect(tmp_path: Path) -> None:
    folder = oracle(tmp_path, """
        import pytest

        @pytest.mark.visibility("privat")
        def test_a():
            pass
    """)
    with pytest.raises(OracleBroken, match=r"visibility\('privat'\) is not one of public, private"):
        await run_oracle(folder, NOWHERE, tmp_path, item_timeout=10)
