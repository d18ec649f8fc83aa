"""Where a pipeline over two or more node groups may lie, for the candidate bound (planner/bounds.py
candidate_bound_s): inside one site, with that site's slots and its cheapest crossing, or over two sites or more,
with every slot and a crossing between sites (the cheapest WAN send and latency). A placement lies in exactly one,
so the least over them is a bound; the fleet-wide cheapest crossing alone says nothing of the WAN.

Legend as in planner/bounds.py (L, p, v, m, tau)."""

from __future__ import annotations

import bisect
import itertools
import math
from typing import NamedTuple


class Span(NamedTuple):
    """The slots and crossings a pipeline over two or more groups of some part of the fleet has (seconds)."""

    fastest: tuple[tuple[float, int], ...]
    """(tau, stage slots) per class of the part, fastest first."""
    total_slots: int
    cross_send: float
    """The cheapest send and latency of a crossing every such pipeline has (inf: none is possible)."""
    cross_lat: float
    first_min: float
    last_min: float
    upto: tuple[int, ...]
    """Slots, seconds per layer and layers per second summed over them, of the classes up to each of `fastest`."""
    work_upto: tuple[float, ...]
    rate_upto: tuple[float, ...]


def site_spans(classes: tuple[tuple[str, ...], ...], bounds: dict, pair_send: dict,
               pair_lat: dict) -> tuple[Span, ...]:
    """Each site's span (its classes; the crossings inside it) and, with two sites or more, the fleet's (every class;
    the crossings that join two sites, keyed None). A class lies in one site (planner/classes.py); `bounds`: each
    class's first key -> its bounds.GroupBound; the pairs as on the bound context."""
    site = {k: c[0].split("/")[0] for c in classes for k in c}
    cheapest: dict[str | None, tuple[float, float]] = {}
    for (a, b), send in pair_send.items():
        where = site[a] if site[a] == site[b] else None
        least = cheapest.get(where, (math.inf, math.inf))
        cheapest[where] = (min(least[0], send), min(least[1], pair_lat[(a, b)]))
    parts = [(s, [c for c in classes if site[c[0]] == s]) for s in sorted(set(site.values()))]
    out = []
    for where, members in parts + ([(None, list(classes))] if len(parts) > 1 else []):
        if where not in cheapest:  # no crossing there (one group): no pipeline of two groups or more lies there
            continue
        per_class = [(bounds[c[0]], len(c)) for c in members]
        fastest = tuple(sorted((gb.layer_s, gb.slots * n) for gb, n in per_class))
        send, lat = cheapest[where]
        out.append(Span(fastest=fastest, total_slots=sum(n for _, n in fastest), cross_send=send, cross_lat=lat,
                        first_min=min(gb.first_s for gb, _ in per_class),
                        last_min=min(gb.last_s for gb, _ in per_class),
                        upto=tuple(itertools.accumulate(n for _, n in fastest)),
                        work_upto=tuple(itertools.accumulate(tau * n for tau, n in fastest)),
                        rate_upto=tuple(itertools.accumulate(n / tau for tau, n in fastest))))
    return tuple(out)


def span_terms(span: Span, *, L: int, p: int, v: int, m: int) -> tuple | None:
    """candidate_bound_s's terms for a pipeline of p stages over two or more groups of `span` (None: none fits): its
    p fastest slots (the classes before the j-th whole, some of the j-th), each stage at least v layers, one crossing at
    the span's cheapest; as (the value without the integer cycle, the cycle so far, the least work, the edges and
    crossing, span, j)."""
    fastest, cross_send, cross_lat = span.fastest, span.cross_send, span.cross_lat
    if span.total_slots < p or not math.isfinite(cross_send):
        return None
    j = bisect.bisect_left(span.upto, p)
    tau, before = fastest[j][0], span.upto[j] - fastest[j][1]
    work = v * ((span.work_upto[j - 1] if j else 0.0) + (p - before) * tau) + (L - v * p) * fastest[0][0]
    # a stage next to the crossing sends it and holds at least v layers; the p-th fastest slot's stage, v layers;
    # the p slots hold L layers (integer_cycle_bound's continuous start)
    rate = (span.rate_upto[j - 1] if j else 0.0) + (p - before) / tau
    cyc = max(v * cross_send + v * fastest[0][0], v * tau, L / rate)
    if v == 1 and m >= 3:  # 1F1B's loop of two micro-batches through the crossing (costmodel/pipeline.py)
        cyc = max(cyc, cross_send + cross_lat + fastest[0][0])
    rest = 2 * cross_send + 2 * cross_lat + span.first_min + span.last_min
    return (v * m - 1) * cyc + work + rest, cyc, work, rest, span, j


def span_slots(span: Span, p: int, j: int) -> list[tuple[float, int, float]]:
    """The p fastest slots of `span` as bounds.Slots: the classes before the j-th whole (span_terms' j), the rest of
    the p on the j-th."""
    before = span.upto[j] - span.fastest[j][1]
    return [(tau, n, 0.0) for tau, n in span.fastest[:j] if n] + [(span.fastest[j][0], p - before, 0.0)]
