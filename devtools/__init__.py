"""Tools for developers and CI that drive a running Lepus from outside (no Django import): the
browser checks shared by the browser tests and the demo walk (`scripts/demo_walk.py`)."""
