"""core/cli.py: shell completions generated from each command's parser (shtab), checked by the shells
themselves: bash completes sub-commands and options through the generated function, fish through
``complete -C``, and zsh parses the script."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
# per command: a partial word and the sub-commands it completes to; an option of a sub-command
CASES = {"blz": ("se", {"search"}, ["search", "--for"], "--format"),
         "ctx": ("se", {"search", "serve"}, ["search", "x", "--mo"], "--mode"),
         "brk": ("qu", {"query"}, ["query", "--no-"], "--no-date")}


def _script(command: str, shell: str, tmp_path: Path) -> Path:
    r = subprocess.run([str(BIN / command), "completion", shell], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    path = tmp_path / f"{command}.{shell}"
    path.write_text(r.stdout)
    return path


def _need(shell: str) -> str:
    found = shutil.which(shell)
    if found is None:
        pytest.skip(f"{shell} is not installed (make browser installs it, or apt-get install {shell}): its completion script is not checked")
    return found


@pytest.mark.parametrize("command", sorted(CASES))
def test_bash_completes_sub_commands_and_options(command: str, tmp_path: Path) -> None:
    script = _script(command, "bash", tmp_path)
    partial, subs, words, option = CASES[command]

    def complete(*typed: str) -> set[str]:
        line = " ".join((command, *typed))
        program = (f"source {script}\nCOMP_WORDS=({line}); COMP_CWORD={len(typed)}; COMP_LINE='{line}'; "
                   f"COMP_POINT=${{#COMP_LINE}}\n_shtab_{command} {command} {typed[-1]} {command}\n"
                   'printf "%s\\n" "${COMPREPLY[@]}"\n')
        r = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return set(r.stdout.split())

    assert complete(partial) == subs
    assert option in complete(*words)
    assert {"bash", "zsh", "fish"} == complete("completion", "")


@pytest.mark.parametrize("command", sorted(CASES))
def test_fish_completes_sub_commands_and_options(command: str, tmp_path: Path) -> None:
    fish = _need("fish")
    script = _script(command, "fish", tmp_path)
    partial, subs, words, option = CASES[command]

    def complete(line: str) -> set[str]:
        r = subprocess.run([fish, "-c", f"source {script}; complete -C '{line}'"], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        return {row.split("\t")[0] for row in r.stdout.splitlines()}

    assert complete(f"{command} {partial}") == subs
    assert option in complete(" ".join((command, *words)))


@pytest.mark.parametrize("command", sorted(CASES))
def test_zsh_reads_the_script(command: str, tmp_path: Path) -> None:
    zsh = _need("zsh")
    script = _script(command, "zsh", tmp_path)
    r = subprocess.run([zsh, "-n", str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    text = script.read_text()
    assert text.startswith(f"#compdef {command}") and ("search" in text or "query" in text)


def test_an_unknown_shell_is_refused() -> None:
    r = subprocess.run([str(BIN / "blz"), "completion", "tcsh"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.splitlines()[-1].startswith("blz: error: argument shell: invalid choice")
