"""The shipped benchmark suite: YAML task specs, collected by the llmeval plugin.

In the repository this folder is ``benchmarks/``; installed, it is the package
``pytest_llmeval.suite`` (pyproject.toml maps one to the other), so the suite runs from any
folder with ``pytest --pyargs pytest_llmeval.suite --llm-model=PATH --llm-data-dir=DATA``.
Only the specs, the suite's own test modules and their snapshots live here; the data stays
outside (``--llm-data-dir``, ``LLMEVAL_DATA_DIR``).
"""
