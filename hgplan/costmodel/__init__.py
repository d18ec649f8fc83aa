"""Analytical cost model: FLOPs, compute time, communication, memory and pipeline schedule.

Knows nothing about the solver. Every equation is written out in docs/cost-model.md.
"""
