"""Course tooling: one source for two trees, grading, and hole finding."""
