"""The ``wde`` command line: the root group, the core's commands and the hints of its error messages."""
