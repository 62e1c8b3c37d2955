"""Tables and figures, built only from stored results (R.csv, metrics.json, train.json)."""
