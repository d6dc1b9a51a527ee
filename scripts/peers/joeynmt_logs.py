"""A peer toolkit trained side by side with minimt: its data files and what its logs say.

joeynmt.sh, beside this script, drives JoeyNMT 2.3.0 in its own virtual environment and runs this
script with minimt's environment to export the verified Multi30k files as the plain text JoeyNMT
reads, to stop JoeyNMT's training after a time budget, and to turn its train/test logs into
`results.json`:

    python scripts/peers/joeynmt_logs.py export URL CACHE_DIR OUT_DIR
    python scripts/peers/joeynmt_logs.py stop-after TRAIN_LOG PID MINUTES OUT_JSON
    python scripts/peers/joeynmt_logs.py results MODEL_DIR TEST_HYPOTHESES REFERENCES OUT_JSON
"""

import argparse
import gzip
import json
import os
import re
import signal
import statistics
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from minimt.data.corpus import read_lines
from minimt.data.multi30k import fetch_multi30k_file
from minimt.metrics import corpus_scores

SPLITS = ("train", "val", "test_2016_flickr")
LANGS = ("de", "en")

_STAMP = r"(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3})"
LOG_LINE = re.compile(_STAMP + r" - ")
TRAIN_LINE = re.compile(r"Step:\s*(?P<step>\d+),.*Tokens per Sec:\s*(?P<tok_s>[\d.]+)")
EPOCH_LINE = re.compile(r" - EPOCH (?P<epoch>\d+)$")
VALID_RESULT = re.compile(r"Evaluation result \(greedy\): bleu:\s*(?P<bleu>[\d.]+)")
PREDICTING = re.compile(r"Predicting (?P<n>\d+) example")
GENERATION = re.compile(r"Generation took (?P<seconds>[\d.]+)\[sec\]")


def export_plain(url: str, cache_dir: str | Path, out_dir: str | Path) -> None:
    """Write <out_dir>/<split>.<lang> (plain UTF-8) from the checksum-verified Multi30k files."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        for lang in LANGS:
            gz = fetch_multi30k_file(url, cache_dir, split, lang)
            (out / f"{split}.{lang}").write_bytes(gzip.decompress(gz.read_bytes()))


def _seconds(stamp: str) -> float:
    return datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()


@dataclass
class TrainLog:
    """What JoeyNMT's train.log says so far, on a clock of training seconds: from the start of
    the first epoch, validations (from "Predicting" to their last line) not counted.

    "Tokens per Sec" is logged per logging interval (target tokens, padding excluded, validation
    time excluded). A validation runs right after the progress line of its step."""

    start: float | None = None
    validating_since: float | None = None
    last_line: float = 0.0
    paused: float = 0.0
    step: int = 0
    rates: list[float] = field(default_factory=list)
    val_curve: list[dict[str, float]] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> "TrainLog":
        found = cls()
        for line in text.splitlines():
            if stamp := LOG_LINE.match(line):
                found.read(_seconds(stamp["time"]), line)
        return found

    def read(self, at: float, line: str) -> None:
        if self.start is None:
            self.start = at if EPOCH_LINE.search(line) else None
            return
        resumes = TRAIN_LINE.search(line) or EPOCH_LINE.search(line)
        if self.validating_since is not None and resumes:
            self.paused += self.last_line - self.validating_since
            self.validating_since = None
        self.last_line = at
        if m := TRAIN_LINE.search(line):
            self.rates.append(float(m["tok_s"]))
            self.step = int(m["step"])
        elif PREDICTING.search(line):
            self.validating_since = at
        elif m := VALID_RESULT.search(line):
            seconds = self.training_seconds(at)
            self.val_curve.append({"step": self.step, "seconds": seconds, "bleu": float(m["bleu"])})

    def training_seconds(self, now: float) -> float:
        """Training seconds at wall-clock time `now` (paused while a validation runs)."""
        if self.start is None:
            return 0.0
        until = now if self.validating_since is None else self.validating_since
        return until - self.start - self.paused

    def summary(self) -> dict:
        """Median tokens/s (the first, warm-up interval dropped) and the val BLEU curve."""
        if not self.rates:
            raise ValueError("no training progress lines in JoeyNMT's train.log")
        return {
            "tgt_tokens_per_s": statistics.median(self.rates[1:] or self.rates),
            "val_curve": self.val_curve,
        }


def decoding_seconds(test_log: str, n_sentences: int) -> float:
    """Seconds JoeyNMT's test run spent generating the set of `n_sentences` sentences."""
    predicting = None
    for line in test_log.splitlines():
        if m := PREDICTING.search(line):
            predicting = int(m["n"])
        elif (m := GENERATION.search(line)) and predicting == n_sentences:
            return float(m["seconds"])
    raise ValueError(f"no generation time for a {n_sentences}-sentence set in JoeyNMT's test.log")


