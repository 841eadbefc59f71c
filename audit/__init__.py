"""honestci's core: data model, statistics, gates, claims and the command line.

Heavy libraries (PyMC, ArviZ, torch) are imported lazily by the modules that need them, so that
``import audit`` and the CLI's start-up stay fast.
"""

__version__ = "0.1.0"
