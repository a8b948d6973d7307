"""HTTP management of DeltaMQ: the REST API over the model tree, metrics, OpenAPI.

A plugin of the broker (entry point group ``deltamq.management``, name
``HTTP``), started for every port that carries HTTP; the broker never
imports it.  Modules:

- :mod:`mgmt.plugin` -- uvicorn on the broker's event loop, one per port;
- :mod:`mgmt.app` -- the Litestar application (routes, login, errors);
- :mod:`mgmt.rest` -- the REST API proper, independent of the HTTP server;
- :mod:`mgmt.paths` -- ``/api/latest/<category>/<names...>`` <-> objects;
- :mod:`mgmt.representation` -- objects as JSON, statistics and rates;
- :mod:`mgmt.rates` -- rates per second of counters;
- :mod:`mgmt.security` -- HTTP Basic, session cookies, the permission hook;
- :mod:`mgmt.errors` -- HTTP statuses and ``{"errorMessage": ...}``;
- :mod:`mgmt.openapi` -- the OpenAPI description, from the model's metadata;
- :mod:`mgmt.metrics` -- ``/metrics`` for Prometheus;
- :mod:`mgmt.ctl` -- ``deltamq status|list|purge``, a client of the REST API.
"""
