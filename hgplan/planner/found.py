"""What the search keeps of a solved item (Found) and what a search returns (SearchResult): planner/search.py."""

from __future__ import annotations

from dataclasses import dataclass, field

from hgplan.plan import ParallelConfig, Plan, StageAssignment
from hgplan.planner.candidates import Candidate
from hgplan.planner.model import Solution
from hgplan.planner.tables import CostTables


@dataclass(slots=True, kw_only=True)
class Found:
    """A plan CP-SAT (or the warm start) found for one item, with its tables."""

    cfg: ParallelConfig
    tables: CostTables
    solution: Solution

    @property
    def time_us(self) -> float:
        """The tables' predicted iteration time (us)."""
        return self.solution.objective / self.cfg.vpp

    @property
    def bound_us(self) -> float:
        """CP-SAT's proven bound for this item (us)."""
        return self.solution.bound / self.cfg.vpp

    def plan(self) -> Plan:
        """The plan as the cost model and the validator see it."""
        stages = tuple(StageAssignment(node_group=self.tables.groups[k], num_layers=n)
                       for k, n in zip(self.solution.assign, self.solution.layers))
        return Plan(config=self.cfg, stages=stages)


@dataclass(slots=True, kw_only=True)
class SearchResult:
    """What a search found and what it proved."""

    found: list[Found]
    candidates_total: int
    candidates_solved: int
    candidates_pruned: int
    candidates_skipped: int
    candidates_infeasible: int
    bound_us: float
    deterministic_time: float
    wall_time_s: float
    stopped_by: str
    """'complete', 'budget' or 'wall'."""
    statuses: dict[str, int] = field(default_factory=dict)
    solver_limits: dict[str, float] = field(default_factory=dict)
    """The largest limits any solve of this search was given (max_time_in_seconds: the wall-clock safety net as
    configured; a solve near the time limit is cut to the time left, which the record leaves out to stay
    reproducible)."""
    last_model_text: str | None = None
    """The last CP-SAT model solved, in text format (only with SearchOptions.keep_model)."""
    listed_all: bool = True
    """False when the time limit ended while the candidates were being listed (then bound_us is 0)."""
    candidates: list[Candidate] = field(default_factory=list)
    """Every candidate listed (the proof of the gap on the reported time goes over them again)."""
    probed: list[Found] = field(default_factory=list)
    """The probes' plans (planner/probe.py) not among `found`, the best per configuration: ranked by the reported
    model beside the search's, not polished."""

    @property
    def best_us(self) -> float | None:
        """The best plan's tables objective (us), None if nothing was found."""
        return self.found[0].time_us if self.found else None

    @property
    def gap(self) -> float | None:
        """(best - bound) / best, proven under the tables."""
        if not self.found:
            return None
        return max(0.0, (self.best_us - self.bound_us) / self.best_us)
