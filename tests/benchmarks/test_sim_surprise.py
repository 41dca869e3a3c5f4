import argparse

import pytest

from benchmarks import sim_surprise


def test_the_surprise_is_read_per_misconception_of_the_home_generator(tmp_path):
    row = sim_surprise.measure(steps=10, corpus_problems=40, problems=30, samples=4, cache=tmp_path)
    assert set(row["misconceptions"]) == {"forget_multiply", "scale_as_add", "sell_from_start"}
    assert 0.0 <= row["overall"] <= 1.0 and 0.0 <= row["every_step"] <= 1.0
    found = [m for m in row["misconceptions"].values() if m["wrong_steps"]]
    assert found and all(0.0 <= m["vs_every_right_step"] <= 1.0 for m in found)
    # A second reading of the same schedule comes from the cache: same numbers.
    assert sim_surprise.measure(steps=10, corpus_problems=40, problems=30, samples=4, cache=tmp_path) == row


def test_a_malformed_schedule_is_refused_with_the_expected_form():
    with pytest.raises(argparse.ArgumentTypeError, match="expected STEPS:PROBLEMS"):
        sim_surprise._schedule("4800")
