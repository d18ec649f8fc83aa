"""Columns of a cost table that are interchangeable, read off the integers themselves.

Two groups k and k' of one table are interchangeable when relabelling k as k' (and k' as k) maps the tables onto
themselves: the same slots, layer, edge, memory and tail costs, and the same sends, latencies and tied-embedding
syncs to every other group and between each other. Then every placement and its relabelled twin have the same
objective, so CP-SAT may look only at placements whose interchangeable groups appear along the pipeline in index
order (model.py's _add_group_order), which removes up to n! equivalent optima per class of n groups. Reading the
symmetry off the tables (not off the fleet description) makes it hold by construction.
"""

from __future__ import annotations

from collections.abc import Sequence

from hgplan.planner.tables import CostTables


def _swap_invariant(t: CostTables, k: int, k2: int) -> bool:
    """Whether exchanging the labels k and k2 leaves every table unchanged."""
    def col_equal(rows: Sequence[Sequence[int]]) -> bool:
        return all(row[k] == row[k2] for row in rows)

    def sigma(i: int) -> int:
        return k2 if i == k else k if i == k2 else i

    K = len(t.groups)
    if not all(vec[k] == vec[k2] for vec in (t.slots, t.layer_us, t.first_us, t.last_us, t.cap_mib)):
        return False
    if not all(col_equal(rows) for rows in (t.mem_a_mib, t.mem_b_mib, t.tail_a_us, t.tail_b_us)):
        return False
    return all(mat[sigma(i)][sigma(j)] == mat[i][j] for mat in (t.send_us, t.lat_us, t.tied_us)
               for i in range(K) for j in range(K))


def table_classes(t: CostTables) -> tuple[tuple[int, ...], ...]:
    """The table's groups (indices) in classes of interchangeable ones, each class in index order. Exchanges
    compose, so a group interchangeable with a class's first member is interchangeable with all of it."""
    classes: list[list[int]] = []
    for k in range(len(t.groups)):
        home = next((c for c in classes if _swap_invariant(t, c[0], k)), None)
        if home is None:
            classes.append([k])
        else:
            home.append(k)
    return tuple(tuple(c) for c in classes)


def canonical_assign(classes: Sequence[Sequence[int]], assign: Sequence[int]) -> list[int]:
    """The placement relabelled so that each class's groups appear along the pipeline in index order (the same
    objective, by the symmetry)."""
    relabel: dict[int, int] = {}
    for members in classes:
        seen = list(dict.fromkeys(k for k in assign if k in members))
        relabel.update(zip(seen, sorted(members)[:len(seen)]))
    return [relabel.get(k, k) for k in assign]
