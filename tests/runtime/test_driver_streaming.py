"""Streaming training in the driver, on the scripted engine and the virtual clock: the head
buffer's finished units are trained in chunks while it fills, every batch still trains
exactly its B units with one optimiser step, and the trainer's wait after the batch's last
unit shrinks."""

from __future__ import annotations

from statistics import fmean

import pytest

from reserve_occupy import replay
from runtime.clock import VirtualClock
from runtime.controller import make_controller
from runtime.driver import Driver
from runtime.rollout.fake import FakeRollout, FakeTrainer, random_script
from runtime.records import DriverSettings

from .helpers import PROMPTS, parity_reward, token_lag_violations


def _run(streaming: bool, min_chunk: int = 1, eta: int = 1, steps: int = 12, **kw):
    clock = VirtualClock()
    settings = DriverSettings(max_staleness=eta, batch_size=4, group_size=4, steps=steps,
                              max_tokens=6, check_invariants=True, streaming=streaming,
                              chunk_groups=min_chunk, **kw)
    rollout = FakeRollout(clock, random_script(2, per_token_s=0.2, long_tail=0.1))
    trainer = FakeTrainer(clock, train_s=1.0, step_s=0.02, batch_size=4)
    driver = Driver(settings, rollout, trainer, parity_reward, PROMPTS, clock,
                    controller=make_controller(settings, clock.now))
    records = clock.run(driver.run())
    return driver, trainer, records


@pytest.mark.parametrize("eta", [0, 1, 2])
def test_streamed_batches_train_exactly_their_units_once(eta):
    driver, trainer, records = _run(True, eta=eta)
    assert len(records) == len(trainer.batches) == 12
    assert token_lag_violations(trainer, eta) == []
    consumes = [e for e in driver.controller.events if e.op == "consume"]
    streamed_any = False
    for batch, event, record in zip(trainer.batches, consumes, records):
        ids = [g.unit_id for g in batch.groups]
        assert len(ids) == 4 and ids == [u.unit_id for u in event.batch.units]
        chunked = [u for c in trainer.chunks for u in c if u in ids]
        assert len(chunked) == len(set(chunked)) == record.streamed_units
        assert set(chunked) == set(event.batch.streamed)  # trained = handed by the controller
        streamed_any |= bool(chunked)
    assert streamed_any
    replay(driver.controller.config, driver.controller.events)  # the log is the run


def test_streaming_off_never_streams():
    driver, trainer, records = _run(False)
    assert trainer.chunks == [] and all(r.streamed_units == 0 for r in records)
    assert not driver.controller.config.streaming
    assert all(e.op != "stream" for e in driver.controller.events)


def test_streaming_shortens_the_wait_after_the_last_unit():
    # A step costs 1 s of training and generation is the slower side (the trainer waits for
    # its batch): with streaming, only the groups still arriving when the buffer fills (and the
    # step) remain after its last unit. Were the buffer already full when the trainer turned to
    # it (a trainer slower than generation), there would be nothing to stream.
    _, _, off = _run(False)
    _, _, on = _run(True)
    tail_off = fmean(r.tail_s for r in off[2:])
    tail_on = fmean(r.tail_s for r in on[2:])
    assert tail_off >= 1.0  # the whole step's training, at least
    assert tail_on < tail_off / 2
    assert all(r.stream_s > 0 for r in on[2:] if r.streamed_units)


def test_chunks_wait_for_chunk_groups():
    driver, trainer, records = _run(True, min_chunk=3)
    assert trainer.chunks and all(len(c) >= 3 for c in trainer.chunks)
    # The units handed below the minimum train with the rest at consume.
    assert any(r.streamed_units < 4 for r in records)


def test_the_yaml_option_is_off_by_default_and_checked():
    from runtime.config import ConfigFileError, load_config

    assert not load_config(None).trainer.streaming
    assert not load_config(None).driver_settings().controller_config().streaming
    on = load_config(None, {"trainer.streaming": True, "trainer.chunk_groups": 2})
    settings = on.driver_settings()
    assert settings.streaming and settings.chunk_groups == 2
    assert settings.controller_config().streaming
    with pytest.raises(ConfigFileError, match=r"trainer: streaming trains one pass.*epochs 2"):
        load_config(None, {"trainer.streaming": True, "trainer.epochs": 2})
    with pytest.raises(ConfigFileError, match=r"chunk_groups \(17\) must be <= "
                                              r"staleness.batch_size \(16\)"):
        load_config(None, {"trainer.streaming": True, "trainer.chunk_groups": 17})
    with pytest.raises(ConfigFileError, match="trainer.chunk_groups"):
        load_config(None, {"trainer.chunk_groups": 0})
