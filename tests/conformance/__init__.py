"""The conformance suite's self-check: :mod:`molt.testing` run against a toy framework's reference adapter
and broken variants of it (the suite itself ships in molt-core as ``molt.testing``)."""
