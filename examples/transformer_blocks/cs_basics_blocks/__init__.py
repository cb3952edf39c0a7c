"""The student's package for the Transformer blocks assignment: RMSNorm, SiLU and SwiGLU, RoPE."""
