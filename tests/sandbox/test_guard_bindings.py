"""The guard decides with what it bound before program code ran.

A program reaches the bootstrap module's globals through its frames (``sys._getframe(1)``
is the bootstrap's ``main``) and can replace any builtin: the guard's call-time code must
read neither.
"""

from __future__ import annotations

import dis
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_llmeval.sandbox import _bootstrap, run_program

# The functions that build the guard's audit hook: what runs when an event is audited is
# the code nested in them.
GUARD_BUILDERS = ("_make_policy", "_refuser", "_path_resolver", "_path_checks", "_signal_check")


def nested_code(code: types.CodeType) -> Iterator[types.CodeType]:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield const
            yield from nested_code(const)


@pytest.mark.parametrize("builder", GUARD_BUILDERS)
def test_the_guard_looks_up_no_global_or_builtin_when_called(builder: str) -> None:
    functions = list(nested_code(getattr(_bootstrap, builder).__code__))
    assert functions, f"{builder} defines no function"
    lookups = {
        f"{code.co_name}: {instruction.argval}"
        for code in functions
        for instruction in dis.get_instructions(code)
        if instruction.opname in ("LOAD_GLOBAL", "LOAD_NAME")
    }
    assert not lookups, f"bind these in {builder}, before program code runs: {sorted(lookups)}"


# Empties every table of the bootstrap (rebinding the names; clearing what is mutable).
REBIND_THE_TABLES = (
    "import sys, types\n"
    "frame, rebound = sys._getframe(), []\n"
    "while frame is not None:\n"
    "    g = frame.f_globals\n"
    "    if '_make_policy' in g:\n"
    "        for name, value in list(g.items()):\n"
    "            if isinstance(value, dict) and name.startswith('_'):\n"
    "                value.clear()\n"
    "            if isinstance(value, (frozenset, tuple, dict, types.MappingProxyType)):\n"
    "                g[name] = {} if isinstance(value, types.MappingProxyType) else type(value)()\n"
    "                rebound.append(name)\n"
    "        g['_AF_UNIX'], g['_WRITE_FLAGS'] = 2, 0\n"
    "    frame = frame.f_back\n"
    "print('rebound', len(rebound))\n"
)


def test_rebinding_the_bootstrap_tables_does_not_allow_processes() -> None:
    code = REBIND_THE_TABLES + "import os\nos.system('echo spawned')\n"
    result = run_program(code, timeout_s=5.0)
    assert result.stdout.startswith("rebound ") and result.stdout != "rebound 0\n", result
    assert "spawned" not in result.stdout
    assert result.status == "failed"
    assert "sandbox refused os.system" in result.reason


def test_rebinding_the_bootstrap_tables_does_not_allow_removing_files(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    outside = tmp_path / "sentinel.txt"
    outside.write_text("keep me\n")
    code = REBIND_THE_TABLES + f"import os\nos.remove({str(outside)!r})\n"
    result = run_program(code, timeout_s=5.0)
    assert result.status == "failed"
    assert "sandbox refused os.remove" in result.reason
    assert outside.read_text() == "keep me\n"
