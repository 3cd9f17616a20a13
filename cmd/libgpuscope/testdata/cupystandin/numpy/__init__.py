"""Stands in for numpy, which interop_cupy.py imports: the pair part uses none of it."""
