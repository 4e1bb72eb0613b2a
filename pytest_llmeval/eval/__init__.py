"""Evaluation: turning selected items into backend requests and scored item results."""

from pytest_llmeval.eval._run import ItemResult, PreparedItem, TaskRunner

__all__ = ["ItemResult", "PreparedItem", "TaskRunner"]
