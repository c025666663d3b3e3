"""core.secrets: which settings hold secrets, and their values hidden in text the view shows."""

from __future__ import annotations

import pytest

from occflow.core.secrets import is_secret_name, redact_settings, secret_values


@pytest.mark.parametrize("name", ["spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.access.key",
                                  "spark.sql.catalog.lake.token", "spark.ssl.keyPassword", "credential",
                                  "fs.azure.account.key.acct.dfs.core.windows.net", "s3.access-key-id"])
def test_names_of_secrets_are_recognised(name):
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ["spark.app.name", "spark.sql.shuffle.partitions", "spark.ssl.keyStore", "spark.jars"])
def test_other_settings_are_not_secrets(name):
    assert not is_secret_name(name)


def test_secret_values_walk_conf_and_catalog():
    config = {"conf": {"spark.hadoop.fs.s3a.secret.key": "S3KEY", "spark.app.name": "app"},
              "catalog": {"token": "TOKEN", "uri": "http://catalog"}, "master": "local[2]"}
    assert sorted(secret_values(config)) == ["S3KEY", "TOKEN"]


def test_redaction_hides_values_of_secret_settings_only():
    text = ('spark-submit --conf spark.hadoop.fs.s3a.secret.key=S3KEY --conf spark.app.name=app '
            '{"token": "TOK\\"EN", "uri": "http://h:1"} password: pw123')
    assert redact_settings(text) == ('spark-submit --conf spark.hadoop.fs.s3a.secret.key=*** --conf spark.app.name=app '
                                     '{"token": "***", "uri": "http://h:1"} password: ***')
