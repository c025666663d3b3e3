"""A Delta table whose protocol needs table features the session's delta-spark lacks is a failure
no retry mends (issue 34, bad input): ``unsupported_table_features`` recognises delta-spark's
refusal and names the features; ``SparkSubmitTarget`` raises it as ``NeverRetry``.

The oracle for the text is delta-spark's own error catalogue, read from the manifest's jar
(``error/delta-error-classes.json``): the templates are filled as delta-spark fills them. The real
refusal, raised by delta-spark in a spark-submit driver on a table with a hand-written protocol, is
``tests/airflow/test_operators_delta_spark_submit.py``.
"""

from __future__ import annotations

import json
import zipfile
from typing import Any

import pytest

from occflow.core.operations import Operation
from occflow.engines.outcome import ErrorInfo, NeverRetry, WriteOutcome
from occflow.engines.spark.delta_spark import (
    UNSUPPORTED_FEATURE_ERRORS,
    UnsupportedTableFeature,
    unsupported_table_features,
)
from occflow.engines.spark.jvm_artifacts import DELTA_SPARK, jar
from occflow.engines.spark.settings import SparkConfigError
from occflow.engines.spark.submit_target import SparkSubmitTarget
from occflow.engines.target import AttemptContext


def _catalogue() -> dict[str, Any]:
    try:
        path = jar(DELTA_SPARK)
    except SparkConfigError as exc:
        pytest.skip(f"no delta-spark jar: {exc}")
    with zipfile.ZipFile(path) as archive:
        data: dict[str, Any] = json.loads(archive.read("error/delta-error-classes.json"))
    return data


def _refusal(error_class: str, table: str, features: str) -> ErrorInfo:
    """The error as delta-spark raises it: ``[CLASS] <template filled>`` on its exception."""
    template = " ".join(_catalogue()[error_class]["message"])
    text = (template.replace("<tableNameOrPath>", table).replace("<deltaVersion>", "3.3.3")
            .replace("<unsupported>", features))
    return ErrorInfo(
        exception_class="org.apache.spark.sql.delta.DeltaUnsupportedTableFeatureException",
        messages=(f"[{error_class}] {text}",),
        error_class=error_class,
    )


@pytest.mark.parametrize("error_class", sorted(UNSUPPORTED_FEATURE_ERRORS))
def test_the_refusal_names_the_features_and_never_retries(error_class: str) -> None:
    assert error_class in _catalogue()  # the jar still raises this error class
    found = unsupported_table_features("default.t", _refusal(error_class, "file:/w/t", "futureFeatureX, otherY"))
    assert isinstance(found, UnsupportedTableFeature) and isinstance(found, NeverRetry)
    assert found.features == "futureFeatureX, otherY" and found.delta_version == "3.3.3"
    assert found.side == UNSUPPORTED_FEATURE_ERRORS[error_class]
    assert "futureFeatureX, otherY" in str(found) and "a retry cannot change that" in str(found)
    # Only the error text (a driver's log tail, no error class): the same.
    text_only = _refusal(error_class, "file:/w/t", "futureFeatureX")
    again = unsupported_table_features("default.t", ErrorInfo("java.lang.RuntimeException", text_only.messages))
    assert again is not None and again.features == "futureFeatureX"


def test_other_errors_are_not_an_unsupported_feature() -> None:
    assert unsupported_table_features("default.t", None) is None
    conflict = ErrorInfo("io.delta.exceptions.ConcurrentAppendException",
                         ("[DELTA_CONCURRENT_APPEND] ConcurrentAppendException: Files were added ...",),
                         error_class="DELTA_CONCURRENT_APPEND")
    assert unsupported_table_features("default.t", conflict) is None
    # A table property naming an unknown feature is a configuration error, not this one.
    config = _refusal("DELTA_UNSUPPORTED_FEATURES_IN_CONFIG", "t", "x")
    assert unsupported_table_features("default.t", config) is None


def test_a_driver_refused_for_a_feature_fails_the_attempt_without_a_retry() -> None:
    refused = WriteOutcome(engine="spark-delta", table="default.t", operation=Operation.INSERT_INTO, committed=False,
                           seconds=1.0, error=_refusal("DELTA_UNSUPPORTED_FEATURES_FOR_WRITE", "t", "futureFeatureX"))
    target = SparkSubmitTarget({"table_format": "delta"}, "default.t", lambda declaration, attempt: refused)
    attempt = AttemptContext(number=1, before_commit=lambda: None)
    with pytest.raises(UnsupportedTableFeature, match="writer table feature.*futureFeatureX"):
        target.run_attempt(None, attempt)  # type: ignore[arg-type]  # the driver stand-in ignores it
