"""The README's embedding example runs as printed."""

from __future__ import annotations

import random
import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_embedding_example_runs():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)
    example = next(b for b in blocks if "StalenessController" in b)
    assert len(example.strip().splitlines()) <= 25
    for seed in range(20):
        random.seed(seed)
        scope: dict = {}
        exec(compile(example, str(README), "exec"), scope)
        assert scope["trained"] == 3
        scope["ctl"].check()
