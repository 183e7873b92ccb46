"""The closing lines of a comparison's report: this invocation's time and workers, how many
cells an earlier invocation had finished, and the data the results were computed from."""

from posattn.lab.runs.context import data_line, wall_time_line


def test_the_line_names_this_invocations_workers_and_the_reused_cells():
    context = {"wall_seconds": 474.0, "workers": 1, "cells": {"total": 36, "reused": 27}}
    assert wall_time_line(context) == (
        "Wall time: 7.9 min on 1 worker for the 9 of 36 cells this invocation computed; "
        "reused from earlier invocations, whose time is not in it: 27."
    )
    context = {"wall_seconds": 90.0, "workers": 2, "cells": {"total": 4, "reused": 0}}
    assert wall_time_line(context) == "Wall time: 1.5 min on 2 workers."
    assert wall_time_line({"wall_seconds": 30.0}) == "Wall time: 0.5 min."


def test_the_data_line_gives_each_folders_digest_shortened_or_says_it_is_not_recorded():
    data = {"corpus": "0123456789abcdef" * 4, "tasks/sentiment": "f" * 64}
    assert data_line({"data": data}) == (
        "Data (sha256 of each folder read, first digits): corpus 0123456789ab, "
        "tasks/sentiment ffffffffffff."
    )
    assert data_line({}) == "Data: not recorded."
    assert data_line({"data": "differs between runs"}) == "Data: differs between runs."
