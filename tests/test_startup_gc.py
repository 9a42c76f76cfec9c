"""Start-up (issue 35): a process launched as the command line freezes the objects the import
made (gc.freeze: the collector never scans them, ~0.09 CPU-s of every command's start); a
program that imports the package has nothing of its heap frozen."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = ("import gc, sys\n"
         "{setup}\n"
         "import custody_app\n"
         "print(gc.get_freeze_count(), gc.isenabled())\n")


def _probe(setup: str, *flags: str) -> tuple[int, str]:
    done = subprocess.run([sys.executable, *flags, "-c", PROBE.format(setup=setup)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    frozen, enabled = done.stdout.split()
    return int(frozen), enabled


def test_a_program_importing_the_package_keeps_its_heap_unfrozen() -> None:
    assert _probe("") == (0, "True")


@pytest.mark.parametrize("setup", [
    "sys.argv[0] = '/opt/venv/bin/custody-app'",  # the console script
    "sys.orig_argv[:] = ['python3', '-u', '-m', 'custody_app', '--batch', '-']",  # python -m
    "sys.orig_argv[:] = ['python3', '-mcustody_app', 'verify']"])
def test_a_command_line_launch_freezes_what_the_import_made(setup: str) -> None:
    frozen, enabled = _probe(setup)
    assert frozen > 50_000 and enabled == "True"


@pytest.mark.parametrize("setup", ["gc.disable()",
                                   "sys.argv[0] = '/opt/venv/bin/custody-app'; gc.disable()"])
def test_a_collector_the_importer_disabled_stays_disabled_and_nothing_is_frozen(
        setup: str) -> None:
    assert _probe(setup) == (0, "False")
