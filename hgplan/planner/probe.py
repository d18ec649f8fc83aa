"""Whole-fleet plans from the primal heuristic before the fleet search's first bound (planner/search.py, run_search).

The fleet search starts with the node groups' own plans as incumbents (planner/seeded.py). On a fleet of many small
groups each group alone is far slower than the fleet: on the 10-group benchmark fleet (640 GPUs over five sites,
llama3.1-70b) the best group alone runs 26.8 s where the fleet's best runs 7.2 s. Best-first refines every item whose
bound is below the incumbent before it solves one, and against 26.8 s no bound ends early (block_bound_us'
enough_us): that fleet's search spent 8.4 s on 1,763 block bounds before its first solve, which found the 7.2 s plan.

So before it, the search takes the candidates with the least bounds (PROBE_CANDIDATES at each interleaving depth, in
the heap's order, while their bound is below the incumbent less the gap) and, for each, the primal heuristic that
warm-starts every solve (planner/heuristic.py: greedy_hint, then improve) over every node group of the fleet, and over
each vendor's groups where the fleet has GPUs of several (a boundary between vendors goes through host memory over
gloo, costmodel/reshard.py, so the best plans often keep to one vendor). Each plan the tables accept
(CostTables.objective) is kept as an incumbent, with the tables of the groups it uses, as a search item's: a valid
plan of the family, so pruning against it keeps the gap proven. The search returns these plans apart (search._result:
ranked by the reported model, not polished), one among its own only where it is faster than every other plan found.
The probes are counted, not timed, so the same inputs give the same plan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace

from hgplan.domain import NodeGroup
from hgplan.plan import ParallelConfig
from hgplan.planner.candidates import Candidate
from hgplan.planner.costs import CostSource
from hgplan.planner.heuristic import greedy_hint, improve
from hgplan.planner.tables import CostTables, build_tables

PROBE_CANDIDATES = 5
"""Candidates probed per interleaving depth (those with the least bounds at each vpp). Interleaved candidates have the
least bounds on fleets over several sites, and their heuristic plans ring across the WAN: with the ten least bounds
whatever their depth, the 8-group benchmark fleet's probes were all interleaved and reached 9.67 s (optimum 4.95 s);
five per depth reach 5.38 s in the same 0.3 s, and the search's first solve came at 6.2 s instead of 7.3 s. On the
10-group fleet (2-core machine, single runs, 2026-11-30) the incumbent goes from 26.8 s to 7.5 s either way (0.26 s of
probes; the first solve at 4.9-5.3 s instead of 11.4 s without them), on the 1024-GPU three-site fleet to 4.28 s
instead of 4.47 s, on the 16- and 32-group, four-site and 504-GPU fleets to the same incumbents."""


def probe_sets(groups: list[NodeGroup]) -> list[list[NodeGroup]]:
    """The sets of node groups probed: all of them, and each vendor's where there are several."""
    vendors = sorted({g.gpu.vendor for g in groups})
    return [groups] + ([[g for g in groups if g.gpu.vendor == v] for v in vendors] if len(vendors) > 1 else [])


def probed_candidates(cands: list[Candidate]) -> list[Candidate]:
    """The PROBE_CANDIDATES candidates with the least bounds at each interleaving depth, by bound (the heap's order)."""
    taken: dict[int, int] = {}
    out = []
    for cand in sorted(cands, key=lambda c: c.key):
        if taken.get(cand.cfg.vpp, 0) < PROBE_CANDIDATES:
            taken[cand.cfg.vpp] = taken.get(cand.cfg.vpp, 0) + 1
            out.append(cand)
    return out


def probe_plans(costs: CostSource, cands: list[Candidate], groups: list[NodeGroup], order: list[str],
                below_us: Callable[[], float]) -> Iterator[tuple[ParallelConfig, CostTables, int, tuple]]:
    """(configuration, tables, objective, (assign, layers)) of each heuristic plan the tables accept, over
    probed_candidates while their bound is below below_us() (the caller's incumbent less the gap, read again for each
    candidate: the plans kept so far lower it)."""
    sets = probe_sets(groups)
    for cand in probed_candidates(cands):
        if cand.lower_bound_us >= below_us():
            return  # and every later one: they come by bound
        for chosen in sets:
            t = build_tables(costs, cand.cfg, chosen)
            if t is None:
                continue
            assign, layers = improve(t, greedy_hint(t, order))
            # kept as a search item's plan: tables of the groups it uses, each hosting a stage
            keys = [t.groups[k] for k in sorted(set(assign))]
            own = build_tables(costs, cand.cfg, [g for g in chosen if g.key in keys])
            assert own is not None and own.groups == tuple(keys), "the groups of a plan are eligible"
            own = replace(own, require_all=True)
            plan = [keys.index(t.groups[k]) for k in assign], list(layers)
            objective = own.objective(*plan)
            if objective is not None:
                yield cand.cfg, own, objective, plan
