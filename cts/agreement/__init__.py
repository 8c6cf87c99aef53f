"""``python -m cts.agreement <sweep> --labels <file>``: how well a sweep's judges agree with people."""
