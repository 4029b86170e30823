"""Tests of the framework adapters; each subpackage runs in the environment where its framework lives."""
