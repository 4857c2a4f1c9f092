"""Builders shared by several test files (tests never import each other)."""
