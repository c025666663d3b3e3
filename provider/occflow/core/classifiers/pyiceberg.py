"""pyiceberg's conflict texts (Iceberg written from Python, no JVM): what its validation and its
catalogs raise when a commit loses a race, each row cited to pyiceberg's source. ``markers`` takes
them in as Iceberg markers; kept apart because pyiceberg words its own texts and moves them between
releases (``tests/engines/test_pyiceberg_classifier.py`` scans the installed source for each)."""

from __future__ import annotations

from ..kinds import ConflictKind

K = ConflictKind

# PyIceberg 0.12 (no JVM) raises its own texts, not the Java ones of ``markers``. It validates a write
# against concurrent commits only when it retries a commit that lost the race for the catalog
# pointer (Transaction.commit_transaction -> _rebuild_snapshot_updates -> _validate_concurrency,
# table/__init__.py), so each ValidationException below is a lost race seen from a fresh snapshot:
# the same case as Iceberg's MergingSnapshotProducer texts, so the same kind. Line numbers are of
# pyiceberg 0.12.0. "Found new conflicting delete files that can apply to records matching"
# (validate.py:356, _validate_no_new_delete_files) and "Missing required files to delete: "
# (table/update/snapshot.py:876, _OverwriteFiles._validate_required_deletes) are Java's words and
# are matched by the Iceberg rows of ``markers``.
PYICEBERG_VALIDATE = "apache/iceberg-python pyiceberg/table/update/validate.py (pyiceberg 0.12.0)"
PYICEBERG_SNAPSHOT = "apache/iceberg-python pyiceberg/table/update/snapshot.py (pyiceberg 0.12.0)"
PYICEBERG_SQL = "apache/iceberg-python pyiceberg/catalog/sql.py (pyiceberg 0.12.0)"
PYICEBERG_TEMPLATES: tuple[tuple[ConflictKind, str, str], ...] = (
    # A concurrent commit added data files matching this write's filter (serializable isolation):
    # Java's "Found conflicting files that can contain records matching".
    (
        K.VALIDATION_CONFLICT,
        r"Added data files were found matching the filter for snapshots ",
        PYICEBERG_VALIDATE + " line 331 _validate_added_data_files",
    ),
    # A concurrent commit deleted data files matching this write's filter: Java's "Found
    # conflicting deleted files that can contain records matching".
    (
        K.VALIDATION_CONFLICT,
        r"Deleted data files were found matching the filter for snapshots ",
        PYICEBERG_VALIDATE + " line 196 _validate_deleted_data_files",
    ),
    # A file this commit replaces was removed by a concurrent commit: Java's "Cannot commit,
    # missing data files".
    (
        K.VALIDATION_CONFLICT,
        r"Data files were concurrently deleted: \[",
        PYICEBERG_VALIDATE + " line 223 _validate_data_files_exist",
    ),
    # A concurrent commit added a delete file for a data file this commit replaces (a merge-on-read
    # writer, e.g. Spark, beside a pyiceberg overwrite): Java's "found new delete for replaced data
    # file", in pyiceberg's words ("replace", no colon).
    (
        K.VALIDATION_CONFLICT,
        r"Cannot commit, found new delete for replace data file ",
        PYICEBERG_VALIDATE + " line 388 _validate_no_new_deletes_for_data_files",
    ),
    # The write's starting snapshot was expired while it ran: the history to validate is gone (Java's
    # "Cannot determine history between starting snapshot"); a new attempt starts from a live one.
    (
        K.VALIDATION_CONFLICT,
        r"Cannot find starting snapshot -?\d+",
        PYICEBERG_SNAPSHOT + " line 117 CommitWindow.resolve",
    ),
    # The SQL catalog's compare-and-swap on metadata_location found another writer's pointer (the
    # CommitFailedException class is marked above; this is its text, for logs that lost the class).
    (
        K.COMMIT_FAILED,
        r"Table has been updated by another process: \S+",
        PYICEBERG_SQL + " lines 536 and 553 SqlCatalog.commit_table",
    ),
)
