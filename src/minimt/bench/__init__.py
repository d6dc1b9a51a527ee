"""Benchmarks: model FLOPs, speed and memory measurements, JoeyNMT side by side."""
