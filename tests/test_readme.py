"""The README's Quickstart, run as a newcomer runs it: its Python blocks verbatim, in a new folder,
twice. Each block that starts with ``# <file>.py`` is that file, so the README cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

from kernelarena.data import TraceSet
from tests.cli_process import python

README = Path(__file__).parents[1] / "README.md"


def quickstart_files() -> dict[str, str]:
    """``{file name: source}`` of the Quickstart's Python blocks that name their file."""
    section = README.read_text(encoding="utf-8").split("\n## Quickstart\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    files = {}
    for block in re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL):
        named = re.fullmatch(r"# (\w+\.py)", block.splitlines()[0])
        if named:
            files[named.group(1)] = block
    return files


def test_the_quickstart_works_verbatim_twice(tmp_path: Path) -> None:
    files = quickstart_files()
    assert set(files) == {"define.py", "my_kernels.py", "run.py"}, sorted(files)
    for name, source in files.items():
        (tmp_path / name).write_text(source, encoding="utf-8")
    for attempt in (1, 2):  # setting up again is harmless; a second run adds a second trace
        for script in ("define.py", "run.py"):
            done = python(script, tmp_path)
            assert done.returncode == 0, f"{script}, run {attempt}:\n{done.stdout}{done.stderr}"
        assert "rmsnorm_h4096_mine PASSED" in done.stdout, done.stdout + done.stderr
        dataset = TraceSet.load(tmp_path / "my-dataset", strict=True)  # valid: raises otherwise
        assert [w.uuid for w in dataset.workloads["rmsnorm_h4096"]] == ["b64"]
        passed = [t for t in dataset.traces["rmsnorm_h4096"] if t.passed]
        assert {t.solution for t in passed} == {"rmsnorm_h4096_mine"}
        assert len(dataset.traces["rmsnorm_h4096"]) == attempt
