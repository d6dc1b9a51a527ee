"""Reading JoeyNMT's logs (the performance peer): lines as JoeyNMT 2.3.0 writes them."""

import pytest

from tests.helpers import load_script

joeynmt_logs = load_script("scripts/peers/joeynmt_logs.py")
TrainLog, decoding_seconds = joeynmt_logs.TrainLog, joeynmt_logs.decoding_seconds

T = "2026-11-22 01:{}"  # minute:second,millis


def line(minute_second: str, logger: str, message: str) -> str:
    return f"{T.format(minute_second)} - INFO - joeynmt.{logger} - {message}"


def progress(minute_second: str, step: int, tokens_per_sec: int) -> str:
    """A progress line in JoeyNMT's format (training.py, _log_scores)."""
    message = (
        "Epoch %3d, Step: %8d, Batch Loss: %12.6f, Batch Acc: %.6f, Tokens per Sec: %8.0f, Lr: %.6f"
    )
    return line(minute_second, "training", message % (1, step, 5.0, 0.1, tokens_per_sec, 1e-4))


TRAIN_LOG = "\n".join(
    [
        line("00:00,000", "training", "Train stats:"),
        line("00:10,000", "training", "EPOCH 1"),
        progress("01:10,000", 50, 735),
        progress("02:10,000", 100, 810),
        line("02:10,001", "prediction", "Predicting 1014 example(s)... (Greedy decoding)"),
        line("03:40,000", "prediction", "Generation took 89.9990[sec]."),
        line(
            "03:40,100",
            "prediction",
            "Evaluation result (greedy): bleu:  12.50, loss:   4.03, "
            "ppl:  56.01, acc:   0.30, 0.0838[sec]",
        ),
        line("03:50,001", "training", "\tHypothesis: A man ."),
        progress("04:50,000", 150, 830),
        "a continuation line without a time stamp",
    ]
)


def test_the_training_clock_starts_at_epoch_1_and_stops_during_validation():
    log = TrainLog.parse(TRAIN_LOG)
    # 10 s .. 130 s of training, the validation from 130.001 s to its last line at 230.001 s
    assert log.val_curve == [{"step": 100, "seconds": pytest.approx(120.001), "bleu": 12.5}]
    assert log.paused == pytest.approx(100.0)
    end = log.start + 280.0  # the time of the step-150 line
    assert log.training_seconds(end) == pytest.approx(280.0 - 100.0)


def test_a_running_validation_pauses_the_clock():
    log = TrainLog.parse("\n".join(TRAIN_LOG.splitlines()[:6]))
    assert log.validating_since is not None
    assert log.training_seconds(log.start + 10_000) == pytest.approx(120.001)


def test_tokens_per_second_is_the_median_after_the_first_interval():
    assert TrainLog.parse(TRAIN_LOG).summary()["tgt_tokens_per_s"] == 820.0


def test_a_log_without_progress_lines_is_an_error():
    with pytest.raises(ValueError, match="no training progress"):
        TrainLog.parse(TRAIN_LOG.splitlines()[1]).summary()


def test_decoding_seconds_of_the_test_set_not_the_dev_set():
    test_log = "\n".join(
        [
            line("00:00,000", "prediction", "Predicting 1014 example(s)... (Beam search)"),
            line("01:00,000", "prediction", "Generation took 60.0000[sec]."),
            line("01:01,000", "prediction", "Predicting 1000 example(s)... (Beam search)"),
            line("01:50,000", "prediction", "Generation took 48.5000[sec]."),
        ]
    )
    assert decoding_seconds(test_log, 1000) == 48.5
    with pytest.raises(ValueError, match="no generation time"):
        decoding_seconds(test_log, 7)
