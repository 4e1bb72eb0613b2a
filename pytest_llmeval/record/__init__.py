"""Run records: run directories, hashes, environment records, baselines and summaries."""

from pytest_llmeval.record._compare import RunRecord, compare_runs, format_comparison, load_run
from pytest_llmeval.record._env import (
    describe_drift,
    drift_fingerprint,
    environment_record,
    git_info,
    library_versions,
)
from pytest_llmeval.record._hash import HashCache, file_sha256, model_fingerprint, stable_hash
from pytest_llmeval.record._junit import compact_properties, present_report, wrong_answer
from pytest_llmeval.record._report import prepare_report, render_report, write_report
from pytest_llmeval.record._resume import (
    data_files,
    resume_key,
    resume_settings,
    run_identity,
    same_content,
    tokenizer_digest,
)
from pytest_llmeval.record._rundir import (
    CONFIG,
    MARKDOWN,
    SUMMARY,
    RequestChunks,
    RunDir,
    mark_superseded,
    new_run_dir,
    output_file,
    resumable_chunks,
    resumable_items,
    run_state,
    strip_timing,
    write_json_atomic,
)
from pytest_llmeval.record._summary import (
    append_github_step_summary,
    decoding_lines,
    floor_source_text,
    markdown_summary,
    prompt_lines,
)
from pytest_llmeval.record._taskconfig import config_hash, prompt_hash, task_config

__all__ = [
    "CONFIG",
    "MARKDOWN",
    "SUMMARY",
    "HashCache",
    "RequestChunks",
    "RunDir",
    "RunRecord",
    "append_github_step_summary",
    "compact_properties",
    "compare_runs",
    "config_hash",
    "data_files",
    "decoding_lines",
    "describe_drift",
    "drift_fingerprint",
    "environment_record",
    "file_sha256",
    "floor_source_text",
    "format_comparison",
    "git_info",
    "library_versions",
    "load_run",
    "mark_superseded",
    "markdown_summary",
    "model_fingerprint",
    "new_run_dir",
    "output_file",
    "prepare_report",
    "present_report",
    "prompt_hash",
    "prompt_lines",
    "render_report",
    "resumable_chunks",
    "resumable_items",
    "resume_key",
    "resume_settings",
    "run_identity",
    "run_state",
    "same_content",
    "stable_hash",
    "strip_timing",
    "task_config",
    "tokenizer_digest",
    "write_json_atomic",
    "write_report",
    "wrong_answer",
]
