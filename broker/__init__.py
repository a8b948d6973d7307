"""DeltaMQ: an AMQP broker whose durable state lives in Delta Lake."""

__version__ = "0.1.0"
