"""The course's experiments as figures, and the benchmark against torch's fused attention (staff code)."""
