"""Run the fuzzing harnesses for a bounded time each: ``python -m fuzz.run --seconds N [HARNESS ...]``.

Each harness runs in its own process (:mod:`fuzz.worker`, atheris over
libFuzzer) for ``--seconds``, from its seed corpus (``fuzz/corpus/<harness>``)
and what earlier runs kept (``--corpus``, a directory per harness; a
temporary one by default).  An input that breaks a decoder's contract -- an
exception, a run of more than ``--timeout`` seconds, more than
``--rss-limit-mb`` of memory -- is saved to ``--crashes`` (default
``fuzz-crashes/``) and reported with its bytes in hex and the traceback; the
exit status is 1 when any harness crashed.

``python -m fuzz.run --reproduce HARNESS FILE ...`` runs saved inputs once,
in this process, and prints what they raise (the first step of a fix; then
the input goes to ``fuzz/regressions/<harness>/``, see docs/fuzzing.md).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "fuzz" / "corpus"
REGRESSIONS = ROOT / "fuzz" / "regressions"
#: libFuzzer's names of what it saves: an exception (crash), a slow input, memory, a leak
ARTIFACT_KINDS = ("crash", "timeout", "oom", "leak", "slow-unit")
#: allowance for starting a worker (imports under instrumentation) beyond its fuzzing time
STARTUP_SECONDS = 120


@dataclass
class Outcome:
    """What one harness's run came to."""

    harness: str
    seconds: int
    returncode: int | None            # None: the worker had to be killed (it outlived its time)
    runs: int | None                  # inputs tried, from libFuzzer's final statistics
    artifacts: list[Path] = field(default_factory=list)
    log: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.artifacts) or self.returncode != 0

    def report(self, hex_limit: int = 512) -> str:
        runs = "?" if self.runs is None else f"{self.runs:,}"
        if not self.failed:
            return f"{self.harness}: {runs} inputs in {self.seconds} s, no crash"
        lines = [f"{self.harness}: FAILED after {runs} inputs (exit status {self.returncode})"]
        for path in self.artifacts:
            data = path.read_bytes()
            shown = data[:hex_limit].hex(" ") + (" ..." if len(data) > hex_limit else "")
            lines += [f"  {_kind(path)}: {len(data)} bytes saved to {path}",
                      f"  input (hex): {shown}"]
        lines += ["  worker output (end):", *("    " + line for line in _tail(self.log))]
        return "\n".join(lines)


def _kind(path: Path) -> str:
    for kind in ARTIFACT_KINDS:
        if f"-{kind}-" in path.name or path.name.startswith(f"{kind}-"):
            return kind
    return "artifact"


def _tail(log: str, lines: int = 40) -> list[str]:
    """The end of a worker's output, from the Python traceback on when there is one."""
    text = log.splitlines()
    for marker in ("=== Uncaught Python exception: ===", "ERROR: libFuzzer"):
        for index, line in enumerate(text):
            if marker in line:
                return text[index:index + lines]
    return text[-lines:]


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def fuzz(harness: str, seconds: int, crashes: Path, *, corpus: Path | None = None, timeout: int = 10,
         rss_limit_mb: int = 2048, options: tuple[str, ...] = ()) -> Outcome:
    """Run ``harness`` for ``seconds`` in a worker process; what it came to."""
    crashes.mkdir(parents=True, exist_ok=True)
    prefix = f"{harness}-"
    before = set(crashes.glob(prefix + "*"))
    with tempfile.TemporaryDirectory(prefix=f"fuzz-{harness}-") as scratch:
        work = corpus / harness if corpus is not None else Path(scratch) / "corpus"
        work.mkdir(parents=True, exist_ok=True)
        seeds = CORPUS / harness
        command = [sys.executable, "-m", "fuzz.worker", harness, f"-max_total_time={seconds}",
                   f"-timeout={timeout}", f"-rss_limit_mb={rss_limit_mb}", f"-artifact_prefix={crashes}/{prefix}",
                   "-print_final_stats=1", *options, str(work)] + ([str(seeds)] if seeds.is_dir() else [])
        log_path = Path(scratch) / "log"
        with open(log_path, "wb") as log_file:
            worker = subprocess.Popen(command, cwd=ROOT, env=_environment(), stdin=subprocess.DEVNULL,
                                      stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                returncode: int | None = worker.wait(seconds + timeout + STARTUP_SECONDS)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, 9)
                worker.wait()
                returncode = None
        log = log_path.read_text(errors="replace")
    runs = re.findall(r"stat::number_of_executed_units:\s*(\d+)", log)
    artifacts = sorted(set(crashes.glob(prefix + "*")) - before)
    return Outcome(harness, seconds, returncode, int(runs[-1]) if runs else None, artifacts, log)


def reproduce(harness: str, paths: list[Path]) -> bool:
    """Run each saved input through ``harness`` once, here; True when none raised."""
    from fuzz import harnesses

    module = harnesses.load(harness)
    clean = True
    for path in paths:
        try:
            module.one_input(path.read_bytes())
        except BaseException:       # noqa: B902 -- whatever it is, it is the finding to show
            clean = False
            print(f"{path}: raised", file=sys.stderr)
            traceback.print_exc()
        else:
            print(f"{path}: no failure")
    return clean


def main(argv: list[str] | None = None) -> int:
    from fuzz import harnesses

    parser = argparse.ArgumentParser(prog="python -m fuzz.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("harness", nargs="*", help=f"harnesses to run (default: all of {', '.join(harnesses.names())})")
    parser.add_argument("--seconds", type=int, default=60, help="fuzzing time per harness (default 60)")
    parser.add_argument("--timeout", type=int, default=10, help="seconds one input may take (default 10)")
    parser.add_argument("--rss-limit-mb", type=int, default=2048, help="memory a worker may use (default 2048)")
    parser.add_argument("--crashes", type=Path, default=Path("fuzz-crashes"), help="where failing inputs go")
    parser.add_argument("--corpus", type=Path, help="keep what the fuzzer learns in DIR/<harness> across runs")
    parser.add_argument("--reproduce", nargs="+", metavar="FILE", type=Path,
                        help="run these saved inputs once through the one harness named")
    args = parser.parse_args(argv)
    if args.reproduce:
        if len(args.harness) != 1:
            parser.error("--reproduce takes exactly one harness")
        return 0 if reproduce(args.harness[0], args.reproduce) else 1
    chosen = args.harness or harnesses.names()
    unknown = sorted(set(chosen) - set(harnesses.names()))
    if unknown:
        parser.error(f"no harness {', '.join(unknown)}; there are: {', '.join(harnesses.names())}")
    failed = 0
    for name in chosen:
        outcome = fuzz(name, args.seconds, args.crashes.resolve(), corpus=args.corpus, timeout=args.timeout,
                       rss_limit_mb=args.rss_limit_mb)
        print(outcome.report(), flush=True)
        failed += outcome.failed
    print(f"fuzzing: {failed} of {len(chosen)} harnesses failed" if failed else
          f"fuzzing: {len(chosen)} harnesses, no crash")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
