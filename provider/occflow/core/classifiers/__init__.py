"""The classifier's knowledge (marker table) and mechanics (evidence from an error's chain).

``occflow.core.classify.classify`` is the entry point; see docs/classifier.md.
"""
