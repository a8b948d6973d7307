"""Fuzzing the broker's decoders: one harness module per decoder, a runner, corpora, regressions.

* :mod:`fuzz.harnesses` -- one small module per decoder; each defines
  ``one_input(data: bytes) -> None`` (raises only when the decoder broke its
  contract) and ``seeds() -> list[bytes]`` (valid encodings the fuzzer starts
  from).  A module dropped in there is a harness: nothing else lists them.
* :mod:`fuzz.contract` -- what every harness checks: only the decoder's own
  errors, no internal error logged by an engine, bounded buffering.
* :mod:`fuzz.worker` -- one harness under atheris (coverage-guided, libFuzzer).
* :mod:`fuzz.run` -- every harness for a bounded time, each in its own process;
  crashes reported and their inputs saved.
* ``fuzz/corpus/<harness>/`` -- the seed corpora (``python -m fuzz.seed`` writes them);
  ``fuzz/regressions/<harness>/`` -- every input that once broke a decoder,
  replayed by ``tests/unit/test_fuzzing.py``.

Nothing here imports the broker at import time: :mod:`fuzz.worker` imports a
harness (and with it the decoders) under atheris's instrumentation.
"""
