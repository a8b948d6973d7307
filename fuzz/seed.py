"""Write the seed corpora: ``python -m fuzz.seed [HARNESS ...]``.

Each harness's ``seeds()`` (valid encodings) become the files of
``fuzz/corpus/<harness>/``, one per seed, named by a hash of its bytes.  The
directories are kept in the repository; ``tests/unit/test_fuzzing.py``
checks that they are what ``seeds()`` gives now, so rerun this after changing
a harness's seeds or an encoding they depend on.
"""

from __future__ import annotations

import hashlib
import sys

from fuzz.run import CORPUS


def seed_files(harness: str) -> dict[str, bytes]:
    """File name -> content of ``harness``'s seed corpus, as ``seeds()`` gives it now."""
    from fuzz import harnesses

    return {hashlib.sha1(seed).hexdigest()[:16]: seed for seed in harnesses.load(harness).seeds()}


def write(harness: str) -> int:
    """Replace ``fuzz/corpus/<harness>/`` with the harness's seeds; how many there are."""
    directory = CORPUS / harness
    directory.mkdir(parents=True, exist_ok=True)
    files = seed_files(harness)
    for old in directory.iterdir():
        if old.name not in files:
            old.unlink()
    for name, content in files.items():
        (directory / name).write_bytes(content)
    return len(files)


def main(argv: list[str]) -> int:
    from fuzz import harnesses

    for harness in argv or harnesses.names():
        print(f"{harness}: {write(harness)} seeds in {(CORPUS / harness).relative_to(CORPUS.parents[1])}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
