"""Planner: outer enumeration of degrees, CP-SAT over stage placement and layers, baselines."""
