# Stand-in for python-fire (google/fire), which llm-analysis imports only for
# its command line; the benchmark calls the Python API directly.
def Fire(*args, **kwargs):
    raise SystemExit("fire stub: llm-analysis's command line is not used here")
