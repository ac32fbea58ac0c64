"""Workloads: what to send and when, built by hand, from telemetry, or from a trace."""
