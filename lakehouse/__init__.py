"""The Delta Lake side of DeltaMQ: the journal store (hot path) and the Spark side.

Empty until the Delta Lake journal lands (issue 3). ``lakehouse`` imports
``broker``; ``broker`` never imports ``lakehouse``: the journal store plugs in
through the ``deltamq.stores`` entry point, chosen by a virtual host node's
``type``.
"""
