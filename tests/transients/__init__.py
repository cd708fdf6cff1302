"""The kernel transient table (conformance/models/transients/), measured one kernel family per module."""
