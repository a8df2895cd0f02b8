"""Running an engine's own test suite in a child pytest, as a test of ours: the counts, and the
failures named, for the assertion message of the test that ran it.

Used by adapters/vllm/tests/test_vllm_core_suite.py (vLLM's ``tests/v1/core``, three ways).
"""

from __future__ import annotations

import os
import subprocess
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class SuiteRun:
    passed: int = 0
    failed: list[str] = field(default_factory=list)  # node ids, with the first line of the error
    skipped: dict[str, str] = field(default_factory=dict)  # node id -> reason
    seconds: float = 0.0
    output_tail: str = ""

    def summary(self) -> str:
        return f"{self.passed} passed, {len(self.failed)} failed, {len(self.skipped)} skipped in {self.seconds:.0f} s"


def _node_id(case: ET.Element) -> str:
    """pytest's node id from a junit testcase (classname is the dotted module path)."""
    module = case.get("classname", "").replace(".", "/") + ".py"
    return f"{module}::{case.get('name')}"


def parse_junit(path: Path) -> SuiteRun:
    run = SuiteRun()
    for case in ET.parse(path).getroot().iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        skip = case.find("skipped")
        if problem is not None:
            first = (problem.get("message") or "").strip().splitlines()
            run.failed.append(f"{_node_id(case)}: {first[0][:200] if first else problem.tag}")
        elif skip is not None:
            run.skipped[_node_id(case)] = skip.get("message", "")
        else:
            run.passed += 1
    return run


def run_suite(python: str, cwd: Path, tests: list[str], plugin_dir: Path, plugin: str, env: dict[str, str],
              junit: Path, timeout: float = 1800) -> SuiteRun:
    """``python -m pytest -p PLUGIN --noconftest TESTS`` in ``cwd``, the plugin importable from
    ``plugin_dir``; the result read from its junit XML."""
    child_env = {**os.environ, **env}
    child_env["PYTHONPATH"] = os.pathsep.join(p for p in (str(plugin_dir), child_env.get("PYTHONPATH", "")) if p)
    args = [python, "-m", "pytest", "-p", plugin, "--noconftest", "-p", "no:cacheprovider", "-q",
            "--junitxml", str(junit), *tests]
    start = time.monotonic()
    proc = subprocess.run(args, cwd=cwd, env=child_env, capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - start
    output = proc.stdout + proc.stderr
    if not junit.is_file():
        raise AssertionError(f"pytest wrote no results (exit {proc.returncode}):\n{output[-4000:]}")
    run = parse_junit(junit)
    run.seconds = seconds
    run.output_tail = output[-4000:]
    if proc.returncode not in (0, 1):  # 1: some tests failed; anything else: pytest itself did
        raise AssertionError(f"pytest stopped with exit {proc.returncode}:\n{run.output_tail}")
    return run
