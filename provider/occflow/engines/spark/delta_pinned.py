"""delta-spark's own commands on a pinned snapshot, through Py4J (the conformance runner's later
jobs that have no query to hold at a gate: OPTIMIZE, a property change, a protocol upgrade).

Each runs the code the SQL command runs, on a snapshot read before the earlier job committed,
so its commit goes through Delta's own conflict check against that earlier commit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class PinnedDelta:
    """The few delta-spark internals the pinned later jobs call, through Py4J."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark
        self.jvm = spark._jvm
        self.js = spark._jsparkSession

    def _seq(self, items: Sequence[Any]) -> Any:
        lst = self.jvm.java.util.ArrayList()
        for item in items:
            lst.add(item)
        return self.jvm.scala.collection.JavaConverters.asScalaBufferConverter(lst).asScala().toSeq()

    def delta_log(self, table: str) -> tuple[Any, Any]:
        ident = self.js.sessionState().sqlParser().parseTableIdentifier(table)
        catalog_table = self.js.sessionState().catalog().getTableMetadata(ident)
        return self.jvm.org.apache.spark.sql.delta.DeltaLog.forTable(self.js, catalog_table), catalog_table

    def snapshot(self, table: str) -> tuple[Any, Any, Any]:
        log, catalog_table = self.delta_log(table)
        none = self.jvm.scala.Option.empty()
        return log, catalog_table, log.update(False, none, none)

    def optimize(self, pinned: tuple[Any, Any, Any], partitioned: bool) -> None:
        _log, catalog_table, snapshot = pinned
        parser = self.js.sessionState().sqlParser()
        predicates = self._seq([parser.parseExpression("ds = 'p'")] if partitioned else [])
        none = self.jvm.scala.Option.empty()
        context = self.jvm.org.apache.spark.sql.delta.commands.DeltaOptimizeContext(none, none, none, none, False)
        executor = self.jvm.org.apache.spark.sql.delta.commands.OptimizeExecutor(
            self.js, snapshot, self.jvm.scala.Some(catalog_table), predicates, self._seq([]), False, context
        )
        executor.optimize()

    def set_properties(self, pinned: tuple[Any, Any, Any], props: Mapping[str, str], read_all: bool) -> None:
        log, catalog_table, snapshot = pinned
        txn = log.startTransaction(self.jvm.scala.Some(catalog_table), self.jvm.scala.Some(snapshot))
        if read_all:
            txn.filterFiles()
        meta = snapshot.metadata()
        conf = meta.configuration()
        changed = conf.empty()
        for key, value in props.items():
            conf = conf.updated(key, value)
            changed = changed.updated(key, value)
        new_meta = meta.copy(
            meta.id(), meta.name(), meta.description(), meta.format(), meta.schemaString(),
            meta.partitionColumns(), conf, meta.createdTime(),
        )
        txn.updateMetadata(new_meta, False)
        operation = self.jvm.org.apache.spark.sql.delta.DeltaOperations.SetTableProperties(changed)
        txn.commit(self._seq([]), operation)


__all__ = ["PinnedDelta"]
