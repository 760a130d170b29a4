"""wde-late-interaction: multi-vector (late-interaction) outputs, MaxSim, and the ``late_interaction`` task."""
