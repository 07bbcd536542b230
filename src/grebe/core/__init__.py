"""The runtime: plans, plan master, dispatcher, engines, supervisor. Knows only types."""
