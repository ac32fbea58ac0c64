"""The experiment's design: the deployment spec, the plan, how many blocks it needs, its manifest."""
