"""A port's TLS attributes (Broker-J's names) and the TLS context they make.

An HTTP port whose ``transports`` are ``["SSL"]`` serves HTTPS
(:meth:`TlsPortAttributes.https_tls_context`).  An AMQP port whose
``transports`` include ``SSL`` serves TLS: ``["SSL"]``
only TLS, ``["TCP", "SSL"]`` both on one port number (the first byte tells
them apart, :class:`broker.transport.tls.TlsStart`).  Such a port names

* ``keyStore``: the :class:`~broker.model.keystore.KeyStore` whose
  certificate it presents (mandatory);
* ``trustStores``: the :class:`~broker.model.keystore.TrustStore` s that
  client certificates are verified against;
* ``needClientAuth`` (a client without a trusted certificate fails the
  handshake) or ``wantClientAuth`` (a certificate is asked for, and verified
  if given, but not required); neither: none is asked for;
* ``tlsProtocolAllowList`` (default TLS 1.2 and 1.3) and
  ``tlsCipherSuiteAllowList`` (OpenSSL cipher names for TLS 1.2; empty:
  OpenSSL's secure defaults);
* ``useFullDN``: for SASL EXTERNAL, the user name is the certificate
  subject's full distinguished name; otherwise (the default) its CN, followed
  by ``@`` and the domain components when the subject has any, as Broker-J's
  External provider does.

:meth:`TlsPortAttributes.tls_context` gives the server context for the next
connection, rebuilt when an attribute or a store changes (a store's
``reload``); changes apply to the next connection, as every port attribute.
"""

from __future__ import annotations

import logging
import ssl
from typing import TYPE_CHECKING, Any, cast

from broker.errors import ConfigurationError
from broker.model.attributes import attribute
from broker.security.certificates import DEFAULT_TLS_PROTOCOLS, check_protocols, server_context

if TYPE_CHECKING:
    from broker.model.keystore import KeyStore, TrustStore

log = logging.getLogger(__name__)

#: the transports that mean TLS
TLS_TRANSPORTS = ("SSL", "WSS")


class TlsPortAttributes:
    """Mixed into a Port category: the TLS attributes, checked and made into an SSLContext."""

    key_store = attribute(str, default="",
                          description="The KeyStore whose certificate the port presents"
                                      " (mandatory when 'transports' includes SSL)")
    trust_stores = attribute(list, of=str, default=[],
                             description="TrustStores that client certificates are verified"
                                         " against")
    need_client_auth = attribute(bool, default=False,
                                 description="Clients must present a trusted certificate")
    want_client_auth = attribute(bool, default=False,
                                 description="Clients are asked for a certificate, verified if"
                                             " given, not required")
    tls_protocol_allow_list = attribute(list, of=str, default=list(DEFAULT_TLS_PROTOCOLS),
                                        description="TLS versions allowed: TLSv1.2, TLSv1.3"
                                                    " (TLSv1, TLSv1.1 only if OpenSSL allows)")
    tls_cipher_suite_allow_list = attribute(
        list, of=str, default=[],
        description="OpenSSL cipher suite names allowed for TLS 1.2 (empty: OpenSSL's secure"
                    " defaults; TLS 1.3 suites are OpenSSL's)")
    use_full_dn = attribute(bool, default=False, name="useFullDN",
                            description="SASL EXTERNAL: the user name is the client"
                                        " certificate's full subject DN, not its CN")

    _tls_cache: tuple[tuple[Any, ...], ssl.SSLContext] | None = None

    @property
    def serves_tls(self) -> bool:
        """``transports`` names SSL (or WSS: WebSocket over TLS needs the key store too)."""
        return any(t.name in TLS_TRANSPORTS for t in cast(Any, self).transports)

    def validate_tls(self) -> None:
        """The TLS attributes make sense, and, on a TLS port, make a context."""
        port = cast(Any, self)
        check_protocols(self.tls_protocol_allow_list, port.label)
        self._stores()
        if self.serves_tls:
            self.tls_context()

    def _stores(self) -> tuple[KeyStore | None, list[TrustStore]]:
        port = cast(Any, self)
        broker = port.parent
        key_store = None
        if self.key_store:
            key_store = broker.child("KeyStore", self.key_store) if broker is not None else None
            if key_store is None:
                raise ConfigurationError(f"{port.label}: key store '{self.key_store}' does not"
                                         " exist")
        elif self.serves_tls:
            raise ConfigurationError(f"{port.label}: attribute 'keyStore' is mandatory when"
                                     " 'transports' includes SSL or WSS")
        trust_stores = []
        for name in self.trust_stores:
            found = broker.child("TrustStore", name) if broker is not None else None
            if found is None:
                raise ConfigurationError(f"{port.label}: trust store '{name}' does not exist")
            trust_stores.append(found)
        if (self.need_client_auth or self.want_client_auth) and not trust_stores \
                and self.serves_tls:
            raise ConfigurationError(f"{port.label}: 'needClientAuth' and 'wantClientAuth'"
                                     " need 'trustStores' to verify client certificates with")
        return key_store, trust_stores

    def _tls_stamp(self) -> tuple[tuple[Any, ...], KeyStore, list[TrustStore]]:
        """What the context is made of: (a stamp that changes with any of it, the stores)."""
        key_store, trust_stores = self._stores()
        assert key_store is not None
        stamp = (key_store.name, key_store.generation,
                 tuple((t.name, t.generation) for t in trust_stores),
                 self.need_client_auth, self.want_client_auth,
                 tuple(self.tls_protocol_allow_list), tuple(self.tls_cipher_suite_allow_list))
        return stamp, key_store, trust_stores

    def tls_context(self) -> ssl.SSLContext:
        """The server context for the next TLS connection (ConfigurationError when it cannot
        be made: no key store, a cipher list OpenSSL does not know...)."""
        port = cast(Any, self)
        stamp, key_store, trust_stores = self._tls_stamp()
        cached = self._tls_cache
        if cached is not None and cached[0] == stamp:
            return cached[1]
        context = server_context(
            key_store.material, [c for t in trust_stores for c in t.trusted],
            need_client_auth=self.need_client_auth, want_client_auth=self.want_client_auth,
            protocols=self.tls_protocol_allow_list,
            cipher_suites=self.tls_cipher_suite_allow_list, what=port.label)
        self._tls_cache = (stamp, context)
        return context

    def https_tls_context(self) -> ssl.SSLContext:
        """The context of a server that keeps one for every connection (uvicorn on an HTTP
        port): at each handshake it hands the connection the port's current context, so a
        reloaded key or trust store serves new connections there too.  (The verify mode stays
        the first context's: OpenSSL keeps a connection's own.)"""
        first = self.tls_context()

        def current(connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None,
                    context: ssl.SSLContext) -> None:
            latest = self.connection_tls_context()
            if latest is not context:
                connection.context = latest
        first.sni_callback = current
        return first

    def connection_tls_context(self) -> ssl.SSLContext:
        """:meth:`tls_context` for a connection being accepted: if a new context cannot be
        made, the last one serves (logged), so no connection meets a configuration error.
        It is tried once per change: until the stores or the attributes change again, the
        last context serves every connection without another try (nor another log line)."""
        try:
            return self.tls_context()
        except ConfigurationError as exc:
            cached = self._tls_cache
            if cached is None:
                raise
            log.error("%s keeps its TLS context: %s", cast(Any, self).label, exc.text or exc)
            try:
                self._tls_cache = (self._tls_stamp()[0], cached[1])
            except ConfigurationError:
                pass                    # a store gone: tried again next time
            return cached[1]
