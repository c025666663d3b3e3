"""Hostile and careless connection settings (issue 24): each a clear error naming what is
wrong, never a traceback from deep inside a parser, never a setting smuggled into a command."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from occflow.core.errors import InvalidDeclarationError
from occflow.engines.spark import SparkConfig, SparkConfigError
from occflow.hooks.extras import MAX_DEPTH, connection_extras
from occflow.hooks.spark import config_from_connection

pytestmark = pytest.mark.airflow


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 200, 5000, 100_000])
@pytest.mark.parametrize("bracket", ["[]", "{}"])
def test_extras_nested_deeper_than_any_setting_are_refused_naming_the_connection(depth, bracket):
    opening, closing = bracket
    inner = (opening if opening == "[" else '{"a":') * depth + "1" + closing * depth
    # What the hook gets from the metadata DB or a secrets backend: the extras as stored text.
    conn = SimpleNamespace(extra=json.dumps({"conf": {}})[:-1] + f', "catalog": {inner}}}')
    with pytest.raises(InvalidDeclarationError, match="connection 'hostile'.*nests deeper"):
        connection_extras(conn, "hostile")
    with pytest.raises(SparkConfigError, match="extra 'conf' nests deeper"):
        config_from_connection("local[2]", {"conf": inner})


def test_extras_that_are_not_an_object_are_refused_and_real_ones_read():
    with pytest.raises(InvalidDeclarationError, match="must be a JSON object"):
        connection_extras(SimpleNamespace(extra="[1, 2]"), "c")
    with pytest.raises(InvalidDeclarationError, match="is not JSON"):
        connection_extras(SimpleNamespace(extra="{'a': 1"), "c")
    real = {"table_format": "iceberg", "conf": {"spark.sql.shuffle.partitions": "4"}, "note": "[[[{{{"}
    assert connection_extras(SimpleNamespace(extra=json.dumps(real)), "c") == real


@pytest.mark.parametrize(
    "url",
    ["sc://h:1\n--conf x=y", "sc://h:1 --conf x=y", "sc://h:1\r\n", "sc://", "sc://h:1/;a=b c", "sc://h:1\x00",
     "http://h:1", "sc:/h:1"],
)
def test_a_spark_connect_url_with_anything_but_a_url_in_it_is_refused(url):
    with pytest.raises(SparkConfigError, match="Spark Connect URL"):
        SparkConfig(remote=url)
    if url.startswith("sc:/"):  # a connection's host starting so is read as a Spark Connect URL
        with pytest.raises(SparkConfigError):
            config_from_connection(url, {})


@pytest.mark.parametrize("url", ["sc://h:15002", "sc://spark.example.com:15002/;token=abc;use_ssl=true", "sc://[::1]:1"])
def test_real_spark_connect_urls_pass(url):
    assert SparkConfig(remote=url).remote == url


@pytest.mark.parametrize("master", ["local[*]\n--conf a=b", "spark://h:7077 --jars /x", "", "yarn\t"])
def test_a_master_url_with_spaces_or_line_breaks_is_refused(master):
    with pytest.raises(SparkConfigError, match="master must be a Spark master URL"):
        SparkConfig(master=master)
