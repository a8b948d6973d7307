"""HTTP management of DeltaMQ: the REST API over the model tree, web console, metrics.

Empty until the management plugin lands (issue 4); it will plug in through
the ``deltamq.management`` entry point for ports of type HTTP.
"""
