"""The student's package for the multi-head self-attention assignment."""
