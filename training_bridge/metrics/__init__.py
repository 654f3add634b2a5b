"""Standard caption metrics and correlation statistics, in plain Python/NumPy (no Django import)."""
