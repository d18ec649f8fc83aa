"""The fleet search's probes (planner/probe.py) and the block bound's loops computed on first use
(block_bound._BlockBound.loop_slack)."""

from __future__ import annotations

import math

from test_block_work import crossing_sets

from hgplan.domain import TrainingSettings
from hgplan.io import catalog, resolve_cluster, resolve_model
from hgplan.plan import Plan, StageAssignment
from hgplan.planner import block_bound
from hgplan.planner.block_bound import block_bound_us
from hgplan.planner.candidates import enumerate_candidates
from hgplan.planner.costs import CostSource
from hgplan.planner.options import SearchOptions
from hgplan.planner.probe import PROBE_CANDIDATES, probe_plans, probe_sets, probed_candidates
from hgplan.planner.seeded import seeded_search
from hgplan.validate import check_plan


def _mixed_vendor():
    fleet, _, _ = resolve_cluster("mixed-vendor", catalog())
    model, _ = resolve_model("llama3.1-8b")
    return fleet, model, TrainingSettings(seq_length=4096, global_batch_size=512)


def test_probe_sets_are_the_fleet_and_each_vendor():
    fleet, _, _ = _mixed_vendor()
    groups = list(fleet.groups)
    sets = probe_sets(groups)
    assert sets[0] == groups
    assert sorted({g.gpu.vendor for g in s}.pop() for s in sets[1:]) == sorted({g.gpu.vendor for g in groups})
    assert len(sets) == 3
    nvidia = [g for g in groups if g.gpu.vendor == sets[1][0].gpu.vendor]
    assert probe_sets(nvidia) == [nvidia]  # one vendor: the groups themselves only


def test_probes_take_the_least_bounds_at_each_interleaving_depth():
    """Interleaved candidates have the least bounds over several sites; the probes take the PROBE_CANDIDATES least at
    each depth, in the heap's order."""
    fleet, model, train = _mixed_vendor()
    cands, _ = enumerate_candidates(CostSource(fleet, model, train), SearchOptions(), list(fleet.groups))
    by_vpp: dict[int, list] = {}
    for c in sorted(cands, key=lambda c: c.key):
        by_vpp.setdefault(c.cfg.vpp, []).append(c)
    picked = probed_candidates(cands)
    assert len(by_vpp) >= 2 and len(picked) == sum(min(len(cs), PROBE_CANDIDATES) for cs in by_vpp.values())
    assert picked == sorted((c for cs in by_vpp.values() for c in cs[:PROBE_CANDIDATES]), key=lambda c: c.key)


def test_probe_plans_are_valid_items_above_their_bounds():
    """Every plan a probe yields is a plan of the family as a search item holds it: tables of the groups it uses, each
    hosting a stage, the tables' objective its own, the validator's rules kept, and never below its candidate's lower
    bound (a plan below a proven bound would mean one of the two is wrong)."""
    fleet, model, train = _mixed_vendor()
    costs = CostSource(fleet, model, train)
    cands, _ = enumerate_candidates(costs, SearchOptions(), list(fleet.groups))
    order = [g.key for g in fleet.groups]
    got = list(probe_plans(costs, cands, list(fleet.groups), order, lambda: math.inf))
    assert len(got) >= PROBE_CANDIDATES  # the fleet and each of its two vendors, on the candidates probed
    by_cfg = {c.cfg: c for c in cands}
    for cfg, tables, objective, (assign, layers) in got:
        assert tables.require_all and set(assign) == set(range(len(tables.groups)))
        assert tables.objective(assign, layers) == objective
        assert objective / cfg.vpp >= by_cfg[cfg].lower_bound_us - 1
        plan = Plan(config=cfg, stages=tuple(StageAssignment(node_group=tables.groups[k], num_layers=n)
                                             for k, n in zip(assign, layers)))
        assert not check_plan(plan, fleet, model, train)
    # the incumbent decides how far the probes go: none below a bound that every candidate is above
    assert list(probe_plans(costs, cands, list(fleet.groups), order, lambda: 0.0)) == []


def test_search_keeps_the_probes_apart():
    """The probes' plans lower the incumbent below the groups alone (mixed-vendor: the best group alone is far slower
    than the fleet); the search returns them in `probed` (ranked, not polished), and one among its plans only where
    it is faster than every plan found otherwise."""
    fleet, model, train = _mixed_vendor()
    result, seeds = seeded_search(fleet, model, train, SearchOptions(budget_s=60), fork=False)
    probes = [f for f in result.found + result.probed if f.solution.status == "PROBE"]
    assert probes and min(f.time_us for f in probes) < min(f.time_us for f in seeds)
    assert all(f.solution.status == "PROBE" for f in result.probed)
    among = [f for f in result.found if f.solution.status == "PROBE"]
    assert len(among) <= 1
    if among:
        assert all(among[0].time_us < f.time_us for f in result.found if f is not among[0])


def test_loops_computed_late_give_the_same_bounds(monkeypatch):
    """The block bound computes 1F1B's loops through the WAN only when the feasibility check comes to them: on every
    set of three random three- and four-site fleets' candidates, with ends unknown and known, against no incumbent and
    a near one, the same bounds as with the loops computed when the bound is built; and some bounds never need them."""
    init, slack, computed = block_bound._BlockBound.__init__, block_bound._BlockBound._loop_slack, []

    def eager_init(self, *args, **kw):
        init(self, *args, **kw)
        self.loop_slack()

    def bounds() -> list[float]:
        out = []
        for cand, m, subset in crossing_sets():
            free = block_bound_us(cand.ctx, cand.cfg, subset, L=16, m=m, ends_known=False)
            near = free * 1.02 if math.isfinite(free) else math.inf
            for ends_known in (False, True):
                for enough in (math.inf, near):
                    out.append(block_bound_us(cand.ctx, cand.cfg, subset, L=16, m=m, ends_known=ends_known,
                                              enough_us=enough))
        return out

    monkeypatch.setattr(block_bound._BlockBound, "_loop_slack", lambda self: computed.append(1) or slack(self))
    late = bounds()
    late_loops = len(computed)
    monkeypatch.setattr(block_bound._BlockBound, "__init__", eager_init)
    assert bounds() == late
    assert len(late) >= 500 and 0 < late_loops < len(computed) - late_loops
