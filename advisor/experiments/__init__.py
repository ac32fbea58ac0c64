"""Single-mechanism A/B experiments against a real deployment."""
