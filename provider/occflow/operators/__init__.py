"""The write operators: declare, admit, run, classify, decide, act (see docs/architecture.md)."""
