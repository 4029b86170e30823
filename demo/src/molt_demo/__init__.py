"""``molt demo``: the end-to-end demo (see :mod:`molt_demo.app`)."""
