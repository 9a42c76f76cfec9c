"""Runs scenarios against each memory under test and scores every read the same way."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from custody_app.domain.chain import canonical
from custody_app.evaluation.scenarios import (
    EXPECT,
    EXPECT_ERROR,
    HARNESS_KEYS,
    READ_OPS,
    Scenario,
    ScenarioFile,
)
from custody_app.evaluation.systems import MemoryUnderTest


class Score(BaseModel):
    model_config = ConfigDict(frozen=True)


class ReadScore(Score):
    """One read: what was expected, what came back, and how it counts."""

    scenario: str
    op_index: int
    expect: Any
    got: list[Any]
    correct: bool
    stale: bool
    contradiction: bool
    blast_radius: bool


class OpProblem(Score):
    """An op whose outcome differs from the scenario's: refused unexpectedly, or accepted
    where the scenario expected a refusal (`expect_error`), or refused with another code."""

    scenario: str
    op_index: int
    op: str
    expected_error: str | None
    got_error: str | None


class Tally(Score):
    reads: int = 0
    correct: int = 0
    stale: int = 0
    contradictions: int = 0
    blast_radius: int = 0
    op_errors: int = 0

    @property
    def perfect(self) -> bool:
        return (self.correct == self.reads and self.stale == 0 and self.contradictions == 0
                and self.op_errors == 0)


class ScenarioScore(Tally):
    name: str


class SystemScore(Tally):
    """Totals for one system over every scenario, with the detail behind them."""

    system: str
    scenarios: list[ScenarioScore]
    read_scores: list[ReadScore]
    problems: list[OpProblem]


class EvalResult(Score):
    scenarios_source: str
    scenarios_digest: str
    scenario_count: int
    systems: list[SystemScore]


def _same(a: Any, b: Any) -> bool:
    return canonical(a) == canonical(b)


def score_read(scenario: Scenario, index: int, expect: Any, got: list[Any]) -> ReadScore:
    """correct: exactly one value equal to the expectation, or none when null is expected;
    stale: not correct, and the expected value missing or more than one value returned;
    contradiction: more than one value; blast radius: a returned value was marked bad."""
    op = scenario.ops[index]
    if expect is None:
        correct = not got
        missing = bool(got)
    else:
        correct = len(got) == 1 and _same(got[0], expect)
        missing = not any(_same(v, expect) for v in got)
    bad = scenario.bad_values()
    blast = any((op["subject"], op["predicate"], canonical(v)) in bad for v in got)
    return ReadScore(scenario=scenario.name, op_index=index, expect=expect, got=got,
                     correct=correct, stale=not correct and (missing or len(got) > 1),
                     contradiction=len(got) > 1, blast_radius=blast)


def run_scenario(memory: MemoryUnderTest, scenario: Scenario
                 ) -> tuple[list[ReadScore], list[OpProblem]]:
    memory.reset()
    reads: list[ReadScore] = []
    problems: list[OpProblem] = []
    for index, op in enumerate(scenario.ops):
        clean = {k: v for k, v in op.items() if k not in HARNESS_KEYS}
        if op["op"] in READ_OPS:
            reads.append(score_read(scenario, index, op[EXPECT], memory.read(clean)))
            continue
        got = memory.write(clean)
        wanted = op.get(EXPECT_ERROR)
        if got != wanted:
            problems.append(OpProblem(scenario=scenario.name, op_index=index, op=op["op"],
                                      expected_error=wanted, got_error=got))
    return reads, problems


def _tally(reads: list[ReadScore], problems: list[OpProblem]) -> dict[str, int]:
    return {"reads": len(reads), "correct": sum(r.correct for r in reads),
            "stale": sum(r.stale for r in reads),
            "contradictions": sum(r.contradiction for r in reads),
            "blast_radius": sum(r.blast_radius for r in reads), "op_errors": len(problems)}


def score_system(memory: MemoryUnderTest, scenarios: list[Scenario]) -> SystemScore:
    all_reads: list[ReadScore] = []
    all_problems: list[OpProblem] = []
    per: list[ScenarioScore] = []
    try:
        for scenario in scenarios:
            reads, problems = run_scenario(memory, scenario)
            per.append(ScenarioScore(name=scenario.name, **_tally(reads, problems)))
            all_reads += reads
            all_problems += problems
    finally:
        memory.close()
    return SystemScore(system=memory.name, scenarios=per, read_scores=all_reads,
                       problems=all_problems, **_tally(all_reads, all_problems))


def evaluate(scenarios: ScenarioFile, memories: list[MemoryUnderTest]) -> EvalResult:
    """Every scenario against every memory, scored identically."""
    return EvalResult(scenarios_source=scenarios.source, scenarios_digest=scenarios.digest,
                      scenario_count=len(scenarios.scenarios),
                      systems=[score_system(m, scenarios.scenarios) for m in memories])
