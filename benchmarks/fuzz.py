"""Fuzz tally (issue 13): feed N generated documents (default 10,000) through validate, search, explain, export,
diff and report, and print how each command ended, the slowest cases and the peak memory. Exit 1 if any command raised
(a traceback for a user), exited with another code than 0-3, or took more than 10 s.

    python benchmarks/fuzz.py [--cases 10000] [--seed 20261123]
"""

from __future__ import annotations

import argparse
import collections
import functools
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz_cases import load_seeds, make_case, run_case  # noqa: E402
import typer.main  # noqa: E402
import typer.testing  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from hgplan.cli import app  # noqa: E402

PLAN_ARGS = ["search", "-c", "mixed-nic", "-m", "gpt-1.7b", "--seq-len", "1024", "--global-batch", "64", "--top", "1",
             "--no-baselines", "-o"]


# CliRunner rebuilds the click command on every invoke; the console script builds it once per process (as here).
if hasattr(typer.testing, "_get_command"):
    typer.testing._get_command = functools.cache(typer.main.get_command)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=20261123)
    args = ap.parse_args()
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plan = folder / "plan.json"
        r = runner.invoke(app, PLAN_ARGS + [str(plan)])
        if r.exit_code != 0:
            print(r.stderr, file=sys.stderr)
            return 2
        seeds = load_seeds(plan.read_text())
        start = time.perf_counter()
        outcomes = []
        for index in range(args.cases):
            outcomes += run_case(runner, app, make_case(seeds, args.seed, index), folder, plan)
        wall = time.perf_counter() - start
    tally = collections.Counter((o.command, o.exit_code) for o in outcomes)
    print(f"{args.cases} cases, {len(outcomes)} commands in {wall:.0f} s (seed {args.seed})")
    print(f"{'command':<10} {'runs':>6} " + " ".join(f"{'exit ' + str(c):>7}" for c in (0, 1, 2, 3)) + "   other")
    for command in ("validate", "search", "explain", "export", "diff", "report"):
        runs = [o for o in outcomes if o.command == command]
        counts = " ".join(f"{tally[(command, c)]:>7}" for c in (0, 1, 2, 3))
        other = sum(1 for o in runs if o.exit_code not in (0, 1, 2, 3))
        print(f"{command:<10} {len(runs):>6} {counts}   {other}")
    seconds = sorted(o.seconds for o in outcomes)
    print(f"per command: median {seconds[len(seconds) // 2] * 1000:.0f} ms, slowest {seconds[-1]:.2f} s")
    for o in sorted(outcomes, key=lambda o: -o.seconds)[:3]:
        print(f"  case {o.index} ({o.kind}: {o.mutation}) {o.command}: {o.seconds:.2f} s, exit {o.exit_code}")
    print(f"peak memory (whole process): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20:.2f} GiB")
    bad = [o for o in outcomes if o.crash or o.exit_code not in (0, 1, 2, 3) or o.seconds > 10]
    for o in bad[:20]:
        print(f"FAIL case {o.index} ({o.kind}: {o.mutation}) {o.command}: exit {o.exit_code} {o.crash}")
    print(f"failures: {len(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
