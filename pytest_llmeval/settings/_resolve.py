"""Resolve the settings of one run from where they are given, lowest first:

1. the defaults (:data:`~._schema.SETTINGS`);
2. the ``[tool.llmeval]`` tables of ``pyproject.toml``;
3. the ini file's ``llm_set`` lines (``SECTION.KEY=VALUE``, for projects without a
   ``pyproject.toml``);
4. the profiles the run names (``--llm-profile``), in the order named: a profile is a
   named set of settings, ``[tool.llmeval.profile.NAME]`` (a model's prompt shaping, a
   gate policy, a cluster's engine settings);
5. ``--llm-set SECTION.KEY=VALUE`` on the command line, for a one-off.

Every value is parsed where it is given, so that a bad one is named with its file or
option even when a later place overrides it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._schema import BY_NAME, SECTIONS, SettingError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[import-not-found, unused-ignore]

PROFILE = "profile"
DEFAULT = "default"


@dataclass(frozen=True)
class Layer:
    """Settings given in one place: ``values`` maps a setting's dotted name to its parsed
    value; ``profiles`` holds the profiles defined there (name -> their settings)."""

    where: str
    values: dict[str, Any] = field(default_factory=dict)
    profiles: dict[str, dict[str, Any]] = field(default_factory=dict)


def _known(section: str) -> str:
    keys = sorted(s.key for s in BY_NAME.values() if s.section == section)
    return ", ".join(keys)


def _setting_value(name: str, value: Any, where: str) -> tuple[str, Any]:
    setting = BY_NAME.get(name)
    if setting is None:
        section, _, key = name.partition(".")
        if section not in SECTIONS:
            raise SettingError(
                f"{where}: unknown setting {name!r}: no section {section!r} (sections: "
                f"{', '.join(SECTIONS)}; a profile is profile.NAME.SECTION.KEY)"
            )
        raise SettingError(
            f"{where}: unknown setting {name!r}: {section} has no {key!r} (its settings: "
            f"{_known(section)})"
        )
    return name, setting.parse(value, where)


def _flatten(tree: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A TOML tree of settings (``{section: {key: value}}``, profiles under
    ``{"profile": {NAME: {section: {key: value}}}}``) as ``{dotted name: value}``."""
    out: dict[str, Any] = {}
    for section, table in tree.items():
        if not isinstance(table, dict):  # `[tool.llmeval] seed = 1`: not in a section
            if section in SECTIONS or section == PROFILE:
                raise SettingError(f"{where}: {section}: expected a table, got {table!r}")
            _setting_value(section, table, where)  # raises: no such section
        if section == PROFILE:
            for profile, settings in table.items():
                if not isinstance(settings, dict):
                    raise SettingError(
                        f"{where}: profile.{profile}: expected a table of settings "
                        f"([tool.llmeval.profile.{profile}.SECTION])"
                    )
                for name, value in _flatten(settings, where).items():
                    out[f"{PROFILE}.{profile}.{name}"] = value
            continue
        for key, value in table.items():
            out[f"{section}.{key}"] = value
    return out


def _layer(flat: Mapping[str, Any], where: str) -> Layer:
    values: dict[str, Any] = {}
    profiles: dict[str, dict[str, Any]] = {}
    for name, value in flat.items():
        if name.startswith(PROFILE + "."):
            _, _, rest = name.partition(".")
            profile, _, setting = rest.partition(".")
            if not profile or not setting:
                raise SettingError(
                    f"{where}: {name!r}: a profile's setting is profile.NAME.SECTION.KEY"
                )
            here = f"{where} (profile {profile!r})"
            key, parsed = _setting_value(setting, value, here)
            profiles.setdefault(profile, {})[key] = parsed
        else:
            key, parsed = _setting_value(name, value, where)
            values[key] = parsed
    return Layer(where, values, profiles)


def table_layer(table: Mapping[str, Any], where: str) -> Layer:
    """The settings of a ``[tool.llmeval]`` table (already read from TOML)."""
    return _layer(_flatten(table, where), where)


def read_pyproject(path: Path) -> Layer | None:
    """The ``[tool.llmeval]`` table of a ``pyproject.toml`` (None when it has none)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SettingError(f"{path}: cannot read it as TOML: {exc}") from None
    table = data.get("tool", {}).get("llmeval")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise SettingError(f"{path} [tool.llmeval]: expected a table")
    return table_layer(table, f"{path.name} [tool.llmeval]")


def assignment_layer(lines: Iterable[str], where: str) -> Layer:
    """Settings written as ``SECTION.KEY=VALUE`` (``--llm-set``, the ini's ``llm_set``);
    the same setting given twice with different values is refused."""
    flat: dict[str, Any] = {}
    for line in lines:
        text = str(line).strip()
        if not text or text.startswith("#"):
            continue
        name, sep, value = text.partition("=")
        name = name.strip()
        if not sep or "." not in name:
            raise SettingError(
                f"{where}: expected SECTION.KEY=VALUE (e.g. vllm.tensor_parallel=4), got {text!r}"
            )
        value = value.strip()
        if name in flat and flat[name] != value:
            raise SettingError(
                f"{where}: {name} given twice ({flat[name]!r} and {value!r}); give it once"
            )
        flat[name] = value
    return _layer(flat, where)


@dataclass(frozen=True)
class Settings:
    """The settings of one run: each setting's value and where it came from."""

    values: dict[str, Any]
    sources: dict[str, str]
    profiles: tuple[str, ...] = ()

    def __getitem__(self, name: str) -> Any:
        if name in self.values:
            return self.values[name]
        return BY_NAME[name].default

    def source(self, name: str) -> str:
        """Where the value of ``name`` was given (``default`` when nowhere)."""
        return self.sources.get(name, DEFAULT)

    def given(self, name: str) -> bool:
        return name in self.values

    def label(self, name: str) -> str:
        """``name`` with where its value came from, for a message."""
        return f"{name} (from {self.source(name)})" if self.given(name) else name

    def as_record(self) -> dict[str, Any]:
        """The settings given anywhere (not the defaults), with where each came from."""
        return {
            name: {"value": _plain(self.values[name]), "from": self.sources[name]}
            for name in sorted(self.values)
        }


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def resolve(
    layers: Iterable[Layer], profiles: Iterable[str] = (), command_line: Layer | None = None
) -> Settings:
    """The settings from ``layers`` (lowest first), then the named ``profiles`` (defined
    in any layer), then ``command_line``."""
    layers = list(layers)
    defined: dict[str, tuple[str, dict[str, Any]]] = {}
    for layer in [*layers, *([command_line] if command_line else [])]:
        for name, settings in layer.profiles.items():
            where, known = defined.get(name, (layer.where, {}))
            defined[name] = (where, {**known, **settings})
    ordered: list[tuple[str, dict[str, Any]]] = [(layer.where, layer.values) for layer in layers]
    chosen = tuple(profiles)
    for name in chosen:
        if name not in defined:
            names = ", ".join(sorted(defined)) or "none is defined"
            raise SettingError(
                f"--llm-profile {name}: no such profile (defined: {names}); define it as "
                f"[tool.llmeval.profile.{name}] in pyproject.toml"
            )
        ordered.append((f"profile {name!r}", defined[name][1]))
    if command_line is not None:
        ordered.append((command_line.where, command_line.values))
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for where, given in ordered:
        for name, value in given.items():
            values[name] = value
            sources[name] = where
    return Settings(values, sources, chosen)
