"""Trajectory files and trainer checkpoints: a crash leaves the old state or the new one."""

from __future__ import annotations

import asyncio

import pytest

from runtime.atomic_io import temp_path
from runtime.recovery.store import Checkpoints, TrajectoryStore, unit_filename, unit_from_filename


@pytest.mark.parametrize("unit", ["g12", 12, "a/b c%", "12", ""])
def test_unit_ids_of_both_types_map_to_distinct_file_names(unit):
    assert unit_from_filename(unit_filename(unit)) == unit
    assert "/" not in unit_filename(unit)
    assert unit_filename(12) != unit_filename("12")


def test_trajectories_are_written_whole_or_not_at_all(tmp_path):
    store = TrajectoryStore(tmp_path / "t", fsync=True)
    store.save("g1", {"x": 1})
    store.save(7, {"x": 2})
    temp_path(store.path("g2")).write_text('{"x":')  # an interrupted save
    (tmp_path / "t" / (unit_filename("g3") + ".tmp")).write_text('{"x":')  # an older release's
    assert sorted(map(str, store.units())) == ["7", "g1"]
    assert store.load("g1") == {"x": 1} and store.load("g2") is None
    assert store.remove_partial() == 2
    store.delete("g1")
    store.delete("g1")  # deleting twice is harmless (recovery may repeat a deletion)
    assert store.units() == [7]


def test_only_committed_checkpoints_count_and_the_newest_are_kept(tmp_path):
    cps = Checkpoints(tmp_path / "c", keep=2, fsync=True)

    async def save(path):
        (path / "state.txt").write_text(path.name)

    for step in (2, 4, 6):
        asyncio.run(cps.commit(step, save, {"version": step}))
    assert cps.committed() == [4, 6]  # pruned to the newest two
    assert cps.latest()[0] == 6 and cps.meta(6)["version"] == 6
    (tmp_path / "c" / ".tmp-step-000008").mkdir()  # a save the crash interrupted
    (tmp_path / "c" / "step-000010").mkdir()  # renamed but without COMMIT.json: not trusted
    assert cps.latest()[0] == 6
    assert cps.remove_partial() == 1


def test_a_crash_inside_a_checkpoint_save_leaves_the_previous_one(tmp_path):
    cps = Checkpoints(tmp_path / "c", keep=2, fsync=False)

    async def good(path):
        (path / "state.txt").write_text("good")

    async def dies(path):
        (path / "state.txt").write_text("half")
        raise KeyboardInterrupt  # the process is gone in the middle of the save

    asyncio.run(cps.commit(1, good, {}))
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(cps.commit(2, dies, {}))
    step, path = cps.latest()
    assert step == 1 and (path / "state.txt").read_text() == "good"
