"""Hooks: each talks to one external system (a Spark cluster, a lease store)."""
