"""Where the arms run: the Launcher protocol, one module per launcher, and what launchers share."""
