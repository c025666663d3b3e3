"""The transaction core: pure Python, no Airflow, Spark, delta-rs or SQLAlchemy (see docs/architecture.md)."""
