"""Schedules: how a lowered loop-IR kernel is laid out on the CPU (see default.py)."""

from .default import schedule

__all__ = ["schedule"]
