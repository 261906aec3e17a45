"""Mutation testing of the harness: seeded bugs on the reference kernels (see catalog.py, runner.py)."""
