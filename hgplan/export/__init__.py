"""Exporters: a validated plan -> launch arguments, scripts and environment for Megatron-LM, DeepSpeed, torchrun.

Pure functions: they return file names and contents; only the CLI writes them.
"""
