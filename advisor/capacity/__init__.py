"""Capacity at the SLO: the highest arrival rate of a deployment's own traffic at which every SLO
holds (search.py: the rate search; trials.py: a trial run by the load generator)."""
