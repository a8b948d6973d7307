"""The fuzzing harnesses (fuzz/, docs/fuzzing.md): every regression input replayed, every seed
accepted, every harness fuzzed for a bounded time, and the runner's own reporting.

``DELTAMQ_FUZZ_SECONDS`` is the fuzzing budget of the whole suite, shared by
the harnesses (default 36 s: 3 s each; 0 skips the fuzzing, not the replays).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from fuzz import harnesses
from fuzz.run import CORPUS, REGRESSIONS, STARTUP_SECONDS, Outcome, fuzz, main
from fuzz.seed import seed_files

NAMES = harnesses.names()
BUDGET = int(os.environ.get("DELTAMQ_FUZZ_SECONDS", "36"))
EACH = max(1, BUDGET // max(1, len(NAMES)))
REGRESSION_FILES = sorted(path for path in REGRESSIONS.glob("*/*") if path.is_file())


def test_every_decoder_has_a_harness() -> None:
    assert set(NAMES) >= {"amqp0_9_1_frames", "amqp0_9_1_methods", "amqp0_9_1_fields", "amqp1_0_types",
                          "amqp1_0_frames", "amqp1_0_sections", "sasl_responses", "protocol_header", "selector",
                          "websocket_frames", "sasl_scram", "acl_file"}


@pytest.mark.parametrize("name", NAMES)
def test_the_seed_corpus_in_the_repository_is_the_harness_s_seeds(name: str) -> None:
    kept = {path.name: path.read_bytes() for path in (CORPUS / name).glob("*")}
    assert kept == seed_files(name), f"fuzz/corpus/{name} is stale: run python -m fuzz.seed {name}"


@pytest.mark.parametrize("name", NAMES)
def test_every_seed_passes_its_harness(name: str) -> None:
    harness = harnesses.load(name)
    seeds = harness.seeds()
    assert seeds
    for seed in seeds:
        assert len(seed) <= harnesses.max_len(harness)
        harness.one_input(seed)


@pytest.mark.parametrize("path", REGRESSION_FILES, ids=[f"{p.parent.name}/{p.name}" for p in REGRESSION_FILES])
def test_a_regression_input_no_longer_breaks_its_decoder(path: Path) -> None:
    assert path.parent.name in NAMES, f"{path}: fuzz/regressions/<harness>/ names no harness"
    harnesses.load(path.parent.name).one_input(path.read_bytes())


def _atheris() -> None:
    try:
        import atheris  # noqa: F401
    except ImportError:
        if sys.platform.startswith("linux"):
            pytest.fail("atheris is not installed: pip install -e '.[test]' (make install) installs it")
        pytest.skip("atheris ships wheels for Linux only")


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.timeout(EACH + STARTUP_SECONDS + 60)
def test_fuzzing_finds_no_crash(name: str, tmp_path: Path) -> None:
    if BUDGET <= 0:
        pytest.skip("DELTAMQ_FUZZ_SECONDS=0: no fuzzing")
    _atheris()
    outcome = fuzz(name, EACH, tmp_path / "crashes")
    assert not outcome.failed, outcome.report()
    assert outcome.runs, outcome.log[-3000:]


def _fuzz_the_canary(tmp_path: Path, seed: bytes, **options: Any) -> Outcome:
    """Fuzz tests/unit/fuzz_canary.py from ``seed`` for a few seconds."""
    _atheris()
    canary = "tests.unit.fuzz_canary"
    (tmp_path / "corpus" / canary).mkdir(parents=True)
    (tmp_path / "corpus" / canary / "seed").write_bytes(seed)
    return fuzz(canary, 5, tmp_path / "crashes", corpus=tmp_path / "corpus", **options)


@pytest.mark.timeout(STARTUP_SECONDS + 60)
def test_a_crash_is_reported_with_its_input_saved(tmp_path: Path) -> None:
    outcome = _fuzz_the_canary(tmp_path, b"CRASH\x00\xff")
    assert outcome.failed and len(outcome.artifacts) == 1
    [saved] = outcome.artifacts
    assert saved.read_bytes().startswith(b"CRASH") and saved.parent == tmp_path / "crashes"
    report = outcome.report()
    assert "crash:" in report and "43 52 41 53 48" in report        # the input in hex
    assert "ValueError: the canary fell over" in report              # and the traceback


@pytest.mark.timeout(STARTUP_SECONDS + 60)
def test_an_input_that_hangs_is_reported(tmp_path: Path) -> None:
    outcome = _fuzz_the_canary(tmp_path, b"HANG", timeout=1)
    assert outcome.failed
    assert [path.read_bytes() for path in outcome.artifacts] == [b"HANG"]
    assert "timeout:" in outcome.report()


def test_reproducing_a_saved_input_shows_what_it_raises(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    crash, fine = tmp_path / "crash", tmp_path / "fine"
    crash.write_bytes(b"CRASH!")
    fine.write_bytes(b"fine")
    assert main(["tests.unit.fuzz_canary", "--reproduce", str(fine)]) == 0
    assert main(["tests.unit.fuzz_canary", "--reproduce", str(crash), str(fine)]) == 1
    out = capsys.readouterr()
    assert "ValueError: the canary fell over on 6 bytes" in out.err and f"{fine}: no failure" in out.out


def test_an_unknown_harness_is_named_with_those_there_are(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["no_such_decoder", "--seconds", "1"])
    assert "no harness no_such_decoder; there are: acl_file, amqp0_9_1_fields" in capsys.readouterr().err
