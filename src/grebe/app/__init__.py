"""The wiring: the one package that knows brokers, stores, models and flows together.

It turns the validated GrebeConfig into the runtime's pieces: core settings dataclasses
(`settings`), the plan bundle from the configured factory (`bundles`), the recipe engine
processes build it from (`engines`), the config checks made before anything starts
(`coverage`), and the running system itself (`supervisor.Runtime`, `grebe run`).
core/ stays below it and imports none of this.
"""
