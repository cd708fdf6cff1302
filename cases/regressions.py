"""Regression cases (filled in below)."""
