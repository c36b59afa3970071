"""Compute on one device: the workload's operators, their timing (GEMM, attention, vector) and the tuner that
searches GEMM tilings, and eq. 5 (a GEMM overlapped with the collective it feeds)."""
