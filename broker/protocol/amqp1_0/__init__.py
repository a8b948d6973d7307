"""AMQP 1.0: the type system codec, generated definitions, frames and message sections.

:mod:`.types` is the public face of the codec; :mod:`.framing` reads and
writes frames; :mod:`.sections` splits a message into its sections.
"""
