"""``kernelarena.build``, compile/'s name before issue 38, stays an alias for one release: every way
of importing it gives compile/'s own modules, and the first import warns once, at the importing
line. Run in a new process, where nothing has imported either name yet."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.cli_process import python

SCRIPT = textwrap.dedent(
    """
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import kernelarena.build.cuda
        from kernelarena.build import BuildError, build_solution
        from kernelarena.build.cache import cache_root
        import kernelarena.build

    import kernelarena.compile

    assert kernelarena.build is kernelarena.compile
    assert kernelarena.build.cuda is kernelarena.compile.cuda
    assert kernelarena.compile.cuda.__spec__.name == "kernelarena.compile.cuda"
    assert BuildError is kernelarena.compile.BuildError
    assert build_solution is kernelarena.compile.build_solution
    assert cache_root is kernelarena.compile.cache.cache_root
    for warning in caught:
        print(warning.category.__name__, warning.filename, warning.lineno, warning.message)
    """
)


def test_the_old_name_is_compile_itself_and_warns_once(tmp_path: Path) -> None:
    script = tmp_path / "old_name.py"
    script.write_text(SCRIPT)
    result = python(str(script), cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr
    # The first import statement of the script is on line 6 (the text opens with a blank line).
    assert result.stdout.splitlines() == [
        f"DeprecationWarning {script} 6 kernelarena.build is now kernelarena.compile; "
        "the old name goes in the next release"
    ]
