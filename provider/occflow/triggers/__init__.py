"""Triggers: serializable, async, and they hold no worker slot while a task waits."""
