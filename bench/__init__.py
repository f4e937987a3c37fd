"""kubepool benchmarks: `python -m bench` runs them all, `python -m bench.<part>` one part. Not tests: no
timing asserts; each part prints a table and writes JSON + Markdown under bench/results/."""
