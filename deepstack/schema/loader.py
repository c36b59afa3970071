"""Reading schema files (TOML, YAML, JSON) and turning validation failures into one-line user errors."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from deepstack.errors import UserInputError

T = TypeVar("T", bound=BaseModel)
SUFFIXES = (".toml", ".yaml", ".yml", ".json")
MAX_FILE_BYTES = 16 * 1024 * 1024  # no schema file is anywhere near this; refuse rather than hang


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML loader that rejects duplicate keys (PyYAML silently keeps the last one)."""


def _unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if not isinstance(key, str | int | float | bool) and key is not None:
            line = key_node.start_mark.line + 1
            raise UserInputError(f"keys must be plain names, got a {type(key).__name__} (line {line})")
        if key in seen:
            raise UserInputError(f"duplicate key {key!r} (line {key_node.start_mark.line + 1})")
        seen[key] = loader.construct_object(value_node, deep=deep)
    return seen


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise UserInputError(f"duplicate key {key!r}")
        out[key] = value
    return out


def read_file(path: str | Path) -> dict:
    """Parse a TOML, YAML or JSON file into a mapping; any failure is a one-line ``UserInputError``."""
    path = Path(path)
    if path.is_dir():
        raise UserInputError(f"{path}: is a folder; give a schema file ({', '.join(SUFFIXES)}) in it")
    if path.suffix.lower() not in SUFFIXES:
        raise UserInputError(f"{path}: unsupported file type {path.suffix!r}; allowed: {', '.join(SUFFIXES)}")
    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise UserInputError(f"{path}: file larger than {MAX_FILE_BYTES} bytes")
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserInputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserInputError(f"{path}: cannot read file ({exc.__class__.__name__})") from None
    try:
        if path.suffix.lower() == ".toml":
            data = tomllib.loads(text)  # TOML itself forbids duplicate keys
        elif path.suffix.lower() == ".json":
            data = json.loads(text, object_pairs_hook=_unique_pairs)
        else:
            data = yaml.load(text, Loader=_UniqueKeyLoader)
    except UserInputError as exc:
        raise UserInputError(f"{path}: {exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserInputError(f"{path}: malformed TOML file: {_toml_problem(exc, text)}") from None
    except (json.JSONDecodeError, yaml.YAMLError, ValueError, RecursionError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise UserInputError(f"{path}: malformed {path.suffix.lstrip('.').upper()} file: {first}") from None
    if not isinstance(data, dict):
        raise UserInputError(f"{path}: the top level must be a table of keys, got {type(data).__name__}")
    return data


def _toml_problem(exc: tomllib.TOMLDecodeError, text: str) -> str:
    """tomllib says "Cannot overwrite a value (at line 3, column 7)"; name the key instead."""
    message = str(exc).strip().splitlines()[0]
    match = re.search(r"at line (\d+)", message)
    if match and ("overwrite" in message or "declare" in message):
        line = text.splitlines()[int(match.group(1)) - 1]
        key = line.split("=", 1)[0].strip().strip("[]").strip()
        return f"duplicate key {key!r} (line {match.group(1)})"
    return message


def _allowed_keys(cls: type[BaseModel], loc: tuple) -> list[str] | None:
    """Field names of the model at ``loc`` (the parent of an unknown key), or None if it cannot be found."""
    current: Any = cls
    for part in loc:
        if not (isinstance(current, type) and issubclass(current, BaseModel)):
            return None
        field = current.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            continue  # list index or union tag: stay on the same model
        annotation = field.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        current = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
    if isinstance(current, type) and issubclass(current, BaseModel):
        return list(current.model_fields)
    return None


SHOWN_ERRORS = 5  # a file's validation errors listed in the one line (the rest are counted)


def describe_validation_error(cls: type[BaseModel], exc: ValidationError) -> str:
    """One line naming each wrong field (up to :data:`SHOWN_ERRORS`, "; "-separated) and what is allowed."""
    # unknown keys first: a misspelt key is usually why a required one is "missing", and the shown ones are capped
    errors = sorted(exc.errors(include_url=False), key=lambda error: error.get("type") != "extra_forbidden")
    parts, listed = [], set()
    for error in errors[:SHOWN_ERRORS]:
        part = _describe_one(cls, error)
        head, _, allowed = part.partition("; allowed: ")
        parts.append(head if allowed in listed else part)  # each list of allowed keys once
        listed.add(allowed)
    shown = "; ".join(parts)
    more = len(errors) - SHOWN_ERRORS
    return shown + (f" (and {more} more error{'s' * (more > 1)})" if more > 0 else "")


def _describe_one(cls: type[BaseModel], error: dict) -> str:
    loc = tuple(error.get("loc", ()))
    where = ".".join(str(p) for p in loc if not (isinstance(p, str) and p in ("3d-stacked", "hbm")))
    message = error.get("msg", "invalid").removeprefix("Value error, ").removeprefix("Assertion failed, ")
    if error.get("type") == "extra_forbidden":
        allowed = _allowed_keys(cls, loc[:-1])
        message = "unknown key" + (f"; allowed: {', '.join(allowed)}" if allowed else "")
    elif error.get("type") == "missing":
        message = "required key is missing"
    elif "input" in error and error.get("type") not in ("model_type", "dict_type"):
        shown = repr(error["input"])
        if len(shown) < 60 and f"got {shown}" not in message:  # a message that names the value says it once
            message += f" (got {shown})"
    return (f"{where}: " if where else "") + message


def validate(cls: type[T], data: Any, origin: str = "") -> T:
    """Validate ``data`` into ``cls``; failures become a one-line ``UserInputError`` prefixed by ``origin``."""
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        prefix = f"{origin}: " if origin else ""
        raise UserInputError(prefix + describe_validation_error(cls, exc)) from None
    except RecursionError:
        raise UserInputError(f"{origin}: input nested too deeply") from None


def build_scenario(model: str, phase: str, batch: int, input_len: int = 1024, output_len: int = 1024,
                   precision: str | None = None, origin: str = "scenario", assumptions: str = "default"):
    """A validated :class:`Scenario` from names and numbers (the CLI's flags, a space's axes, a study's
    parameters); ``precision`` None keeps the model's default. Errors name ``origin``."""
    from deepstack.schema.scenario import Scenario

    data = {"model": model, "phase": phase, "batch": batch, "input_len": input_len, "output_len": output_len,
            "assumptions": assumptions}
    if precision:
        data["precision"] = precision
    return validate(Scenario, data, origin=origin)
