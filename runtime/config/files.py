"""Reading the ``train`` configuration: YAML files and ``--set`` overrides into a ``TrainConfig``.

``load_config`` turns any problem into one ``ConfigFileError`` whose message names the file and
each bad field (``rollout.temperature: must be > 0 (got -1)``). The YAML is read by
``safe_yaml``: no document nested too deep, no alias bomb, no key given twice. Old key names
(``RENAMED_KEYS``) still load, with one deprecation line each.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from reserve_occupy.trace import MAX_JSON_DEPTH

from .schema import TrainConfig


class ConfigFileError(ValueError):
    """The config file is unreadable or invalid; the message is meant for the user as is."""


# Old key -> its name now. An old key still loads (a user's YAML keeps working), with one
# deprecation line each; a section that gives both names is refused.
RENAMED_KEYS: dict[str, str] = {
    "staleness.eta": "staleness.max_staleness",  # the core's Config.max_staleness
    "trainer.min_chunk_units": "trainer.chunk_groups",  # the simulator's cost.train.chunk_groups
    "run.checkpoint_every": "run.save_model_every",  # writes checkpoint-N/, a model directory
    "recovery.checkpoint_every": "recovery.commit_every",  # commits checkpoints/step-N/
}


def _deprecated(old: str, new: str, where: str) -> str:
    return f"{where}: {old} is deprecated, use {new} (the same setting)"


def _rename_keys(data: dict[str, Any], source: str, warn: Callable[[str], None]) -> None:
    """Move the old keys of ``data`` (a config file's mapping) to their names now, in place."""
    for old, new in RENAMED_KEYS.items():
        section, old_leaf = old.split(".")
        new_leaf = new.split(".")[1]
        node = data.get(section)
        if not isinstance(node, dict) or old_leaf not in node:
            continue
        if new_leaf in node:
            raise ConfigFileError(f"{source}: {old} and {new} are one setting (the first is its "
                                  f"old name): give only {new}")
        node[new_leaf] = node.pop(old_leaf)
        warn(_deprecated(old, new, source))


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def _describe(exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        got = (f" (got {err['input']!r})" if err["type"] not in ("extra_forbidden", "missing")
               and not isinstance(err["input"], dict) else "")
        lines.append(f"  {where}: {msg}{got}")
    return lines


MAX_CONFIG_BYTES = 16 << 20  # a config file (or a run's config.json) read by load_config


MAX_YAML_VALUES = 1_000_000  # values a config may stand for once its aliases are expanded


def safe_yaml(text: str) -> Any:
    """``yaml.safe_load``, refusing with ``ValueError`` a document nested deeper than
    ``MAX_JSON_DEPTH`` levels (PyYAML's composer recurses: 1,000 levels are a
    ``RecursionError``; the depth is counted on the parser's events, which it produces without
    recursing), and one whose aliases expand it past ``MAX_YAML_VALUES`` values, past that
    depth, or into itself. PyYAML shares an aliased node rather than copying it, so nine
    lines of ``&a [*b, *b, ...]`` load at once -- and then the run's ``config.json``, which
    writes every copy out, takes gigabytes ("billion laughs")."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            depth += 1
            if depth > MAX_JSON_DEPTH:
                raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
        elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            depth -= 1
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    if root is not None:
        _check_expansion(root)
        _check_duplicates(root)
    return yaml.safe_load(text)


def _check_duplicates(root: yaml.Node) -> None:
    """A key given twice in one mapping (a setting, or a whole section) raises ``ValueError``
    naming the key and both lines: PyYAML keeps the last one without a word, so a second
    ``run:`` section silently dropped every setting of the first. Keys are compared as
    YAML reads them (tag and text: ``1`` and ``"1"`` differ, as they load)."""
    seen_nodes: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen_nodes:  # an alias: checked where it was defined
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            first: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                stack.extend((key, value))
                if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                    continue
                line = key.start_mark.line + 1
                if (key.tag, key.value) in first:
                    raise ValueError(f"the key {key.value!r} is given twice (lines "
                                     f"{first[key.tag, key.value]} and {line}); give it once")
                first[key.tag, key.value] = line


def _check_expansion(root: yaml.Node) -> None:
    """The values and depth ``root`` stands for with every alias expanded, counted once per
    node (memoised by identity, iteratively: an alias chain is as long as the file allows)."""
    done: dict[int, tuple[int, int]] = {}  # id(node) -> (values, depth), values capped
    open_: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in done:
            continue
        kids: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            kids = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            kids = [n for pair in node.value for n in pair]
        if not children_done:
            open_.add(id(node))
            stack.append((node, True))
            for kid in kids:
                if id(kid) in open_:
                    raise ValueError("a YAML alias refers to a value that contains it")
                if id(kid) not in done:
                    stack.append((kid, False))
            continue
        open_.discard(id(node))
        values = 1 + sum(done[id(k)][0] for k in kids)
        deep = (1 if kids or isinstance(node, yaml.CollectionNode) else 0) + max(
            (done[id(k)][1] for k in kids), default=0)
        if values > MAX_YAML_VALUES:
            raise ValueError(f"its aliases expand it to more than {MAX_YAML_VALUES:,} values")
        if deep > MAX_JSON_DEPTH:
            raise ValueError(f"its aliases nest it deeper than {MAX_JSON_DEPTH} levels")
        done[id(node)] = (values, deep)


def load_config(path: str | Path | None = None,
                overrides: dict[str, Any] | None = None,
                warn: Callable[[str], None] = _stderr) -> TrainConfig:
    """Read and validate ``path`` (None: the embedded default), then apply dotted
    ``overrides`` such as ``{"run.steps": 5}``. An old key name (``RENAMED_KEYS``), in the
    file or an override, is read as its new one and ``warn`` gets one line for it."""
    data: dict[str, Any] = {}
    source = "the embedded default"
    if path is not None:
        source = str(path)
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigFileError(f"{source}: cannot read the config file "
                                  f"({exc.strerror or exc})") from None
        if len(raw) > MAX_CONFIG_BYTES:
            raise ConfigFileError(f"{source}: larger than {MAX_CONFIG_BYTES >> 20} MiB: not a "
                                  f"config file")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigFileError(f"{source}: not a UTF-8 text file (byte {exc.start}: "
                                  f"{exc.reason})") from None
        try:
            loaded = safe_yaml(text)
        except yaml.YAMLError as exc:
            raise ConfigFileError(f"{source}: not valid YAML: {exc}") from None
        except ValueError as exc:
            raise ConfigFileError(f"{source}: {exc}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigFileError(f"{source}: the top level must be a mapping of sections, "
                                  f"got {type(loaded).__name__}")
        data = loaded or {}
        _rename_keys(data, source, warn)
    for dotted, value in (overrides or {}).items():
        if dotted in RENAMED_KEYS:
            warn(_deprecated(dotted, RENAMED_KEYS[dotted], "override"))
            dotted = RENAMED_KEYS[dotted]
        node = data
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ConfigFileError(f"override {dotted}: {key} is not a section")
        if not isinstance(node, dict):
            raise ConfigFileError(f"override {dotted}: {'.'.join(parents)} is not a section")
        node[leaf] = value
    try:
        cfg = TrainConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigFileError(
            "\n".join([f"{source}: invalid configuration:", *_describe(exc)])) from None
    _check_texts(cfg, source)
    return cfg


# Settings that name a path, and settings that name a field, a module or a cluster: an empty
# one never means "none" (``null`` does) -- run.output_dir '' wrote into the current directory.
PATH_SETTINGS = ("model.path", "data.path", "run.output_dir")
NAME_SETTINGS = ("data.prompt_field", "data.answer_field", "reward.name", "ray.address")


def _check_texts(cfg: TrainConfig, source: str) -> None:
    """Every path setting's text as ``inputs.path_text`` checks it (not empty, no NUL byte,
    not longer than a path can be), every name setting not empty: ``ConfigFileError``."""
    from ..inputs import InputError, name_text, path_text

    for dotted in (*PATH_SETTINGS, *NAME_SETTINGS):
        section, leaf = dotted.split(".")
        value = getattr(getattr(cfg, section), leaf)
        if value is None:
            continue
        try:
            (path_text if dotted in PATH_SETTINGS else name_text)(value, dotted)
        except InputError as exc:
            raise ConfigFileError(f"{source}: invalid configuration: {exc}") from None


def parse_override(item: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--set`` (VALUE read as YAML) -> (key, value), or a one-line
    ``ConfigFileError`` naming the option."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ConfigFileError(f"--set expects KEY=VALUE, got {item!r}")
    if not value.strip():  # YAML reads '' as null: data.path= silently meant the demo data
        raise ConfigFileError(f"--set {key.strip()}=: the value is empty (write "
                              f"{key.strip()}=null for no value, or {key.strip()}=\"\" for "
                              f"an empty string)")
    try:
        return key.strip(), safe_yaml(value)
    except yaml.YAMLError as exc:
        detail = " ".join(str(exc).split())
        raise ConfigFileError(f"--set {item}: the value is not valid YAML ({detail})") from None
    except ValueError as exc:
        raise ConfigFileError(f"--set {key.strip()}: {exc}") from None

