"""Measurement tools run by hand from a clone (``python -m tools.parity``, ``tools.speed``,
...): the parity harness and speed benchmark against lm-evaluation-harness, profiles, the
report's size budget, the GPU checks, the planted-contamination experiment. Not part of
the installed package, never imported by the plugin; the tests in ``tests/tools/`` import
them."""
