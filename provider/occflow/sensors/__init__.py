"""Sensors: wait for a commit on a table, or for a footprint free of conflicting writes."""
