"""One harness under atheris: ``python -m fuzz.worker NAME [libFuzzer options] [corpus directories]``.

The harness -- and with it every ``broker`` module it imports -- is imported
under atheris's instrumentation, so the fuzzer sees which branches of the
decoders an input reached.  Everything after NAME goes to libFuzzer as it
is (``-max_total_time=30``, ``-artifact_prefix=...``, a file to run once);
``-max_len`` defaults to the harness's ``MAX_LEN``.  :mod:`fuzz.run` starts
one worker per harness.
"""

from __future__ import annotations

import sys

import atheris


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit("usage: python -m fuzz.worker HARNESS [libFuzzer options] [corpus directories]")
    name, options = argv[1], argv[2:]
    with atheris.instrument_imports(include=["broker"]):
        from fuzz import harnesses
        harness = harnesses.load(name)
    if not any(option.startswith("-max_len=") for option in options):
        options.insert(0, f"-max_len={harnesses.max_len(harness)}")
    atheris.Setup([argv[0], *options], harness.one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
