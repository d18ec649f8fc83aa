"""The cases of single-stage blocks the block bound splits the WAN crossings' loss into (planner/block_bound.py,
planner/wan_loops.py): a placement has none, one or more single-stage blocks, and its capacity and its crossings' loss
are bounded within its case, so a cycle no case admits is infeasible."""

from __future__ import annotations

import itertools

from hgplan.planner.wan_loops import Single


PAIR_CASES = 45
"""The most cases of two single-stage blocks single_cases refines into (a pair of classes each: 28 for eight classes of
one group, 36 for eight of two or more); above it, only the case of any two or more (20 classes all different: 190
pairs, each a capacity and a loss per cycle the bound tries)."""

Case = tuple[tuple[bool, ...], int, int, Single]
"""A case of single-stage blocks: which groups may host one, the fewest and most that do, what PairLoops may count."""


def single_cases(present: list[list[str]], by_speed: list[str], class_of: dict[str, int], sure: dict[str, int],
                 lone: int) -> tuple[list[Case], list[Case]]:
    """The cases of single-stage blocks the loops' loss is bounded in (groups in by_speed's order), and the
    refinement of the last: none; one, of each class that may; two or more. A placement falls in one case, and its
    layers and loss are bounded within it. The refinement of "two or more" (empty if lone < 2 or there are more
    than PAIR_CASES pairs): three or more, then two, of each pair of classes that may (a class twice if two of its
    groups may). Each refining case is a part of the case it refines (no more layers, no less loss), so only a cycle
    that case admits needs them; with them a capacity that puts its two single stages on the slowest groups no
    longer meets a loss that puts them on the fastest (the 8-group benchmark fleet's pp 26 set: 4.900 -> 4.985 s
    against its 5.069 s optimum). Three or more comes first: where it holds, the pairs are not tried (a fleet of 20
    groups all different: its block bounds 33.1 s with the pairs first, 28.7 s this way, 26.7 s without the pairs)."""
    may = tuple(sure[k] < 2 for k in by_speed)
    can = [i for i, c in enumerate(present) if any(sure[k] < 2 for k in c)]

    def case(classes: tuple[int, ...], least: int, most: int) -> Case:
        """Exactly `least` = `most` single stages, one per entry of `classes` (a class once per stage it hosts)."""
        hosts = tuple(ok and class_of[k] in classes for k, ok in zip(by_speed, may))
        forced = tuple(sorted({i for i in classes if classes.count(i) >= len(present[i])}))
        return hosts, least, most, (tuple(2 * min(classes.count(i), len(c)) for i, c in enumerate(present)), most,
                                    forced)

    cases = [case((), 0, 0)] + ([case((i,), 1, 1) for i in can] if lone >= 1 else [])
    if lone < 2:
        return cases, []
    anyone: Single = (tuple(2 * len(c) for c in present), lone, ())  # any groups that may, up to lone of them
    cases.append((may, 2, lone, anyone))
    pairs = [(i, j) for i, j in itertools.combinations_with_replacement(can, 2)
             if i != j or sum(sure[k] < 2 for k in present[i]) >= 2]
    if len(pairs) > PAIR_CASES:
        return cases, []
    more = [(may, 3, lone, anyone)] if lone >= 3 else []
    return cases, more + [case(pair, 2, 2) for pair in pairs]