def joeynmt_results(model_dir: Path, hypotheses: Path, references: Path) -> dict:
    """tokens/s, val BLEU curve, beam-5 test BLEU (minimt's sacreBLEU call) and decode speed."""
    hyps, refs = read_lines(hypotheses), read_lines(references)
    seconds = decoding_seconds((model_dir / "test.log").read_text(encoding="utf-8"), len(refs))
    scores = corpus_scores(hyps, refs)
    return TrainLog.parse((model_dir / "train.log").read_text(encoding="utf-8")).summary() | {
        "test_bleu_beam5": scores.bleu,
        "bleu_signature": scores.bleu_signature,
        "beam5_sentences_per_s": len(refs) / seconds,
    }


def stop_after(train_log: Path, pid: int, minutes: float, poll_seconds: float = 2.0) -> dict:
    """Send SIGINT to JoeyNMT's training process `pid` once its train.log shows `minutes` of
    training (validations not counted); returns its peak RSS then. JoeyNMT ends its training
    loop on KeyboardInterrupt, keeping the checkpoints of its validations."""
    status = Path(f"/proc/{pid}/status")
    while status.exists():
        text = train_log.read_text(encoding="utf-8") if train_log.exists() else ""
        if TrainLog.parse(text).training_seconds(time.time()) >= minutes * 60:
            peak_kb = int(re.search(r"VmHWM:\s*(\d+) kB", status.read_text())[1])
            os.kill(pid, signal.SIGINT)
            return {"minutes": minutes, "peak_rss_mb": peak_kb / 1024}
        time.sleep(poll_seconds)
    raise RuntimeError(f"JoeyNMT (pid {pid}) ended within {minutes} minutes: see {train_log}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    export = commands.add_parser("export", help="plain-text Multi30k files for a peer")
    export.add_argument("url")
    export.add_argument("cache_dir")
    export.add_argument("out_dir")
    stop = commands.add_parser("stop-after", help="interrupt JoeyNMT's training after a budget")
    stop.add_argument("train_log", type=Path)
    stop.add_argument("pid", type=int)
    stop.add_argument("minutes", type=float)
    stop.add_argument("out_json", type=Path)
    results = commands.add_parser("results", help="results.json from JoeyNMT's logs")
    results.add_argument("model_dir", type=Path)
    results.add_argument("hypotheses", type=Path)
    results.add_argument("references", type=Path)
    results.add_argument("out_json", type=Path)
    results.add_argument("--merge", type=Path, help="a JSON file whose keys join the results")
    args = parser.parse_args()
    if args.command == "export":
        export_plain(args.url, args.cache_dir, args.out_dir)
    elif args.command == "stop-after":
        args.out_json.write_text(json.dumps(stop_after(args.train_log, args.pid, args.minutes)))
    else:
        found = joeynmt_results(args.model_dir, args.hypotheses, args.references)
        if args.merge:
            found |= json.loads(args.merge.read_text())
        args.out_json.write_text(json.dumps(found, indent=2) + "\n")
        print(json.dumps(found, indent=2))


if __name__ == "__main__":
    main()
