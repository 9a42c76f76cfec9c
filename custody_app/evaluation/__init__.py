"""The memory-mutation eval harness: scenarios, systems under test, scoring and signed reports."""

from __future__ import annotations

from custody_app.evaluation.runner import evaluate
from custody_app.evaluation.scenarios import ScenarioFile, builtin_scenarios_path, load_scenarios
from custody_app.evaluation.systems import LedgerMemory, MemoryUnderTest, OverwriteMemory

__all__ = ["LedgerMemory", "MemoryUnderTest", "OverwriteMemory", "ScenarioFile",
           "builtin_scenarios_path", "evaluate", "load_scenarios"]
