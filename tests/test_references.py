"""Every reference a user reads must be one they can follow: no path of the machine the project
was written on (``/work/...``, ``/tmp/...``, a shared notes folder) and no repository path that
does not exist, in docs/, spec/, configs/, README.md and the docstrings and comments of
reserve_occupy/, runtime/ and proofs/. Public sources are cited by project, file and commit.

The scanner is tested on known-bad text too (``test_the_scanner_finds``), so it cannot pass by
finding nothing.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TEXT_DIRS = ("docs", "spec", "configs")
TEXT_FILES = ("README.md",)
TEXT_SUFFIXES = {".md", ".yaml", ".yml", ".json", ".txt"}
TOOLS = ("reserve_occupy_peers", "reserve_occupy_sim", "reserve_occupy_porting",
         "reserve_occupy_faults")  # beside runtime/ (issue 35)
CODE_DIRS = ("reserve_occupy", *TOOLS, "runtime", "proofs")
TOP = ("docs", "spec", "configs", "tests", "runtime", *TOOLS, "reserve_occupy", "proofs", "bench")

# An absolute path of some machine, or a folder next to the checkout.
MACHINE_PATH = re.compile(r"(?<![\w.:/-])(?:/(?:work|tmp|root|home|Users|mnt|scratch)/[\w.-]+"
                          r"|\.\./shared\b)")
# A repository-relative path: one of the top-level folders, then at least one more part, not the
# tail of a URL or of another project's path.
REPO_PATH = re.compile(r"(?<![\w./@:-])((?:%s)/[\w./*{},-]*[\w*/}])" % "|".join(TOP))
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
GENERATED = ("docs/results/", "docs/img/")  # outputs of make targets; they are committed


def _text_files() -> list[Path]:
    out = [ROOT / name for name in TEXT_FILES]
    for d in TEXT_DIRS:
        out += [p for p in sorted((ROOT / d).rglob("*")) if p.suffix in TEXT_SUFFIXES]
    return [p for p in out if not any(str(p.relative_to(ROOT)).startswith(g)
                                      for g in GENERATED)]


def _code_prose(path: Path) -> str:
    """The comments and string literals of a Python file (docstrings and messages), each on
    its own line number, the rest blanked."""
    source = path.read_text(encoding="utf-8")
    lines = [""] * (source.count("\n") + 2)
    prose = {tokenize.COMMENT, tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", -1)}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type in prose:
            for k, part in enumerate(tok.string.split("\n")):
                lines[tok.start[0] - 1 + k] += " " + part
    return "\n".join(lines)


def _sources() -> list[tuple[str, Path, str]]:
    out = [(str(p.relative_to(ROOT)), p, p.read_text(encoding="utf-8")) for p in _text_files()]
    for d in CODE_DIRS:
        for p in sorted((ROOT / d).rglob("*.py")):
            out.append((str(p.relative_to(ROOT)), p, _code_prose(p)))
    return out


def _is_path(ref: str) -> bool:
    """A file (its last part has an extension) or a folder (a trailing slash); a bare
    ``runtime/version`` is more likely a metric key than a path."""
    if re.search(r"\{[^{},]*\}", ref):
        return False  # an f-string placeholder: known only when the code runs
    return ref.endswith("/") or "." in ref.rsplit("/", 1)[-1].strip(".")


def _exists(ref: str) -> bool:
    ref = ref.rstrip(".,;:")
    braces = re.search(r"\{([^{}]*)\}", ref)
    if braces:  # tests/test_upstream_{areal,verl}.py
        return all(_exists(ref[:braces.start()] + alt + ref[braces.end():])
                   for alt in braces.group(1).split(","))
    if "*" in ref:
        return any(ROOT.glob(ref))
    return (ROOT / ref).exists()


def problems(name: str, path: Path, text: str) -> list[str]:
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in MACHINE_PATH.finditer(line):
            found.append(f"{name}:{number}: machine path {m.group(0)!r}")
        for m in REPO_PATH.finditer(line):
            if _is_path(m.group(1)) and not _exists(m.group(1)):
                found.append(f"{name}:{number}: no such repository path {m.group(1)!r}")
        if path.suffix == ".md":
            for m in MD_LINK.finditer(line):
                target = m.group(1).split("#")[0]
                if not target or re.match(r"[a-z]+:", target):
                    continue  # an anchor in the same file, or a URL
                if not (path.parent / target).exists():
                    found.append(f"{name}:{number}: broken link {m.group(1)!r}")
    return found


def test_every_reference_can_be_followed():
    found = [p for source in _sources() for p in problems(*source)]
    assert not found, "\n".join(found)


def test_the_scan_covers_the_documents_and_the_code():
    names = {name for name, _, _ in _sources()}
    for expected in ("README.md", "docs/simulator.md", "spec/PROTOCOL.md", "configs/demo.yaml",
                     "reserve_occupy_peers/reserve_occupy.py", "reserve_occupy/config.py",
                     "proofs/modelcheck.py"):
        assert expected in names


@pytest.mark.parametrize("text,what", [
    ("see /work/shared/BASELINES.md", "machine path"),
    ("pseudo-code in /tmp/research/baselines.md.", "machine path"),
    ("notes in ../shared/notes.md", "machine path"),
    ("run from /root/project", "machine path"),
    ("as in /home/me/x", "machine path"),
    ("tested by tests/test_demo_config.py", "no such repository path"),
    ("see spec/no-such-file.md.", "no such repository path"),
    ("see tests/integrations/test_x_{areal,nope}.py", "no such repository path"),
    ("all of docs/no-such-folder/", "no such repository path"),
    ("[runtime](no_such_doc.md#x)", "broken link"),
])
def test_the_scanner_finds(text, what):
    found = problems("x.md", ROOT / "docs" / "x.md", text)
    assert found and what in found[0], found


@pytest.mark.parametrize("text", [
    "Source: verl-project/verl @ 1dda039b, ``verl/trainer/ppo/v1/trainer_base.py``",
    "https://github.com/NVIDIA-NeMo/RL/blob/main/docs/guide.md",
    "see spec/PROTOCOL.md and reserve_occupy_peers/ and docs/cli.md.",
    "[cli](cli.md#simulate) and [x](https://example.com/a)",
    "a ratio 3/4 and a/b, and 1/tmp",
    "the metric 'reserve_occupy/in_flight' and tests/integrations/test_upstream_{areal,verl}.py",
])
def test_the_scanner_accepts(text):
    assert problems("x.md", ROOT / "docs" / "x.md", text) == []
