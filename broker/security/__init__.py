"""Authentication: SASL parsing, password hashing, the provider types.

The provider *types* (``PasswordFile``, ``Anonymous``) are plugins of entry
point group ``deltamq.auth`` and subclass the model's
:class:`broker.model.authentication.AuthenticationProvider`; this package's
``__init__`` imports nothing from the model, so the model may import
:mod:`broker.security.principal` and :mod:`broker.security.addresses`
without a cycle.
"""

from __future__ import annotations

from broker.security.principal import Principal

__all__ = ["Principal"]
