"""TaskFlow decorators: ``@task.occflow_write(...)`` (or ``from occflow.decorators import occflow_write``)."""

from .occflow_write import occflow_write

__all__ = ["occflow_write"]
