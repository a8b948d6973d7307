"""The ``deltamq`` Spark data source: queues as streaming sources and sinks.

``spark.readStream.format("deltamq")`` consumes a queue (the broker grants
messages and settles them when a micro-batch commits; executors read the
bodies from the journal's files), ``spark.read.format("deltamq")`` browses
one, and ``df.write`` / ``df.writeStream`` with ``format("deltamq")``
publish rows with confirms.  The readers live in :mod:`lakehouse.spark_source`,
the writers in :mod:`lakehouse.spark_sink`; this class only hands Spark the
right one.  Sessions built by :func:`lakehouse.spark.spark_session` register
it; any other session can with ``spark.dataSource.register(DeltaMQDataSource)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, DataSourceWriter

if TYPE_CHECKING:
    from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader
    from pyspark.sql.types import StructType


class DeltaMQDataSource(DataSource):
    """Spark's entry to DeltaMQ queues (format name ``deltamq``)."""

    @classmethod
    def name(cls) -> str:
        return "deltamq"

    # -- reading: lakehouse.spark_source (schema, reader, streamReader) ---------------------

    def schema(self) -> str:
        from lakehouse.queue_reads import MESSAGE_SCHEMA_DDL

        return MESSAGE_SCHEMA_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        from lakehouse.spark_source import QueueBrowseReader, QueueOptions

        return QueueBrowseReader(QueueOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from lakehouse.spark_source import QueueOptions, QueueStreamReader

        return QueueStreamReader(QueueOptions.parse(self.options))

    # -- writing: lakehouse.spark_sink (writer, streamWriter) -------------------------------

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from lakehouse.spark_sink import DeltaMQWriter, SinkOptions

        return DeltaMQWriter(SinkOptions.parse(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from lakehouse.spark_sink import DeltaMQStreamWriter, SinkOptions

        return DeltaMQStreamWriter(SinkOptions.parse(self.options), schema, overwrite)
