"""Development tooling the Makefile runs (the demo, the embedded servers of `make demo` and
`make test`); no product module imports it."""
