"""Modes: each wires one feed to one consumer from the command line (``dashboard``, ``batch``,
``fleet``, ``exporter``, ``demo``, ``doctor`` and its ``selftest``); ``args`` parses and checks every
option before anything runs, ``common`` holds what they share at run time."""
