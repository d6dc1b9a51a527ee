"""A filesystem that refuses the k-th write, through train.py and each key=value script: the
script's normal output, or one line naming the path (exit status 1); no temp file left and no
cached file half-written."""

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.faults.inject import (
    SCRIPTS,
    WRITE_FAULTS,
    assert_one_error_line,
    at_kth_call,
    leftovers,
    output_of,
    refuse,
    run_with_fault,
    train_argv,
)
from tests.helpers import fuzz_settings


@pytest.mark.slow
@fuzz_settings(examples=5)
@given(
    point=st.sampled_from(["sendfile", "replace", "write"]),
    k=st.one_of(st.integers(1, 12), st.integers(13, 80)),  # data preparation, then the run
    code=st.sampled_from(WRITE_FAULTS),
)
def test_train_with_a_refused_write_stops_in_one_line_naming_the_path(
    multi30k_dir, tmp_path_factory, capsys, point, k, code
):
    root = tmp_path_factory.mktemp("refused")
    argv = train_argv(multi30k_dir, root)
    with at_kth_call(point, k, refuse(code)) as calls:
        status, err = output_of("train", argv, capsys)
    if len(calls) < k:
        assert status is None and "Traceback" not in err, err[-3000:]
        return
    line = assert_one_error_line(status, err)
    assert f"could not write {root}" in line and os.strerror(code) in line, line
    assert leftovers(root) == []


@fuzz_settings(examples=8)
@given(
    script=st.sampled_from(SCRIPTS),
    point=st.sampled_from(["replace", "write"]),
    k=st.integers(1, 8),
    code=st.sampled_from(WRITE_FAULTS),
)
def test_a_script_with_a_refused_write_stops_in_one_line_naming_the_path(
    trained, tmp_path_factory, capsys, script, point, k, code
):
    work = tmp_path_factory.mktemp("refused")
    reached, status, err = run_with_fault(script, trained, work, point, k, refuse(code), capsys)
    if not reached:
        assert status is None and "Traceback" not in err, err[-3000:]
        return
    line = assert_one_error_line(status, err)
    assert "could not write /" in line and os.strerror(code) in line, line
    assert leftovers(work) == [] and leftovers(trained) == []
