"""Inputs, comparison, timing, ceilings, worker processes and the runner."""
